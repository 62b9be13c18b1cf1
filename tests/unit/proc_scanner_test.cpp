// The /proc scan on a fake /proc tree written by the test: level membership through parent pids,
// uid and SLURM_JOB_ID; CPU and I/O deltas; vanished pids.
#include "core/proc_scanner.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sonde {
namespace {

namespace fs = std::filesystem;

class FakeProc {
 public:
  FakeProc() {
    root_ = fs::temp_directory_path() / fmt::format("sonde-scan-{}-{}", ::getpid(), counter_++);
    fs::create_directories(root_);
  }
  ~FakeProc() { fs::remove_all(root_); }
  std::string path() const { return root_.string(); }

  struct Proc {
    int pid, ppid;
    std::string comm;
    std::uint32_t uid;
    std::uint64_t utime = 0, stime = 0, cutime = 0, cstime = 0, rss_pages = 0;
    long threads = 1;
    int processor = 0;
    std::string slurm_job;
    std::uint64_t read_bytes = 0, write_bytes = 0;
    std::uint64_t minflt = 100, cminflt = 0;
    std::uint64_t starttime = 0;  ///< 0: 1000 + pid
    char state = 'S';
    std::uint64_t statm_resident = 0;  ///< 0: rss_pages
    std::uint64_t pss_kib = 0;         ///< 0: no smaps_rollup (a zombie's is empty)
    std::uint64_t statm_shared = 5;    ///< resident file-backed and shmem pages
    std::string cgroup;                ///< /proc/<pid>/cgroup text ("": none written)
  };

  /// One thread of a process: /proc/<pid>/task/<tid>/stat.
  void write_thread(int pid, int tid, std::uint64_t utime, int processor) {
    const fs::path dir = root_ / std::to_string(pid) / "task" / std::to_string(tid);
    fs::create_directories(dir);
    std::ofstream(dir / "stat") << fmt::format(
        "{} (t) S 1 {} {} 0 -1 4194560 1 0 0 0 {} 0 0 0 20 0 1 0 1000 1000000 1 "
        "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {} 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        tid, pid, pid, utime, processor);
  }
  void remove_thread(int pid, int tid) {
    fs::remove_all(root_ / std::to_string(pid) / "task" / std::to_string(tid));
  }

  void write(const Proc& p) {
    const fs::path dir = root_ / std::to_string(p.pid);
    fs::create_directories(dir);
    // Fields 3..52 of /proc/<pid>/stat.
    std::ofstream(dir / "stat") << fmt::format(
        "{} ({}) {} {} {} {} 0 -1 4194560 {} {} 0 0 {} {} {} {} 20 0 {} 0 {} 1000000 {} "
        "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {} 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        p.pid, p.comm, p.state, p.ppid, p.pid, p.pid, p.minflt, p.cminflt, p.utime, p.stime,
        p.cutime, p.cstime, p.threads, p.starttime ? p.starttime : 1000 + p.pid, p.rss_pages,
        p.processor);
    std::ofstream(dir / "statm") << fmt::format("1000 {} {} 1 0 100 0\n",
                                                p.statm_resident ? p.statm_resident : p.rss_pages,
                                                p.statm_shared);
    if (p.pss_kib)
      std::ofstream(dir / "smaps_rollup") << fmt::format(
          "00400000-7ffc8b7fe000 ---p 00000000 00:00 0                          [rollup]\n"
          "Rss:               {} kB\nPss:               {} kB\nPss_Anon:          {} kB\n",
          p.pss_kib * 2, p.pss_kib, p.pss_kib);
    else
      fs::remove(dir / "smaps_rollup");
    std::ofstream(dir / "status") << fmt::format(
        "Name:\t{}\nState:\tS (sleeping)\nPPid:\t{}\nUid:\t{}\t{}\t{}\t{}\n", p.comm, p.ppid, p.uid,
        p.uid, p.uid, p.uid);
    std::string env = "PATH=/usr/bin";
    env.push_back('\0');
    if (!p.slurm_job.empty()) {
      env += "SLURM_JOB_ID=" + p.slurm_job;
      env.push_back('\0');
    }
    std::ofstream(dir / "environ", std::ios::binary) << env;
    if (!p.cgroup.empty()) std::ofstream(dir / "cgroup") << p.cgroup;
    std::ofstream(dir / "io") << fmt::format(
        "rchar: 0\nwchar: 0\nsyscr: 1\nsyscw: 2\nread_bytes: {}\nwrite_bytes: {}\n"
        "cancelled_write_bytes: 0\n",
        p.read_bytes, p.write_bytes);
  }
  void remove(int pid) { fs::remove_all(root_ / std::to_string(pid)); }

 private:
  fs::path root_;
  static inline int counter_ = 0;
};

const PidSample* find(const ProcSnapshot& s, int pid) {
  for (const auto& p : s.pids)
    if (p.pid == pid) return &p;
  return nullptr;
}

std::vector<int> members(const ProcSnapshot& s, Level l) {
  std::vector<int> out;
  for (auto i : s.members[level_index(l)]) out.push_back(s.pids[i].pid);
  std::sort(out.begin(), out.end());
  return out;
}

constexpr std::array<bool, kNumLevels> kAll = {true, true, true, true};

TEST(ProcScanner, LevelsFollowParentsUidAndSlurmJob) {
  FakeProc proc;
  proc.write({.pid = 1, .ppid = 0, .comm = "init", .uid = 0});
  proc.write({.pid = 100, .ppid = 1, .comm = "my (weird) job", .uid = 1000, .slurm_job = "5"});
  proc.write(
      {.pid = 102, .ppid = 101, .comm = "grandchild", .uid = 1000});  // listed before its parent
  proc.write({.pid = 101, .ppid = 100, .comm = "child", .uid = 1000});
  proc.write({.pid = 200, .ppid = 1, .comm = "editor", .uid = 1000});
  proc.write({.pid = 300, .ppid = 1, .comm = "job step", .uid = 2000, .slurm_job = "5"});
  proc.write({.pid = 400, .ppid = 1, .comm = "other", .uid = 2000, .slurm_job = "6"});
  TargetInfo target{.pid = 100, .uid = 1000, .slurm_job = "5"};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target, kAll, {});
  const auto& s = scanner.scan(1000.0);
  EXPECT_EQ(s.total_pids, 7u);
  EXPECT_EQ(members(s, Level::process), (std::vector<int>{100, 101, 102}));
  EXPECT_EQ(members(s, Level::user), (std::vector<int>{100, 101, 102, 200}));
  EXPECT_EQ(members(s, Level::slurm), (std::vector<int>{100, 101, 102, 300}));
  EXPECT_TRUE(members(s, Level::system).empty());  // the node level reads node files instead
  ASSERT_NE(find(s, 100), nullptr);
  EXPECT_EQ(find(s, 100)->comm(), "my (weird) job");
  EXPECT_TRUE(s.target_alive);
  EXPECT_EQ(find(s, 400), nullptr);
}

// A late plugin worker reads the snapshot it was given (and copies of its samples) after the
// next scan erased the pid's entry: the command name is the sample's own (under ASan, the
// pointer into the erased entry that PidSample held before was a heap use after free).
TEST(ProcScanner, CommOutlivesTheScanThatErasesItsEntry) {
  FakeProc proc;
  proc.write({.pid = 1, .ppid = 0, .comm = "init", .uid = 0});
  proc.write({.pid = 100, .ppid = 1, .comm = "fifteen-bytes-x", .uid = 1000});
  proc.write({.pid = 101, .ppid = 100, .comm = "short-lived", .uid = 1000});
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target, kAll, {});
  scanner.scan(1000.0);
  const std::shared_ptr<const ProcSnapshot> kept = scanner.shared();
  const PidSample* child = find(*kept, 101);
  ASSERT_NE(child, nullptr);
  const PidSample copy = *child;
  EXPECT_EQ(find(*kept, 100)->comm(), "fifteen-bytes-x");
  proc.remove(101);
  for (int i = 1; i <= 3; ++i) {
    const auto& s = scanner.scan(1000.0 + i);
    EXPECT_EQ(find(s, 101), nullptr);
  }
  EXPECT_EQ(child->comm(), "short-lived");
  EXPECT_EQ(copy.comm(), "short-lived");
  EXPECT_STREQ(copy.comm_c_str(), "short-lived");
}

