#include "sinks/prometheus.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>  // mkdtemp
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "sinks/prometheus_owners.hpp"
#include "support/built_paths.hpp"

namespace sonde::prom {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(PrometheusRender, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value(R"(a"b\c)"
                               "\n"),
            R"(a\"b\\c\n)");
  EXPECT_EQ(escape_label_value("plain"), "plain");
}

TEST(PrometheusRender, EscapesHelpPerFormat) {
  EXPECT_EQ(escape_help("a\\b\n\"q\"", Format::prometheus), "a\\\\b\\n\"q\"");
  EXPECT_EQ(escape_help("a\\b\n\"q\"", Format::openmetrics), "a\\\\b\\n\\\"q\\\"");
}

TEST(PrometheusRender, SanitizesNames) {
  EXPECT_EQ(sanitize_name("sonde_plugin_My-Lustre.read"), "sonde_plugin_my_lustre_read");
  EXPECT_EQ(sanitize_name("__a__b__"), "a_b");
  EXPECT_EQ(sanitize_name("0abc"), "x_0abc");
  EXPECT_EQ(sanitize_name(""), "x_");
}

TEST(PrometheusRender, FormatsSpecialValues) {
  EXPECT_EQ(format_value(kNaN), "NaN");
  EXPECT_EQ(format_value(kInf), "+Inf");
  EXPECT_EQ(format_value(-kInf), "-Inf");
  EXPECT_EQ(format_value(-0.0), "0");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

std::vector<Family> sample_families() {
  return {
      {"sonde_disk_read_bytes", Type::counter, "Bytes read.", "bytes", {{{}, 42}}},
      {"sonde_cpu_utilization_ratio",
       Type::gauge,
       "Busy \"fraction\".",
       "ratio",
       {{{{"cpu", "0"}}, 0.5}, {{{"cpu", "1"}}, kNaN}}},
      {"sonde_build", Type::info, "Version.", "", {{{{"version", "1\"2"}}, 1}}},
      {"sonde_empty", Type::gauge, "No samples: left out.", "", {}},
  };
}

TEST(PrometheusRender, TextFormat004) {
  std::string out;
  render(sample_families(), Format::prometheus, out);
  EXPECT_EQ(out,
            "# HELP sonde_disk_read_bytes_total Bytes read.\n"
            "# TYPE sonde_disk_read_bytes_total counter\n"
            "sonde_disk_read_bytes_total 42\n"
            "# HELP sonde_cpu_utilization_ratio Busy \"fraction\".\n"
            "# TYPE sonde_cpu_utilization_ratio gauge\n"
            "sonde_cpu_utilization_ratio{cpu=\"0\"} 0.5\n"
            "sonde_cpu_utilization_ratio{cpu=\"1\"} NaN\n"
            "# HELP sonde_build_info Version.\n"
            "# TYPE sonde_build_info gauge\n"
            "sonde_build_info{version=\"1\\\"2\"} 1\n");
}

TEST(PrometheusRender, OpenMetrics) {
  std::string out;
  render(sample_families(), Format::openmetrics, out);
  EXPECT_EQ(out,
            "# HELP sonde_disk_read_bytes Bytes read.\n"
            "# TYPE sonde_disk_read_bytes counter\n"
            "# UNIT sonde_disk_read_bytes bytes\n"
            "sonde_disk_read_bytes_total 42\n"
            "# HELP sonde_cpu_utilization_ratio Busy \\\"fraction\\\".\n"
            "# TYPE sonde_cpu_utilization_ratio gauge\n"
            "# UNIT sonde_cpu_utilization_ratio ratio\n"
            "sonde_cpu_utilization_ratio{cpu=\"0\"} 0.5\n"
            "sonde_cpu_utilization_ratio{cpu=\"1\"} NaN\n"
            "# HELP sonde_build Version.\n"
            "# TYPE sonde_build info\n"
            "sonde_build_info{version=\"1\\\"2\"} 1\n");
  EXPECT_EQ(kOpenMetricsEof, "# EOF\n");
}

TEST(PrometheusRender, Negotiation) {
  EXPECT_EQ(negotiate(""), Format::prometheus);
  EXPECT_EQ(negotiate("text/plain;version=0.0.4"), Format::prometheus);
  EXPECT_EQ(negotiate("application/openmetrics-text;version=1.0.0,application/"
                      "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5"),
            Format::openmetrics);
}

TEST(PrometheusRateIntegrator, GivesTheCounterBack) {
  // A counter read at t = 10, 10.5, (failed at 11), 11.5, 12: 1000, 1050, -, 1250, 1250. The
  // rate handler gives 0 (baseline), 100/s, NaN, 200/s (over the 1 s since the last good read), 0.
  RateIntegrator c;
  EXPECT_EQ(c.add(kNaN, 9.5), 0);  // not measured yet
  EXPECT_EQ(c.add(0, 10), 0);
  EXPECT_EQ(c.add(100, 10.5), 50);
  EXPECT_EQ(c.add(kNaN, 11), 50);
  EXPECT_EQ(c.add(200, 11.5), 250);
  EXPECT_EQ(c.add(0, 12), 250);
  // Rounded to whole units; the scale converts units.
  RateIntegrator r;
  r.add(0, 0);
  EXPECT_EQ(r.add(1.0 / 3.0, 3.0), 1);
  EXPECT_EQ(r.add(1, 4, 1024), 1025);
}

TEST(PrometheusOwners, SlurmJobFromCgroup) {
  EXPECT_EQ(slurm_job_from_cgroup("4:memory:/slurm/uid_1000/job_1234/step_0\n"), "1234");
  EXPECT_EQ(slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_77/step_batch/user\n"),
            "77");
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice/job_x/\n"), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice\n"), std::nullopt);
  // The line that has it need not be the first (cgroup v1 lists every controller).
  EXPECT_EQ(slurm_job_from_cgroup("9:pids:/system.slice/slurmd.service\n"
                                  "4:memory:/slurm/uid_1000/job_42/step_0/task_0\n"),
            "42");
}

