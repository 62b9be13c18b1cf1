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
  };

  void write(const Proc& p) {
    const fs::path dir = root_ / std::to_string(p.pid);
    fs::create_directories(dir);
    // Fields 3..52 of /proc/<pid>/stat.
    std::ofstream(dir / "stat") << fmt::format(
        "{} ({}) S {} {} {} 0 -1 4194560 100 0 0 0 {} {} {} {} 20 0 {} 0 {} 1000000 {} "
        "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 {} 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        p.pid, p.comm, p.ppid, p.pid, p.pid, p.utime, p.stime, p.cutime, p.cstime, p.threads,
        1000 + p.pid, p.rss_pages, p.processor);
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
  EXPECT_EQ(*find(s, 100)->comm, "my (weird) job");
  EXPECT_TRUE(s.target_alive);
  EXPECT_EQ(find(s, 400), nullptr);
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
  proc.write({.pid = 101, .ppid = 100, .comm = "child", .uid = 1000, .utime = 20});
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
              .write_bytes = 8192});
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
  // Only what was counted of the child (nothing: it was a baseline) is subtracted later.
  EXPECT_DOUBLE_EQ(second.vanished[0].last_total_cpu_s, 0.0);
  // Placement: single-threaded processes ran on their `processor`.
  double on_cpu1 = 0;
  for (auto i = parent->share_begin; i < parent->share_end; ++i)
    if (second.shares[i].cpu == 1) on_cpu1 += second.shares[i].seconds;
  EXPECT_DOUBLE_EQ(on_cpu1, parent->cpu_delta_s);
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