TEST(PidSample, CommIsCutAtFifteenBytes) {
  PidSample s;
  s.set_comm("a-name-longer-than-fifteen-bytes");
  EXPECT_EQ(s.comm(), "a-name-longer-t");
  PidSample t = s;
  s.set_comm("x");
  EXPECT_EQ(t.comm(), "a-name-longer-t");
  EXPECT_EQ(s.comm(), "x");
}

TEST(ProcScanner, DeltasNewPidsAndReapedChildren) {
  FakeProc proc;
  const long tck = ::sysconf(_SC_CLK_TCK);
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "parent",
              .uid = 1000,
              .utime = 50,
              .rss_pages = 10,
              .write_bytes = 4096});
  proc.write({.pid = 101, .ppid = 100, .comm = "child", .uid = 1000, .utime = 20, .minflt = 300});
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, false, false, true}, {.io = true, .threads = true});
  const auto& first = scanner.scan(1000.0);
  // The first scan is a baseline: nothing before it is attributed to the interval.
  EXPECT_EQ(find(first, 100)->cpu_delta_s, 0);
  EXPECT_EQ(find(first, 100)->rss_bytes, 10u * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  EXPECT_EQ(find(first, 100)->io_delta.write_bytes, 0u);

  // Next interval: the parent ran 10 ticks and reaped the child (which had 20 + 5 more ticks); a
  // new grandchild appeared with 7 ticks of its life.
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "parent",
              .uid = 1000,
              .utime = 60,
              .cutime = 25,
              .processor = 1,
              .write_bytes = 8192,
              .cminflt = 310});
  proc.remove(101);
  proc.write({.pid = 103,
              .ppid = 100,
              .comm = "new",
              .uid = 1000,
              .utime = 7,
              .processor = 0,
              .write_bytes = 100});
  const auto& second = scanner.scan(1001.0);
  const PidSample* parent = find(second, 100);
  ASSERT_NE(parent, nullptr);
  EXPECT_DOUBLE_EQ(parent->cpu_delta_s, 10.0 / static_cast<double>(tck));
  EXPECT_DOUBLE_EQ(parent->child_cpu_delta_s, 25.0 / static_cast<double>(tck));
  EXPECT_EQ(parent->io_delta.write_bytes, 4096u);
  const PidSample* fresh = find(second, 103);
  ASSERT_NE(fresh, nullptr);
  EXPECT_DOUBLE_EQ(fresh->cpu_delta_s, 7.0 / static_cast<double>(tck));  // whole life counts
  EXPECT_EQ(fresh->io_delta.write_bytes, 100u);
  ASSERT_EQ(second.vanished.size(), 1u);
  EXPECT_EQ(second.vanished[0].pid, 101);
  EXPECT_EQ(second.vanished[0].ppid, 100);
  // What was known of the child (its 20 ticks when first seen, a baseline) is not counted again:
  // only the 5 ticks it ran after sonde last saw it are new.
  EXPECT_DOUBLE_EQ(second.vanished[0].known_cpu_s, 20.0 / static_cast<double>(tck));
  EXPECT_DOUBLE_EQ(parent->reaped_cpu_s, 5.0 / static_cast<double>(tck));
  // Placement: single-threaded processes ran on their `processor`.
  double on_cpu1 = 0;
  for (auto i = parent->share_begin; i < parent->share_end; ++i)
    if (second.shares[i].cpu == 1) on_cpu1 += second.shares[i].seconds;
  EXPECT_DOUBLE_EQ(on_cpu1, parent->cpu_delta_s);
}