TEST(PrometheusOwners, SlurmJobFromCgroupOnlyWhereSlurmstepdPutsJobs) {
  // A user may create cgroups in the subtree systemd delegates to them, named as they like.
  EXPECT_EQ(
      slurm_job_from_cgroup("0::/user.slice/user-1000.slice/user@1000.service/app.slice/job_5/\n"),
      std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice/user-1000.slice/user@1000.service/"
                                  "slurmstepd.scope/job_5/step_0\n"),
            std::nullopt);
  // v1: only at the top of a hierarchy, with slurm's uid_<u> level.
  EXPECT_EQ(slurm_job_from_cgroup("1:name=systemd:/user.slice/slurm/uid_1/job_5\n"), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("4:memory:/slurm/job_5\n"), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("4:memory:/slurm_node1/uid_7/job_5\n"), "5");
  EXPECT_EQ(
      slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_12345678901234567890123/\n"),
      std::nullopt);  // not a job id
}

/// A fresh directory under the system's temporary directory, removed with the object.
class TempTree {
 public:
  TempTree() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sonde-owners-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  void write(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void mkdir(const std::string& rel) const { std::filesystem::create_directories(path_ / rel); }
  Roots roots() const { return Roots{(path_ / "proc").string(), (path_ / "sys").string()}; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

/// A string literal with its embedded NULs (but not the terminating one).
template <std::size_t N>
std::string bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

/// A process of uid 1000 with this cgroup and environment (NUL-separated).
void add_pid(const TempTree& t, int pid, const std::string& cgroup, const std::string& environ) {
  const std::string dir = "proc/" + std::to_string(pid) + "/";
  t.write(dir + "stat", std::to_string(pid) +
                            " (x) S 1 1 1 0 -1 4194304 0 0 0 0 100 50 0 0 20 0 1 0 500 1000 10 "
                            "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
  t.write(dir + "status",
          "Name:\tx\nPPid:\t1\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n");
  t.write(dir + "cgroup", cgroup);
  t.write(dir + "environ", environ);
}

const std::string kFixtures = SONDE_FIXTURES_DIR;

TEST(PrometheusOwners, FixtureTreesHaveSlurmCgroups) {
  EXPECT_TRUE(node_has_slurm_cgroups(
      Roots{kFixtures + "/tree_v2_slurm/proc", kFixtures + "/tree_v2_slurm/sys"}));
  EXPECT_TRUE(
      node_has_slurm_cgroups(Roots{kFixtures + "/tree_v1/proc", kFixtures + "/tree_v1/sys"}));
  TempTree plain;
  plain.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  plain.mkdir("sys/fs/cgroup/user.slice");
  EXPECT_FALSE(node_has_slurm_cgroups(plain.roots()));
}

TEST(PrometheusOwners, JobFromTheCgroupOfTheFixtureProcesses) {
  auto v2 = slurm_job_of_process(kFixtures + "/tree_v2_slurm/proc/4242", true);
  EXPECT_EQ(v2.job, "77");
  EXPECT_EQ(v2.source, JobSource::cgroup);
  auto v1 = slurm_job_of_process(kFixtures + "/tree_v1/proc/31337", true);
  EXPECT_EQ(v1.job, "42");
  EXPECT_EQ(v1.source, JobSource::cgroup);
}

TEST(PrometheusOwners, EnvironmentClaimIgnoredWhereSlurmUsesCgroups) {
  TempTree t;
  add_pid(t, 10, "0::/user.slice/user-1000.slice/session-3.scope\n",
          bytes("SLURM_JOB_ID=77\0HOME=/x\0"));
  const std::string dir = t.str() + "/proc/10";
  // On a node where Slurm puts jobs in cgroups, a process outside them is in no job.
  auto a = slurm_job_of_process(dir, true);
  EXPECT_EQ(a.job, std::nullopt);
  EXPECT_EQ(a.source, JobSource::none);
  // Elsewhere the environment is all there is (and is claimable: see docs/prometheus.md).
  auto b = slurm_job_of_process(dir, false);
  EXPECT_EQ(b.job, "77");
  EXPECT_EQ(b.source, JobSource::environment);
  // Only a plain job id is taken from an environment.
  add_pid(t, 11, "0::/\n", bytes("SLURM_JOB_ID=77\"} 1\nevil 2\0"));
  EXPECT_EQ(slurm_job_of_process(t.str() + "/proc/11", false).job, std::nullopt);
}

TEST(PrometheusOwners, ScannerCountsOnlyTheJobCgroupOnASlurmCgroupNode) {
  TempTree t;
  t.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  t.mkdir("sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/step_0/user/task_0");
  add_pid(t, 20, "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
          bytes("SLURM_JOB_ID=77\0"));
  // Another user's process claiming job 77, and one inventing job 99, outside any job cgroup.
  add_pid(t, 21, "0::/user.slice/user-1001.slice/session-4.scope\n", bytes("SLURM_JOB_ID=77\0"));
  add_pid(t, 22, "0::/user.slice/user-1001.slice/session-4.scope\n", bytes("SLURM_JOB_ID=99\0"));
  OwnerScanner scanner(t.roots(), false, true, 10);
  const OwnerUsage& u = scanner.scan();
  ASSERT_EQ(u.jobs.size(), 1u);
  EXPECT_EQ(u.jobs[0].key, "77");
  EXPECT_DOUBLE_EQ(u.jobs[0].processes, 1);

  // The same processes on a node without Slurm cgroups: the environment decides.
  TempTree n;
  n.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  add_pid(n, 21, "0::/user.slice/user-1001.slice/session-4.scope\n", bytes("SLURM_JOB_ID=77\0"));
  add_pid(n, 22, "0::/user.slice/user-1001.slice/session-4.scope\n", bytes("SLURM_JOB_ID=99\0"));
  OwnerScanner plain(n.roots(), false, true, 10);
  const OwnerUsage& v = plain.scan();
  ASSERT_EQ(v.jobs.size(), 2u);
  EXPECT_EQ(v.jobs[0].key, "77");
  EXPECT_EQ(v.jobs[1].key, "99");
}

PidRecord pid(int p, std::uint32_t uid, double cpu, std::uint64_t rss,
              std::optional<std::string> job = std::nullopt) {
  PidRecord r;
  r.pid = p;
  r.starttime_ticks = 100;
  r.uid = uid;
  r.cpu_s = cpu;
  r.rss_bytes = rss;
  r.job = std::move(job);
  return r;
}

std::string name_of(std::uint32_t uid) {
  return "u" + std::to_string(uid);
}

TEST(PrometheusOwners, CountersGrowFromPerPidDeltas) {
  OwnerAggregator agg(true, true, 10);
  agg.update({pid(1, 0, 5, 100), pid(2, 1000, 2, 50, "7")}, name_of);
  const OwnerUsage& u =
      agg.update({pid(1, 0, 6, 100), pid(2, 1000, 2.5, 60, "7"), pid(3, 1000, 1, 10)}, name_of);
  ASSERT_EQ(u.users.size(), 2u);
  EXPECT_EQ(u.users[0].key, "u0");
  EXPECT_DOUBLE_EQ(u.users[0].cpu_seconds_total, 6);  // whole life at first sight, then growth
  EXPECT_EQ(u.users[1].key, "u1000");
  EXPECT_DOUBLE_EQ(u.users[1].cpu_seconds_total, 3.5);
  EXPECT_DOUBLE_EQ(u.users[1].rss_bytes, 70);
  EXPECT_DOUBLE_EQ(u.users[1].processes, 2);
  ASSERT_EQ(u.jobs.size(), 1u);
  EXPECT_EQ(u.jobs[0].key, "7");
  EXPECT_DOUBLE_EQ(u.jobs[0].cpu_seconds_total, 2.5);

  // A process that exits does not make the counter go down.
  const OwnerUsage& after = agg.update({pid(1, 0, 6, 100), pid(3, 1000, 1.5, 10)}, name_of);
  EXPECT_DOUBLE_EQ(after.users[1].cpu_seconds_total, 4);
  EXPECT_TRUE(after.jobs.empty());  // no process left in job 7: its series ends
}

TEST(PrometheusOwners, CapFoldsTheRestIntoOther) {
  OwnerAggregator agg(true, false, 2);
  agg.update({pid(1, 1, 1, 1), pid(2, 2, 1, 1)}, name_of);
  const OwnerUsage& u =
      agg.update({pid(1, 1, 1, 1), pid(2, 2, 1, 1), pid(3, 3, 4, 8), pid(4, 4, 2, 2)}, name_of);
  ASSERT_EQ(u.users.size(), 3u);
  EXPECT_EQ(u.users[2].key, "other");
  EXPECT_DOUBLE_EQ(u.users[2].cpu_seconds_total, 6);
  EXPECT_DOUBLE_EQ(u.users[2].rss_bytes, 10);
  EXPECT_DOUBLE_EQ(u.users[2].processes, 2);
  EXPECT_EQ(u.users_folded, 2u);
  // u1 leaves: its slot frees, but folded users stay in "other" (its counter stays monotonic).
  const OwnerUsage& v = agg.update({pid(2, 2, 1, 1), pid(3, 3, 5, 8)}, name_of);
  ASSERT_EQ(v.users.size(), 2u);
  EXPECT_EQ(v.users[0].key, "u2");
  EXPECT_EQ(v.users[1].key, "other");
  EXPECT_DOUBLE_EQ(v.users[1].cpu_seconds_total, 7);
  EXPECT_EQ(v.users_folded, 1u);
}

TEST(PrometheusOwners, ReusedPidCountsItsWholeLife) {
  OwnerAggregator agg(true, false, 10);
  agg.update({pid(1, 1, 10, 1)}, name_of);
  PidRecord reused = pid(1, 1, 3, 1);
  reused.starttime_ticks = 200;
  const OwnerUsage& u = agg.update({reused}, name_of);
  EXPECT_DOUBLE_EQ(u.users[0].cpu_seconds_total, 13);
}

// ---- Per-job series: cgroups, environments, I/O, GPUs --------------------------------------

/// A process with this stat line's parent, CPU ticks and cminflt, and an io file.
void add_job_pid(const TempTree& t, int pid, int ppid, std::uint64_t utime, std::uint64_t cminflt,
                 std::uint64_t read_bytes, std::uint64_t write_bytes, const std::string& cgroup,
                 const std::string& environ, std::uint32_t uid = 1000) {
  const std::string dir = "proc/" + std::to_string(pid) + "/";
  t.write(dir + "stat", std::to_string(pid) + " (x) S " + std::to_string(ppid) +
                            " 1 1 0 -1 4194304 0 " + std::to_string(cminflt) + " 0 0 " +
                            std::to_string(utime) +
                            " 0 0 0 20 0 1 0 500 1000 10 "
                            "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
  t.write(dir + "statm", "1000 256 10 1 0 100 0\n");
  const std::string u = std::to_string(uid);
  t.write(dir + "status", "Name:\tx\nPPid:\t" + std::to_string(ppid) + "\nUid:\t" + u + "\t" + u +
                              "\t" + u + "\t" + u + "\nGid:\t1000\t1000\t1000\t1000\n");
  t.write(dir + "cgroup", cgroup);
  t.write(dir + "environ", environ);
  t.write(dir + "io",
          "rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: " + std::to_string(read_bytes) +
              "\nwrite_bytes: " + std::to_string(write_bytes) + "\ncancelled_write_bytes: 0\n");
}

const OwnerSeries* job(const OwnerUsage& u, const std::string& key) {
  for (const OwnerSeries& s : u.jobs)
    if (s.key == key) return &s;
  return nullptr;
}

TEST(PrometheusJobs, CgroupV1JobFiguresFromItsCgroup) {
  TempTree t;
  t.write("proc/self/mountinfo",
          "24 18 0:20 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n"
          "29 24 0:25 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
          "30 24 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpuacct,cpu\n"
          "34 24 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n");
  const std::string job = "slurm/uid_1000/job_42";
  t.write("sys/fs/cgroup/cpuset/" + job + "/cpuset.cpus", "0-1,3\n");
  t.write("sys/fs/cgroup/memory/" + job + "/memory.limit_in_bytes", "4294967296\n");
  t.write("sys/fs/cgroup/cpu,cpuacct/" + job + "/cpuacct.usage_percpu",
          "1000000000 2500000000 0 500000000 \n");
  const std::string cg =
      "11:devices:/slurm/uid_1000/job_42/step_0/task_0\n"
      "8:cpuset:/slurm/uid_1000/job_42/step_0\n"
      "4:memory:/slurm/uid_1000/job_42/step_0/task_0\n"
      "3:cpuacct,cpu:/slurm/uid_1000/job_42/step_0/task_0\n"
      "1:name=systemd:/system.slice/slurmd.service\n";
  // slurmstepd (root) and two tasks; the environment's figures lose to the cgroup's.
  add_job_pid(t, 30, 1, 10, 0, 0, 0, cg, bytes("PATH=/bin\0"), 0);
  add_job_pid(t, 31, 30, 200, 0, 4096, 8192, cg,
              bytes("SLURM_JOB_ID=42\0SLURM_CPUS_ON_NODE=8\0SLURM_MEM_PER_NODE=100\0"));
  add_job_pid(t, 32, 30, 100, 0, 0, 1000, cg, bytes("SLURM_JOB_ID=42\0"));
  ASSERT_TRUE(node_has_slurm_cgroups(t.roots()));

  OwnerScanner scanner(t.roots(), false, true, 10);
  const OwnerUsage& u = scanner.scan();
  ASSERT_EQ(u.jobs.size(), 1u);
  const OwnerSeries& s = u.jobs[0];
  EXPECT_EQ(s.key, "42");
  EXPECT_NE(s.user, "root");  // uid_1000 from the path, not slurmstepd's root
  EXPECT_DOUBLE_EQ(s.processes, 3);
  ASSERT_TRUE(s.cpus);
  EXPECT_DOUBLE_EQ(*s.cpus, 3);
  ASSERT_TRUE(s.memory_limit_bytes);
  EXPECT_DOUBLE_EQ(*s.memory_limit_bytes, 4294967296.0);
  ASSERT_EQ(s.core_seconds_total.size(), 4u);
  EXPECT_EQ(s.core_seconds_total[1].first, 1);
  EXPECT_DOUBLE_EQ(s.core_seconds_total[1].second, 2.5);
  EXPECT_DOUBLE_EQ(s.io_read_bytes_total, 4096);
  EXPECT_DOUBLE_EQ(s.io_written_bytes_total, 9192);
  EXPECT_DOUBLE_EQ(s.rss_bytes, 3.0 * 256 * static_cast<double>(::sysconf(_SC_PAGESIZE)));

  // The cgroup's per-CPU counters grow: the series grow by as much.
  t.write("sys/fs/cgroup/cpu,cpuacct/" + job + "/cpuacct.usage_percpu",
          "1000000000 3000000000 0 600000000\n");
  add_job_pid(t, 31, 30, 300, 0, 4096, 10192, cg, bytes("SLURM_JOB_ID=42\0"));
  const OwnerUsage& v = scanner.scan();
  ASSERT_EQ(v.jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(v.jobs[0].core_seconds_total[1].second, 3.0);
  EXPECT_NEAR(v.jobs[0].core_seconds_total[3].second, 0.6, 1e-12);
  EXPECT_DOUBLE_EQ(v.jobs[0].io_written_bytes_total, 11192);

  // The job ends: its series go.
  std::filesystem::remove_all(t.str() + "/proc/30");
  std::filesystem::remove_all(t.str() + "/proc/31");
  std::filesystem::remove_all(t.str() + "/proc/32");
  EXPECT_TRUE(scanner.scan().jobs.empty());
}

TEST(PrometheusJobs, CgroupV2JobCpusetAndMemoryMax) {
  TempTree t;
  t.write("proc/self/mountinfo",
          "32 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n");
  const std::string dir = "sys/fs/cgroup/system.slice/slurmstepd.scope/job_77";
  t.write(dir + "/cpuset.cpus.effective", "2,4-5\n");
  t.write(dir + "/memory.max", "max\n");
  t.write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_78/cpuset.cpus.effective", "0\n");
  t.write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_78/memory.max", "1073741824\n");
  add_job_pid(t, 40, 1, 50, 0, 0, 0,
              "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n",
              bytes("SLURM_JOB_ID=77\0"), 1001);
  add_job_pid(t, 41, 1, 50, 0, 0, 0,
              "0::/system.slice/slurmstepd.scope/job_78/step_batch/user/task_0\n",
              bytes("SLURM_JOB_ID=78\0SLURM_MEM_PER_NODE=100\0"), 1002);
  OwnerScanner scanner(t.roots(), false, true, 10);
  const OwnerUsage& u = scanner.scan();
  ASSERT_EQ(u.jobs.size(), 2u);
  const OwnerSeries* a = job(u, "77");
  const OwnerSeries* b = job(u, "78");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->cpus);
  EXPECT_DOUBLE_EQ(*a->cpus, 3);
  EXPECT_FALSE(a->memory_limit_bytes);         // unlimited, and no environment figure
  EXPECT_TRUE(a->core_seconds_total.empty());  // v2 has no per-CPU time
  ASSERT_TRUE(b->memory_limit_bytes);
  EXPECT_DOUBLE_EQ(*b->memory_limit_bytes, 1073741824.0);  // the cgroup wins over 100 MiB
  EXPECT_DOUBLE_EQ(a->cpu_seconds_total,
                   50.0 / static_cast<double>(::sysconf(_SC_CLK_TCK)));  // whole life
  EXPECT_NE(a->user, b->user);  // each job's processes' uid
}

TEST(PrometheusJobs, EnvironmentFiguresWithoutSlurmCgroups) {
  TempTree t;
  t.write("proc/self/mountinfo",
          "32 22 0:27 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
  t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu memory\n");
  add_job_pid(t, 50, 1, 5, 0, 0, 0, "0::/user.slice/user-1000.slice/session-1.scope\n",
              bytes("SLURM_JOB_ID=9001\0SLURM_CPUS_ON_NODE=4\0SLURM_MEM_PER_NODE=2048\0"));
  add_job_pid(t, 51, 1, 5, 0, 0, 0, "0::/user.slice/user-1000.slice/session-1.scope\n",
              bytes("SLURM_JOB_ID=9002\0SLURM_CPUS_ON_NODE=2\0SLURM_MEM_PER_CPU=512\0"));
  add_job_pid(t, 52, 1, 5, 0, 0, 0, "0::/user.slice/user-1000.slice/session-1.scope\n",
              bytes("SLURM_JOB_ID=9003\0"));
  OwnerScanner scanner(t.roots(), false, true, 10);
  const OwnerUsage& u = scanner.scan();
  ASSERT_EQ(u.jobs.size(), 3u);
  EXPECT_DOUBLE_EQ(job(u, "9001")->cpus.value_or(0), 4);
  EXPECT_DOUBLE_EQ(job(u, "9001")->memory_limit_bytes.value_or(0), 2048.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(job(u, "9002")->memory_limit_bytes.value_or(0), 1024.0 * 1024 * 1024);
  EXPECT_FALSE(job(u, "9003")->cpus);
  EXPECT_FALSE(job(u, "9003")->memory_limit_bytes);
}

TEST(PrometheusJobs, JobEnvironmentParsing) {
  auto e = job_environment(bytes("SLURM_CPUS_ON_NODE=16\0SLURM_MEM_PER_NODE=4096M\0"));
  EXPECT_EQ(e.cpus, 16);
  EXPECT_EQ(e.mem_per_node_bytes, 4096.0 * 1024 * 1024);
  auto bad = job_environment(bytes("SLURM_CPUS_ON_NODE=x\0SLURM_MEM_PER_NODE=0\0"));
  EXPECT_FALSE(bad.cpus);
  EXPECT_FALSE(bad.mem_per_node_bytes);
}

PidRecord io_pid(int p, int ppid, std::uint64_t cminflt, std::uint64_t r, std::uint64_t w) {
  PidRecord rec = pid(p, 1000, 0, 0, "5");
  rec.ppid = ppid;
  rec.cminflt = cminflt;
  rec.io_read_bytes = r;
  rec.io_write_bytes = w;
  return rec;
}

TEST(PrometheusJobs, ReapedChildIoCountsOnce) {
  OwnerAggregator agg(false, true, 10);
  agg.update({io_pid(1, 0, 0, 100, 1000), io_pid(2, 1, 0, 50, 500)}, name_of);
  // The child wrote 10 more, then its parent reaped it: the parent's counters now hold the
  // child's whole life (60, 510) plus its own new 5 bytes read.
  const OwnerUsage& u = agg.update({io_pid(1, 0, 7, 100 + 60 + 5, 1000 + 510)}, name_of);
  ASSERT_EQ(u.jobs.size(), 1u);
  EXPECT_DOUBLE_EQ(u.jobs[0].io_read_bytes_total, 165);
  EXPECT_DOUBLE_EQ(u.jobs[0].io_written_bytes_total, 1510);
  // A process that exits with nobody in the job reaping it keeps what it had counted.
  const OwnerUsage& v = agg.update({io_pid(1, 0, 7, 170, 1510), io_pid(3, 1, 7, 0, 0)}, name_of);
  EXPECT_DOUBLE_EQ(v.jobs[0].io_read_bytes_total, 170);
  // A child that lived and died between two scans arrives whole through its parent.
  const OwnerUsage& w = agg.update({io_pid(1, 0, 8, 270, 1510), io_pid(3, 1, 7, 0, 0)}, name_of);
  EXPECT_DOUBLE_EQ(w.jobs[0].io_read_bytes_total, 270);
}

TEST(PrometheusJobs, GpuShareAndEnergyAndOther) {
  OwnerAggregator agg(false, true, 1);
  std::vector<PidRecord> pids{pid(1, 1000, 1, 1, "10"), pid(2, 1001, 1, 1, "11")};
  std::vector<JobGpuUse> gpus{
      {"10", 0, 0.6, 1e9, 120, 50}, {"11", 0, 0.2, 2e9, 40, 20}, {"11", 1, kNaN, kNaN, kNaN, kNaN}};
  agg.update(pids, name_of, {}, gpus);
  const OwnerUsage& u = agg.update(pids, name_of, {}, gpus);
  ASSERT_EQ(u.jobs.size(), 2u);
  EXPECT_EQ(u.jobs[0].key, "10");
  ASSERT_EQ(u.jobs[0].gpus.size(), 1u);
  EXPECT_DOUBLE_EQ(u.jobs[0].gpus[0].utilization_ratio, 0.6);
  EXPECT_DOUBLE_EQ(u.jobs[0].gpus[0].power_watts, 120);
  EXPECT_DOUBLE_EQ(u.jobs[0].gpus[0].energy_joules_total, 100);
  // Job 11 is over the cap: summed under "other", with its GPUs, without a user.
  EXPECT_EQ(u.jobs[1].key, "other");
  EXPECT_EQ(u.jobs[1].user, "");
  ASSERT_EQ(u.jobs[1].gpus.size(), 2u);
  EXPECT_DOUBLE_EQ(u.jobs[1].gpus[0].energy_joules_total, 40);
  EXPECT_DOUBLE_EQ(u.jobs[1].gpus[0].memory_bytes, 2e9);
  EXPECT_TRUE(std::isnan(u.jobs[1].gpus[1].power_watts));
  EXPECT_EQ(u.jobs_folded, 1u);
}

// ---- Per-job series a user cannot bend (issue 21, finding 9) -------------------------------

PidRecord claim(int p, std::uint32_t uid, std::string job, std::uint64_t start = 100) {
  PidRecord r = pid(p, uid, 1, 1, std::move(job));
  r.starttime_ticks = start;
  r.job_source = JobSource::environment;
  return r;
}

TEST(PrometheusJobs, FakeClaimsOfOneUserCannotFoldAnotherUsersJob) {
  // uid 2000 claims ten job ids (SLURM_JOB_ID is theirs to set); uid 1000 runs one job.
  OwnerAggregator agg(false, true, 5);
  std::vector<PidRecord> pids;
  for (int i = 0; i < 10; ++i) pids.push_back(claim(10 + i, 2000, std::to_string(1 + i)));
  pids.push_back(claim(50, 1000, "50"));
  const OwnerUsage& u = agg.update(pids, name_of);
  ASSERT_NE(job(u, "50"), nullptr);
  EXPECT_EQ(job(u, "50")->user, "u1000");
  EXPECT_EQ(u.jobs.size(), 5u + 1);  // five series, then "other"
  EXPECT_EQ(u.jobs_folded, 6u);      // uid 2000 keeps the series no one else needs

  // The same claims first, the real job later: it takes the newest claim's series.
  OwnerAggregator later(false, true, 5);
  pids.pop_back();
  later.update(pids, name_of);
  pids.push_back(claim(50, 1000, "50"));
  const OwnerUsage& v = later.update(pids, name_of);
  ASSERT_NE(job(v, "50"), nullptr);
  EXPECT_EQ(v.jobs.size(), 5u + 1);
  EXPECT_EQ(v.jobs_folded, 6u);
}

TEST(PrometheusJobs, CgroupJobsRankBeforeClaims) {
  OwnerAggregator agg(false, true, 3);
  std::vector<PidRecord> pids;
  for (int i = 0; i < 3; ++i) pids.push_back(claim(10 + i, 2000, std::to_string(1 + i)));
  agg.update(pids, name_of);
  PidRecord real = pid(40, 1000, 1, 1, "40");
  real.job_source = JobSource::cgroup;
  pids.push_back(real);
  const OwnerUsage& u = agg.update(pids, name_of);
  ASSERT_NE(job(u, "40"), nullptr);
  EXPECT_EQ(u.jobs_folded, 1u);
  // A claim's series, once folded, stays folded: "other" only grows.
  const double other = u.jobs.back().cpu_seconds_total;
  for (auto& r : pids) r.cpu_s += 1;
  const OwnerUsage& v = agg.update(pids, name_of);
  EXPECT_EQ(v.jobs.back().key, "other");
  EXPECT_GE(v.jobs.back().cpu_seconds_total, other + 1);
}

TEST(PrometheusJobs, MoreProcessesDoNotTakeOverAJobsUser) {
  OwnerAggregator agg(false, true, 10);
  std::vector<PidRecord> pids{claim(1, 1000, "7", 100)};
  agg.update(pids, name_of);
  // uid 2000 runs three processes claiming job 7.
  for (int i = 0; i < 3; ++i) pids.push_back(claim(2 + i, 2000, "7", 300));
  const OwnerUsage& u = agg.update(pids, name_of);
  ASSERT_EQ(u.jobs.size(), 1u);
  EXPECT_EQ(u.jobs[0].user, "u1000");
  EXPECT_DOUBLE_EQ(u.jobs[0].processes, 4);
  // Seen together for the first time: the oldest process' owner, not the most processes'.
  OwnerAggregator fresh(false, true, 10);
  EXPECT_EQ(fresh.update(pids, name_of).jobs[0].user, "u1000");
}

/// /proc/<pid>/stat of a process named `comm` whose stack starts at `stack` (field 28).
void write_stat(const TempTree& t, int pid, const std::string& comm, std::uint64_t stack) {
  t.write("proc/" + std::to_string(pid) + "/stat",
          std::to_string(pid) + " (" + comm +
              ") S 1 1 1 0 -1 4194304 0 0 0 0 100 50 0 0 20 0 1 0 500 1000 10 "
              "18446744073709551615 0 0 " +
              std::to_string(stack) + " 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n");
}

void write_uid(const TempTree& t, int pid, std::uint32_t uid) {
  const std::string u = std::to_string(uid);
  t.write("proc/" + std::to_string(pid) + "/status",
          "Name:\tx\nPPid:\t1\nUid:\t" + u + "\t" + u + "\t" + u + "\t" + u + "\n");
}

TEST(PrometheusJobs, UidAndJobReadAgainOnExecOrUidChange) {
  TempTree t;
  t.write("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
  add_pid(t, 30, "0::/user.slice/user-4000001.slice/session-4.scope\n", bytes("HOME=/\0"));
  write_uid(t, 30, 0);
  write_stat(t, 30, "login", 1000);
  OwnerScanner scanner(t.roots(), true, true, 10);
  const OwnerUsage& a = scanner.scan();
  ASSERT_EQ(a.users.size(), 1u);
  EXPECT_TRUE(a.jobs.empty());
  // It drops to uid 4000001 (same pid, same start time, no exec).
  write_uid(t, 30, 4000001);
  const OwnerUsage& b = scanner.scan();
  ASSERT_EQ(b.users.size(), 1u);
  EXPECT_EQ(b.users[0].key, "4000001");
  // It execs with a job in its new environment.
  t.write("proc/30/environ", bytes("SLURM_JOB_ID=88\0"));
  write_stat(t, 30, "task", 2000);
  const OwnerUsage& c = scanner.scan();
  ASSERT_EQ(c.jobs.size(), 1u);
  EXPECT_EQ(c.jobs[0].key, "88");
  EXPECT_EQ(c.jobs[0].user, "4000001");
  // Its environment rewritten without an exec is not read again (read at exec only).
  t.write("proc/30/environ", bytes("SLURM_JOB_ID=99\0"));
  EXPECT_EQ(scanner.scan().jobs[0].key, "88");
}

TEST(PrometheusRender, LabelValuesAreAlwaysUtf8) {
  EXPECT_EQ(escape_label_value("a\xff"
                               "b"),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(escape_label_value("\xC3\xA9t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");  // kept
  EXPECT_EQ(escape_label_value("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");    // overlong
  EXPECT_EQ(escape_label_value("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(escape_label_value("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // cut short
  EXPECT_TRUE(is_utf8("\xF0\x9F\x98\x80 ok"));
  EXPECT_FALSE(is_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(is_utf8("caf\xE9"));           // Latin-1
}

}  // namespace
}  // namespace sonde::prom
