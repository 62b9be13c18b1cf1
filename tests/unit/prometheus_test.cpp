#include "sinks/prometheus.hpp"

#include <gtest/gtest.h>

#include <stdlib.h>  // mkdtemp

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "sinks/prometheus_owners.hpp"

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

}  // namespace
}  // namespace sonde::prom