// Defect: a child that already ran before monitoring added its whole life when reaped.
TEST(ProcScanner, ReapedBaselineChildAddsOnlyItsTimeSinceFirstSeen) {
  FakeProc proc;
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  proc.write({.pid = 100, .ppid = 1, .comm = "sh", .uid = 1000, .utime = 1});
  proc.write({.pid = 101,
              .ppid = 100,
              .comm = "python3",
              .uid = 1000,
              .utime = 200,
              .read_bytes = 1000,
              .write_bytes = 5000,
              .minflt = 900});
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, true, false, true}, {.io = true, .threads = true});
  scanner.scan(1000.0);
  // The child runs 100 more ticks and writes 3000 more bytes (seen), then 50 ticks and 1000
  // bytes (not seen) and is reaped: the parent's counters grow by its whole life.
  proc.write({.pid = 101,
              .ppid = 100,
              .comm = "python3",
              .uid = 1000,
              .utime = 300,
              .read_bytes = 1000,
              .write_bytes = 8000,
              .minflt = 950});
  const auto& second = scanner.scan(1001.0);
  EXPECT_DOUBLE_EQ(find(second, 101)->cpu_delta_s, 100 / tck);
  EXPECT_EQ(find(second, 101)->io_delta.write_bytes, 3000u);
  proc.remove(101);
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "sh",
              .uid = 1000,
              .utime = 1,
              .cutime = 350,
              .read_bytes = 1000,
              .write_bytes = 9000,
              .cminflt = 960});
  const auto& third = scanner.scan(1002.0);
  const PidSample* sh = find(third, 100);
  ASSERT_NE(sh, nullptr);
  EXPECT_DOUBLE_EQ(sh->child_cpu_delta_s, 350 / tck);
  EXPECT_NEAR(sh->reaped_cpu_s, 50 / tck, 1e-9);  // not 350, not 150
  // I/O: the parent's counters jumped by the child's totals; what was read of the child is
  // taken off: 9000 - 8000 = 1000 new bytes written.
  EXPECT_EQ(sh->io_delta.write_bytes, 9000u);
  EXPECT_EQ(sh->io_reaped_known.write_bytes, 8000u);
  EXPECT_EQ(sh->io_reaped_known.read_bytes, 1000u);
}

// `sonde run`: the command sonde started counts from its start, also at the first scan.
TEST(ProcScanner, CountFromStartsTheWholeLifeOfLaterPids) {
  FakeProc proc;
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  proc.write({.pid = 50, .ppid = 1, .comm = "old", .uid = 1000, .utime = 70, .starttime = 100});
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "dd",
              .uid = 1000,
              .utime = 30,
              .write_bytes = 4096,
              .starttime = 500 * static_cast<std::uint64_t>(tck)});
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, true, false, true}, {.io = true, .threads = true});
  scanner.set_count_from(500.0);
  const auto& s = scanner.scan(501.0);
  EXPECT_DOUBLE_EQ(find(s, 100)->cpu_delta_s, 30 / tck);
  EXPECT_EQ(find(s, 100)->io_delta.write_bytes, 4096u);
  EXPECT_EQ(find(s, 50)->cpu_delta_s, 0);  // started before: a baseline
}

// A member that reaps a child that is not a member (another uid at the user level) only adds what
// happened since sonde first saw that child.
TEST(ProcScanner, ReapedNonMemberChildCountsFromDiscovery) {
  FakeProc proc;
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  proc.write({.pid = 100, .ppid = 1, .comm = "sudo-like", .uid = 1000, .utime = 1});
  proc.write({.pid = 300, .ppid = 1, .comm = "unrelated", .uid = 1000});
  proc.write({.pid = 101, .ppid = 100, .comm = "root child", .uid = 0, .utime = 500, .minflt = 40});
  TargetInfo target{.pid = 300, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, true, false, true}, {.threads = true});
  scanner.scan(1000.0);
  EXPECT_EQ(members(scanner.last(), Level::user), (std::vector<int>{100, 300}));
  scanner.scan(1001.0);
  proc.remove(101);
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "sudo-like",
              .uid = 1000,
              .utime = 1,
              .cutime = 520,
              .cminflt = 45});
  const auto& s = scanner.scan(1002.0);
  EXPECT_NEAR(find(s, 100)->reaped_cpu_s, 20 / tck, 1e-9);
}

// Defect: the time of a thread pinned to CPU 1 that exits was placed on the surviving threads'
// CPUs.
TEST(ProcScanner, TimeOfAThreadThatExitedStaysOnItsCpu) {
  FakeProc proc;
  const double tck = static_cast<double>(::sysconf(_SC_CLK_TCK));
  proc.write({.pid = 100, .ppid = 1, .comm = "two", .uid = 1000, .utime = 20, .threads = 2});
  proc.write_thread(100, 100, 10, 0);
  proc.write_thread(100, 101, 10, 1);
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, false, false, true}, {.threads = true});
  scanner.scan(1000.0);
  // Both ran 50 ticks; thread 101 then exited: its time is in the process total only.
  proc.write({.pid = 100, .ppid = 1, .comm = "two", .uid = 1000, .utime = 120, .threads = 1});
  proc.write_thread(100, 100, 60, 0);
  proc.remove_thread(100, 101);
  const auto& s = scanner.scan(1001.0);
  const PidSample* p = find(s, 100);
  ASSERT_NE(p, nullptr);
  std::array<double, 2> per_cpu{};
  for (auto i = p->share_begin; i < p->share_end; ++i)
    per_cpu.at(static_cast<std::size_t>(s.shares[i].cpu)) += s.shares[i].seconds;
  EXPECT_NEAR(per_cpu[0], 50 / tck, 1e-9);
  EXPECT_NEAR(per_cpu[1], 50 / tck, 1e-9);
}

// `sonde run` as subreaper: an orphan re-parented to sonde stays in the tree; sonde's plugin
// children do not join it.
TEST(ProcScanner, OrphansAdoptedBySondeStayInTheTree) {
  FakeProc proc;
  proc.write({.pid = 10, .ppid = 1, .comm = "sonde", .uid = 1000});
  proc.write({.pid = 100, .ppid = 10, .comm = "command", .uid = 1000});
  proc.write({.pid = 150, .ppid = 10, .comm = "orphan", .uid = 1000});
  proc.write({.pid = 160, .ppid = 10, .comm = "plugin", .uid = 1000});
  proc.write({.pid = 161, .ppid = 160, .comm = "plugin's child", .uid = 1000});
  TargetInfo target{.pid = 100, .uid = 1000};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, false, false, true}, {});
  scanner.set_adopter(10, [](int pid) { return pid == 160; });
  const auto& s = scanner.scan(1000.0);
  EXPECT_EQ(members(s, Level::process), (std::vector<int>{100, 150}));
}

TEST(ProcScanner, FdBudgetFallsBackToOpeningPerTick) {
  FakeProc proc;
  for (int pid = 10; pid < 20; ++pid) proc.write({.pid = pid, .ppid = 1, .comm = "p", .uid = 7});
  TargetInfo target{.pid = 10, .uid = 7};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target,
                      {true, true, false, true}, {.io = true});
  scanner.set_fd_budget(4);
  scanner.scan(1.0);
  const auto& s = scanner.scan(2.0);
  EXPECT_LE(scanner.fds_open(), 4u);
  EXPECT_EQ(s.members[level_index(Level::user)].size(), 10u);
  EXPECT_GT(s.reopened_per_tick, 0u);
}

// Issue 23: on a node whose Slurm jobs are in cgroups (v2: system.slice/slurmstepd.scope), the
// slurm level's CPU is the job's cgroup account (cpu.stat usage_usec); the first scan finds the
// group (its figures still from /proc), the next ones give its deltas. A member of the process
// level outside the job's cgroup makes the level fall back to /proc, said once.
TEST(ProcScanner, SlurmLevelFromTheJobsCgroupV2) {
  FakeProc proc;
  const fs::path sys = fs::path(proc.path()) / "sys";
  const fs::path job = sys / "fs/cgroup/system.slice/slurmstepd.scope/job_77";
  fs::create_directories(job / "step_0/user/task_0");
  fs::create_directories(fs::path(proc.path()) / "self");
  std::ofstream(fs::path(proc.path()) / "self/mountinfo")
      << "32 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  auto usage = [&](std::uint64_t usec) {
    std::ofstream(job / "cpu.stat")
        << "usage_usec " << usec << "\nuser_usec " << usec << "\nsystem_usec 0\n";
  };
  usage(5'000'000);
  const std::string in_job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
  proc.write({.pid = 1, .ppid = 0, .comm = "init", .uid = 0, .cgroup = "0::/init.scope\n"});
  proc.write({.pid = 100, .ppid = 1, .comm = "task", .uid = 1000, .cgroup = in_job});
  proc.write({.pid = 101, .ppid = 100, .comm = "rank", .uid = 1000, .cgroup = in_job});
  TargetInfo target{.pid = 100, .uid = 1000, .slurm_job = "77"};
  ProcScanner scanner({.proc = proc.path(), .sys = sys.string()}, target, kAll, {});
  const auto& first = scanner.scan(1000.0);
  EXPECT_EQ(members(first, Level::slurm), (std::vector<int>{100, 101}));
  EXPECT_FALSE(first.cgroup[level_index(Level::slurm)].valid) << "found now: no delta yet";
  ASSERT_TRUE(scanner.level_cgroup(Level::slurm));
  EXPECT_EQ(scanner.level_cgroup(Level::slurm).version, 2);
  EXPECT_EQ(scanner.level_cgroup(Level::slurm).path, "/system.slice/slurmstepd.scope/job_77");
  EXPECT_EQ(scanner.job_cgroup_not_used(), "");
  usage(5'750'000);
  const auto& second = scanner.scan(1001.0);
  const CgroupDelta& d = second.cgroup[level_index(Level::slurm)];
  ASSERT_TRUE(d.valid);
  EXPECT_DOUBLE_EQ(d.cpu_s, 0.75);
  EXPECT_FALSE(scanner.level_cgroup(Level::process)) << "the process level is not the job's";

  // A member of the tree outside the job's cgroup (here: moved to another one): from /proc.
  proc.write({.pid = 102,
              .ppid = 100,
              .comm = "escaped",
              .uid = 1000,
              .cgroup = "0::/system.slice/other.service\n"});
  usage(6'000'000);
  scanner.scan(1002.0);
  EXPECT_FALSE(scanner.level_cgroup_active(Level::slurm));
  EXPECT_NE(scanner.level_cgroup_left(Level::slurm).find("102"), std::string::npos)
      << scanner.level_cgroup_left(Level::slurm);
}

// Issue 23: an agent (target.exclude_pid) inside the job's cgroup. In a cgroup of its own below
// the job's that holds no member (its step), that cgroup's account is taken off the job's; where
// its cgroup holds a member of the level, its own CPU time (getrusage) is.
TEST(ProcScanner, AgentInsideTheJobsCgroupIsLeftOutV2) {
  for (const bool own_step : {true, false}) {
    SCOPED_TRACE(own_step ? "the agent in a step of its own" : "the agent beside a member");
    FakeProc proc;
    const fs::path sys = fs::path(proc.path()) / "sys";
    const fs::path job = sys / "fs/cgroup/system.slice/slurmstepd.scope/job_77";
    const std::string agent_step = own_step ? "step_1" : "step_0";
    fs::create_directories(job / "step_0/user/task_0");
    fs::create_directories(job / (agent_step + "/user/task_0"));
    fs::create_directories(fs::path(proc.path()) / "self");
    std::ofstream(fs::path(proc.path()) / "self/mountinfo")
        << "32 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    const std::string agent_cg =
        "0::/system.slice/slurmstepd.scope/job_77/" + agent_step + "/user/task_0\n";
    std::ofstream(fs::path(proc.path()) / "self/cgroup") << agent_cg;
    auto usage = [](const fs::path& dir, std::uint64_t usec) {
      std::ofstream(dir / "cpu.stat")
          << "usage_usec " << usec << "\nuser_usec " << usec << "\nsystem_usec 0\n";
    };
    const fs::path agent_dir = job / agent_step / "user/task_0";
    usage(job, 5'000'000);
    usage(agent_dir, 100'000);
    const std::string in_job = "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n";
    proc.write({.pid = 1, .ppid = 0, .comm = "init", .uid = 0, .cgroup = "0::/init.scope\n"});
    proc.write({.pid = 100, .ppid = 1, .comm = "task", .uid = 1000, .cgroup = in_job});
    proc.write({.pid = 500, .ppid = 1, .comm = "sonde", .uid = 1000, .cgroup = agent_cg});
    std::ofstream(agent_dir / "cgroup.procs") << (own_step ? "500\n" : "100\n500\n");
    TargetInfo target{.pid = 0, .uid = 1000, .slurm_job = "77", .exclude_pid = 500};
    ProcScanner scanner({.proc = proc.path(), .sys = sys.string()}, target,
                        {false, false, true, true}, {});
    const auto& first = scanner.scan(1000.0);
    EXPECT_EQ(members(first, Level::slurm), (std::vector<int>{100}));
    ASSERT_TRUE(scanner.level_cgroup(Level::slurm)) << scanner.job_cgroup_not_used();
    const std::string& minus = scanner.level_cgroup_minus(Level::slurm);
    if (own_step) {
      EXPECT_EQ(minus.rfind("sonde's own cgroup /system.slice/slurmstepd.scope/job_77/step_1/user/"
                            "task_0",
                            0),
                0u)
          << minus;
    } else {
      EXPECT_EQ(minus.rfind("sonde's own CPU time", 0), 0u) << minus;
    }
    usage(job, 5'750'000);
    usage(agent_dir, 350'000);
    const auto& second = scanner.scan(1001.0);
    const CgroupDelta& d = second.cgroup[level_index(Level::slurm)];
    ASSERT_TRUE(d.valid);
    if (own_step) {
      EXPECT_NEAR(d.cpu_s, 0.75 - 0.25, 1e-9);
    } else {
      // This process's own CPU time between the two reads (µs, small) is taken off.
      EXPECT_LE(d.cpu_s, 0.75);
      EXPECT_GT(d.cpu_s, 0.75 - 0.25);
    }
  }
}

// On the head's node of a multi-node run the head itself (exclude_single_pid) runs in the job's
// cgroup too, beside the batch script: its time cannot be taken off, so the level stays on /proc.
TEST(ProcScanner, AgentBesideAnotherNonMemberKeepsTheSlurmLevelOnProc) {
  FakeProc proc;
  const fs::path sys = fs::path(proc.path()) / "sys";
  const fs::path job = sys / "fs/cgroup/system.slice/slurmstepd.scope/job_77";
  fs::create_directories(job / "step_batch/user/task_0");
  fs::create_directories(job / "step_1/user/task_0");
  fs::create_directories(fs::path(proc.path()) / "self");
  std::ofstream(fs::path(proc.path()) / "self/mountinfo")
      << "32 22 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  const std::string agent_cg = "0::/system.slice/slurmstepd.scope/job_77/step_1/user/task_0\n";
  const std::string batch_cg = "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n";
  std::ofstream(fs::path(proc.path()) / "self/cgroup") << agent_cg;
  for (const fs::path& d : {job, job / "step_1/user/task_0"})
    std::ofstream(d / "cpu.stat") << "usage_usec 1000\nuser_usec 1000\nsystem_usec 0\n";
  proc.write({.pid = 100, .ppid = 1, .comm = "batch", .uid = 1000, .cgroup = batch_cg});
  proc.write({.pid = 600, .ppid = 100, .comm = "sonde-head", .uid = 1000, .cgroup = batch_cg});
  proc.write({.pid = 500, .ppid = 1, .comm = "sonde", .uid = 1000, .cgroup = agent_cg});
  std::ofstream(job / "step_batch/user/task_0/cgroup.procs") << "100\n600\n";
  std::ofstream(job / "step_1/user/task_0/cgroup.procs") << "500\n";
  TargetInfo target{
      .pid = 0, .uid = 1000, .slurm_job = "77", .exclude_pid = 500, .exclude_single_pid = 600};
  ProcScanner scanner({.proc = proc.path(), .sys = sys.string()}, target,
                      {false, false, true, true}, {});
  const auto& s = scanner.scan(1000.0);
  EXPECT_EQ(members(s, Level::slurm), (std::vector<int>{100}));
  EXPECT_FALSE(scanner.level_cgroup(Level::slurm));
  EXPECT_NE(scanner.job_cgroup_not_used().find("process 600 (sonde-head)"), std::string::npos)
      << scanner.job_cgroup_not_used();
}

// A v1 node of tests/slurm/cluster --cgroup (texts captured on node n2): the node's subtree of
// each hierarchy is bind-mounted over the machine's, so mountinfo lists each controller twice at
// the same mount point (the covered mount's root shows as "/.." in the node's cgroup namespace),
// and slurmstepd, a member of the level by its freezer cgroup, is in no cpuacct cgroup of the job
// (jobacct_gather/cgroup puts only the tasks there). Defect: the first member found, slurmstepd,
// gave "the job's cgroup ... is in no cpuacct or unified hierarchy mounted here", and the level
// stayed on /proc for good.
TEST(ProcScanner, SlurmLevelFromAV1JobCgroupWhoseFirstMemberIsSlurmstepd) {
  FakeProc proc;
  const fs::path sys = fs::path(proc.path()) / "sys";
  const fs::path cpuacct = sys / "fs/cgroup/cpuacct";
  const fs::path job = cpuacct / "slurm_n2/uid_0/job_12";
  fs::create_directories(job / "step_0/task_0");
  fs::create_directories(job / "step_1/task_0");
  fs::create_directories(sys / "fs/cgroup/memory/slurm_n2/uid_0/job_12");
  fs::create_directories(fs::path(proc.path()) / "self");
  std::ofstream(fs::path(proc.path()) / "self/mountinfo")
      << "76 75 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
         "77 76 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
         "78 76 0:29 /.. /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
         "79 76 0:30 /.. /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
         "80 76 0:31 /.. /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
         "81 76 0:32 /.. /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
         "82 76 0:33 /.. /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
         "83 76 0:34 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n"
         "84 76 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
         "85 76 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
         "86 76 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
         "93 82 0:33 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
         "94 78 0:29 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct\n"
         "95 80 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
         "96 79 0:30 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset\n"
         "97 81 0:32 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n";
  auto cgroup_text = [](const std::string& freezer, const std::string& cpuacct_path) {
    return "9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:" + freezer + "\n5:devices:/\n" +
           "4:memory:" + cpuacct_path + "\n3:cpuset:/slurm_n2/uid_0/job_12/step_0\n" +
           "2:cpuacct:" + cpuacct_path + "\n1:cpu:/\n0::/\n";
  };
  const std::string stepd = cgroup_text("/slurm_n2/uid_0/job_12", "/");
  const std::string agent =
      cgroup_text("/slurm_n2/uid_0/job_12/step_1", "/slurm_n2/uid_0/job_12/step_1/task_0");
  const std::string task =
      cgroup_text("/slurm_n2/uid_0/job_12/step_0", "/slurm_n2/uid_0/job_12/step_0/task_0");
  std::ofstream(fs::path(proc.path()) / "self/cgroup") << agent;
  auto usage = [](const fs::path& dir, std::uint64_t ns) {
    std::ofstream(dir / "cpuacct.usage") << ns << "\n";
    std::ofstream(dir / "cpuacct.usage_percpu") << ns << " 0 \n";
  };
  usage(job, 3'000'000'000);
  usage(job / "step_1/task_0", 200'000'000);
  std::ofstream(job / "step_1/task_0/cgroup.procs") << "500\n";
  proc.write(
      {.pid = 1,
       .ppid = 0,
       .comm = "sh",
       .uid = 0,
       .cgroup = "9:name=systemd:/\n6:freezer:/\n4:memory:/\n3:cpuset:/\n2:cpuacct:/\n0::/\n"});
  proc.write({.pid = 90, .ppid = 1, .comm = "slurmstepd", .uid = 0, .cgroup = stepd});
  proc.write({.pid = 500, .ppid = 90, .comm = "sonde", .uid = 0, .cgroup = agent});
  TargetInfo target{.pid = 0, .uid = 0, .slurm_job = "12", .exclude_pid = 500};
  ProcScanner scanner({.proc = proc.path(), .sys = sys.string()}, target,
                      {false, false, true, true}, {});
  // slurmstepd alone (the agents' step; the command has not started yet).
  const auto& first = scanner.scan(1000.0);
  EXPECT_EQ(members(first, Level::slurm), (std::vector<int>{90}));
  ASSERT_TRUE(scanner.level_cgroup(Level::slurm)) << scanner.job_cgroup_not_used();
  EXPECT_EQ(scanner.level_cgroup(Level::slurm).version, 1);
  EXPECT_EQ(scanner.level_cgroup(Level::slurm).path, "/slurm_n2/uid_0/job_12");
  EXPECT_EQ(scanner.level_cgroup(Level::slurm).cpu_dir, job.string());
  EXPECT_EQ(scanner.level_cgroup_minus(Level::slurm)
                .rfind("sonde's own cgroup /slurm_n2/uid_0/job_12/step_1/task_0", 0),
            0u)
      << scanner.level_cgroup_minus(Level::slurm);
  // The command's task burns 0.6 s; the agent 0.1 s.
  proc.write({.pid = 100, .ppid = 90, .comm = "burn", .uid = 0, .cgroup = task});
  std::ofstream(job / "step_0/task_0/cgroup.procs") << "100\n";
  usage(job, 3'700'000'000);
  usage(job / "step_1/task_0", 300'000'000);
  const auto& second = scanner.scan(1001.0);
  const CgroupDelta& d = second.cgroup[level_index(Level::slurm)];
  ASSERT_TRUE(d.valid);
  EXPECT_NEAR(d.cpu_s, 0.6, 1e-9);
}

// Where the node has no Slurm cgroups, or --no-cgroup: the slurm level comes from /proc and the
// scanner says why.
TEST(ProcScanner, SlurmLevelWithoutJobCgroupsSaysWhy) {
  FakeProc proc;
  proc.write({.pid = 100, .ppid = 1, .comm = "task", .uid = 1000, .slurm_job = "5"});
  TargetInfo target{.pid = 100, .uid = 1000, .slurm_job = "5"};
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, target, kAll, {});
  scanner.scan(1000.0);
  EXPECT_FALSE(scanner.level_cgroup(Level::slurm));
  EXPECT_NE(scanner.job_cgroup_not_used().find("SLURM_JOB_ID"), std::string::npos)
      << scanner.job_cgroup_not_used();
  ProcScanner off({.proc = proc.path(), .sys = "/nonexistent"}, target, kAll, {});
  off.set_job_cgroup_allowed(false);
  off.scan(1000.0);
  EXPECT_EQ(off.job_cgroup_not_used(), "--no-cgroup");
}

TEST(ProcScanner, RealProcFindsItselfAndChildren) {
  TargetInfo target{.pid = ::getpid(), .uid = ::getuid()};
  ProcScanner scanner({}, target, {true, true, false, true}, {.io = true, .threads = true});
  const auto& s = scanner.scan(1.0);
  EXPECT_GT(s.total_pids, 1u);
  EXPECT_TRUE(s.target_alive);
  EXPECT_EQ(members(s, Level::process), std::vector<int>{::getpid()});
  EXPECT_GE(s.members[level_index(Level::user)].size(), 1u);
}

}  // namespace
}  // namespace sonde

namespace sonde {
namespace {

// Memory is statm's exact value; an idle process's is re-read at least every 8 scans, and at once
// when its CPU time, page faults or approximate rss move.
TEST(ProcScannerMemory, ExactValueFollowsActivityAndIsRefreshedWhenIdle) {
  FakeProc proc;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc.write({.pid = 100, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 10, .statm_resident = 12});
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 100, .uid = 7},
                      {true, false, false, true}, {});
  EXPECT_EQ(find(scanner.scan(1.0), 100)->rss_bytes, 12 * page);  // statm, not stat's rss
  // It touched memory: faults moved.
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = 10,
              .minflt = 150,
              .statm_resident = 40});
  EXPECT_EQ(find(scanner.scan(2.0), 100)->rss_bytes, 40 * page);
  // Idle, and the kernel reclaimed pages: seen within 8 scans.
  proc.write({.pid = 100,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = 10,
              .minflt = 150,
              .statm_resident = 30});
  std::uint64_t last = 0;
  for (int i = 0; i < 8; ++i) last = find(scanner.scan(3.0 + i), 100)->rss_bytes;
  EXPECT_EQ(last, 30 * page);
}

// Shared pages once: Pss from smaps_rollup when the memory collector asks for it; a process
// without a readable smaps_rollup counts its RSS, and says so.
TEST(ProcScannerMemory, PssFromSmapsRollupElseRss) {
  FakeProc proc;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc.write({.pid = 100, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 10, .pss_kib = 20});
  proc.write({.pid = 101, .ppid = 100, .comm = "z", .uid = 7, .rss_pages = 3});
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 100, .uid = 7},
                      {true, false, false, true}, {.pss = true});
  const auto& s = scanner.scan(1.0);
  EXPECT_EQ(find(s, 100)->pss_bytes, 20u * 1024);
  EXPECT_FALSE(find(s, 100)->pss_from_rss);
  EXPECT_EQ(find(s, 101)->pss_bytes, 3 * page);
  EXPECT_TRUE(find(s, 101)->pss_from_rss);
  // Not asked for: RSS, and no smaps_rollup read.
  ProcScanner plain({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 100, .uid = 7},
                    {true, false, false, true}, {});
  EXPECT_EQ(find(plain.scan(1.0), 100)->pss_bytes, 10 * page);
  EXPECT_EQ(plain.last().pss_reads, 0u);
}

// Pss is re-read when the process's memory moves, when a child appears or goes (a fork shares the
// parent's pages), and at least every 8 scans; not while it sits still.
TEST(ProcScannerMemory, PssIsReReadWhenItMayHaveMoved) {
  FakeProc proc;
  proc.write({.pid = 96, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 1000, .pss_kib = 400});
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 96, .uid = 7},
                      {true, false, false, true}, {.pss = true});
  EXPECT_EQ(find(scanner.scan(1.0), 96)->pss_bytes, 400u * 1024);
  // Its share changes without it moving (another process mapped the same pages): kept.
  proc.write({.pid = 96, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 1000, .pss_kib = 300});
  EXPECT_EQ(find(scanner.scan(2.0), 96)->pss_bytes, 400u * 1024);
  EXPECT_EQ(scanner.last().pss_reads, 0u);
  // A forked child: the parent's pages now divide by two, seen at once.
  proc.write({.pid = 96, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 1000, .pss_kib = 200});
  proc.write({.pid = 97, .ppid = 96, .comm = "c", .uid = 7, .rss_pages = 1000, .pss_kib = 200});
  const auto& s = scanner.scan(3.0);
  EXPECT_EQ(find(s, 96)->pss_bytes, 200u * 1024);
  EXPECT_EQ(find(s, 97)->pss_bytes, 200u * 1024);
  // The child exits: the parent's share is whole again, at the next scan.
  proc.remove(97);
  proc.write({.pid = 96, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = 1000, .pss_kib = 400});
  EXPECT_EQ(find(scanner.scan(4.0), 96)->pss_bytes, 400u * 1024);
  // It faults: re-read.
  proc.write({.pid = 96,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = 1000,
              .minflt = 150,
              .pss_kib = 500});
  EXPECT_EQ(find(scanner.scan(5.0), 96)->pss_bytes, 500u * 1024);
  // Idle: its share changes through others, seen within 32 scans (it maps little that is
  // file-backed: its libraries).
  proc.write({.pid = 96,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = 1000,
              .minflt = 150,
              .pss_kib = 250});
  std::uint64_t last = 0;
  for (int i = 0; i < 31; ++i) last = find(scanner.scan(6.0 + i), 96)->pss_bytes;
  EXPECT_EQ(last, 500u * 1024);
  EXPECT_EQ(find(scanner.scan(40.0), 96)->pss_bytes, 250u * 1024);
}

// A process that maps much file-backed or shmem memory (over 16 MiB) has its idle Pss re-read
// every 8 scans: what others map of the same pages changes its share.
TEST(ProcScannerMemory, PssOfAProcessMappingSharedFilesIsReReadEvery8Scans) {
  FakeProc proc;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t rss = (24ull << 20) / page, shared = (20ull << 20) / page;
  proc.write({.pid = 96,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = rss,
              .pss_kib = 20000,
              .statm_shared = shared});
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 96, .uid = 7},
                      {true, false, false, true}, {.pss = true});
  EXPECT_EQ(find(scanner.scan(1.0), 96)->pss_bytes, 20000u * 1024);
  proc.write({.pid = 96,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = rss,
              .pss_kib = 6000,
              .statm_shared = shared});
  std::uint64_t last = 0;
  for (int i = 0; i < 7; ++i) last = find(scanner.scan(2.0 + i), 96)->pss_bytes;
  EXPECT_EQ(last, 20000u * 1024);
  EXPECT_EQ(find(scanner.scan(9.0), 96)->pss_bytes, 6000u * 1024);
}

// (pid 96: 96 % 8 = 0, the first read is not dated back.)
// A large process's Pss is read at most every (resident / 32 MiB) scans while it moves; in
// between, what it gained counts as its own.
TEST(ProcScannerMemory, PssOfALargeProcessFollowsItsResidentSizeBetweenReads) {
  FakeProc proc;
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t pages = (64ull << 20) / page;  // 64 MiB: a read every 2 scans at most
  proc.write({.pid = 96, .ppid = 1, .comm = "p", .uid = 7, .rss_pages = pages, .pss_kib = 10240});
  ProcScanner scanner({.proc = proc.path(), .sys = "/nonexistent"}, {.pid = 96, .uid = 7},
                      {true, false, false, true}, {.pss = true});
  EXPECT_EQ(find(scanner.scan(1.0), 96)->pss_bytes, 10240u * 1024);
  // It grows by 1 MiB (faults): not re-read yet; its estimate grows by what it gained.
  proc.write({.pid = 96,
              .ppid = 1,
              .comm = "p",
              .uid = 7,
              .rss_pages = pages + (1u << 20) / page,
              .minflt = 500,
              .pss_kib = 11000});
  EXPECT_EQ(find(scanner.scan(2.0), 96)->pss_bytes, (10240u + 1024) * 1024);
  EXPECT_EQ(scanner.last().pss_reads, 0u);
  // The next scan reads it.
  EXPECT_EQ(find(scanner.scan(3.0), 96)->pss_bytes, 11000u * 1024);
  EXPECT_EQ(scanner.last().pss_reads, 1u);
}

}  // namespace
}  // namespace sonde
