// `sonde top`'s model on captured data: the collector over a captured /proc tree
// (tests/fixtures/top_tree: a Slurm job's processes, a container's with their namespace pid, a
// kernel thread), then filter, sort, group, tree and the text it renders.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "support/built_paths.hpp"
#include "views/status_hooks.hpp"
#include "views/status_plugins/builtin.hpp"
#include "views/top_collect.hpp"
#include "views/top_model.hpp"
#include "views/top_render.hpp"

namespace sonde::top {
namespace {

const ProcRow* find_pid(const std::vector<ProcRow>& rows, int pid) {
  for (const auto& r : rows)
    if (r.pid == pid) return &r;
  return nullptr;
}

class TopCollect : public ::testing::Test {
 protected:
  static std::string base() { return std::string(SONDE_FIXTURES_DIR) + "/top_tree"; }
  Snapshot collect_twice() {
    status::StatusSettings settings;
    settings.command = "top";
    settings.proc_root = base() + "/proc";
    settings.cpu_interval_s = 0;
    status::StatusHooks hooks({status::host_status_plugin()}, settings);
    gpu::Gpus gpus;  // no GPU library
    gpus.notes.push_back("NVML: not loaded (test)");
    CollectOptions o;
    o.proc_root = base() + "/proc";
    o.sys_root = base() + "/sys";
    Collector c(gpus, hooks, o);
    c.collect();
    return c.collect();
  }
};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void replace_in(const std::filesystem::path& p, const std::string& from, const std::string& to) {
  std::string text = slurp(p);
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << p << ": " << from;
  text.replace(at, from.size(), to);
  std::ofstream(p) << text;
}

// A copy of the captured tree, to change between refreshes (files rewritten in place, as the
// kernel's are: a stat file kept open reads the new text).
class TopCollectCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    namespace fs = std::filesystem;
    dir_ = fs::path(::testing::TempDir()) /
           ("top_copy_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::copy(std::string(SONDE_FIXTURES_DIR) + "/top_tree", dir_,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks);
    settings_.command = "top";
    settings_.proc_root = (dir_ / "proc").string();
    settings_.cpu_interval_s = 0;
    hooks_ =
        std::make_unique<status::StatusHooks>(std::vector<status::StatusPluginRef>{}, settings_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  CollectOptions options() const {
    CollectOptions o;
    o.proc_root = (dir_ / "proc").string();
    o.sys_root = (dir_ / "sys").string();
    return o;
  }
  std::filesystem::path dir_;
  status::StatusSettings settings_;
  std::unique_ptr<status::StatusHooks> hooks_;
  gpu::Gpus gpus_;
};

// A process that did not run and whose memory did not move: its Pss and I/O counters are read
// again only on its turn (I/O every kIoEvery refreshes, Pss every pss::kFewSharedEvery for one that
// maps little that is file-backed), its I/O rate is 0 in between; a page fault makes the Pss be
// read within one refresh per pss::kUnitBytes of its resident size.
TEST_F(TopCollectCopy, PssAndIoOfAnUnchangedProcessAreReadOnItsTurn) {
  Collector c(gpus_, *hooks_, options());
  c.collect();
  const std::filesystem::path p = dir_ / "proc" / "4242";
  replace_in(p / "smaps_rollup", "150000 kB", "160000 kB");
  replace_in(p / "io", "read_bytes: 4096", "read_bytes: 1052672");  // + 1 MiB
  Snapshot s = c.collect();
  const ProcRow* r = find_pid(s.procs, 4242);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->pss_bytes, 150000u * 1024);  // not read again: its memory did not move
  EXPECT_EQ(r->read_bps, 0.0);              // did not run: not read, no I/O of its own
  std::uint64_t refreshes = 1;
  while (r->read_bps == 0.0 && refreshes < 100) {
    s = c.collect();
    r = find_pid(s.procs, 4242);
    ASSERT_NE(r, nullptr);
    ++refreshes;
  }
  EXPECT_LE(refreshes, kIoEvery);
  ASSERT_TRUE(r->read_bps.has_value());
  EXPECT_GT(*r->read_bps, 0.0);  // the MiB, over the time since the counters were read
  while (r->pss_bytes == 150000u * 1024 && refreshes < 100) {
    s = c.collect();
    r = find_pid(s.procs, 4242);
    ASSERT_NE(r, nullptr);
    ++refreshes;
  }
  EXPECT_LE(refreshes, pss::kFewSharedEvery);
  EXPECT_EQ(r->pss_bytes, 160000u * 1024);
  // A page fault (stat's minflt): statm and then the Pss are read again, the Pss once one
  // refresh per pss::kUnitBytes resident has passed since its last read.
  replace_in(p / "smaps_rollup", "160000 kB", "170000 kB");
  replace_in(p / "statm", "100000 50000 ", "100000 50001 ");
  replace_in(p / "stat", "4194304 100 0", "4194304 101 0");
  const std::uint64_t unit =
      50001u * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) / pss::kUnitBytes;
  s = c.collect();
  r = find_pid(s.procs, 4242);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->rss_bytes, 50001u * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  refreshes = 1;
  while (r->pss_bytes != 170000u * 1024 && refreshes < 100) {
    s = c.collect();
    r = find_pid(s.procs, 4242);
    ASSERT_NE(r, nullptr);
    ++refreshes;
  }
  EXPECT_LE(refreshes, unit);
  EXPECT_EQ(r->pss_bytes, 170000u * 1024);
}

// Each process's stat stays open between refreshes; a pid that comes back with another start
// time is another process (learnt anew), one that is gone has its file closed; without files to
// keep open, every stat is opened at each refresh and the rows are the same.
TEST_F(TopCollectCopy, StatFilesKeptOpenAndPidReuse) {
  Collector c(gpus_, *hooks_, options());
  Snapshot s = c.collect();
  ASSERT_EQ(s.procs.size(), 8u);
  EXPECT_EQ(c.files_kept_open(), 8u);
  const std::filesystem::path p = dir_ / "proc" / "4300";
  // The pid reused: another start time, another command line.
  replace_in(p / "stat", " 0 2100 ", " 0 2500 ");
  replace_in(p / "stat", "(nvidia-smi)", "(sleep)");
  std::ofstream(p / "cmdline") << std::string(
      "sleep\0"
      "60\0",
      9);
  s = c.collect();
  const ProcRow* r = find_pid(s.procs, 4300);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->command, "sleep 60");
  EXPECT_EQ(r->starttime_ticks, 2500u);
  EXPECT_FALSE(r->cpu_percent.has_value());  // a new process: nothing to measure against yet
  std::filesystem::remove_all(dir_ / "proc" / "5100");
  s = c.collect();
  EXPECT_EQ(find_pid(s.procs, 5100), nullptr);
  EXPECT_EQ(s.procs.size(), 7u);
  EXPECT_EQ(c.files_kept_open(), 7u);

  CollectOptions none = options();
  none.keep_open = 0;
  Collector c0(gpus_, *hooks_, none);
  c0.collect();
  const Snapshot s0 = c0.collect();
  EXPECT_EQ(c0.files_kept_open(), 0u);
  ASSERT_EQ(s0.procs.size(), 7u);
  const ProcRow* r0 = find_pid(s0.procs, 4300);
  ASSERT_NE(r0, nullptr);
  EXPECT_EQ(r0->command, "sleep 60");
  EXPECT_EQ(find_pid(s0.procs, 4242)->pss_bytes, find_pid(s.procs, 4242)->pss_bytes);
}

// When the costlier files are read: the pure rules (ReadMarks).
TEST(TopReads, WhenStatmPssAndIoAreDue) {
  EXPECT_TRUE(periodic_turn(7, 1, 8));
  EXPECT_FALSE(periodic_turn(7, 2, 8));
  int turns = 0;
  for (std::uint64_t refresh = 0; refresh < 32; ++refresh) turns += periodic_turn(5, refresh, 8);
  EXPECT_EQ(turns, 4);

  ReadMarks m;
  StatNow st;
  EXPECT_TRUE(statm_due(m, st, 1, 1));  // never read
  EXPECT_TRUE(pss_due(m, 0, 1, 1));
  EXPECT_TRUE(io_due(m, st, false, 1, 1));
  m.statm_valid = m.pss.valid = true;
  m.rss_bytes = 8ull << 20;  // 8 MiB, of which 1 file-backed: few shared pages
  m.anon_bytes = 7ull << 20;
  m.pss.bytes = 6ull << 20;
  m.pss.rss_bytes = m.rss_bytes;
  m.pss.anon_bytes = m.anon_bytes;
  m.pss.at = 100;
  const int pid = 3;  // its turns: refresh % 8 == 5 (I/O), refresh % 32 == 29 (statm, Pss)
  // Idle, not its turn: nothing.
  EXPECT_FALSE(statm_due(m, st, pid, 102));
  EXPECT_FALSE(pss_due(m, 0, pid, 102));
  EXPECT_FALSE(io_due(m, st, true, pid, 102));
  EXPECT_TRUE(io_due(m, st, true, pid, 109));
  EXPECT_TRUE(statm_due(m, st, pid, 125));
  EXPECT_TRUE(pss_due(m, 0, pid, 125));
  // It ran (CPU ticks) or faulted: statm and I/O now; the Pss once its memory moved.
  StatNow ran = st;
  ran.cpu_ticks = 1;
  EXPECT_TRUE(statm_due(m, ran, pid, 102));
  EXPECT_TRUE(io_due(m, ran, true, pid, 102));
  EXPECT_FALSE(pss_due(m, 0, pid, 102));
  EXPECT_TRUE(pss_due(m, 1, pid, 102));  // a fault since the Pss read
  StatNow waits = st;
  waits.state = 'D';
  EXPECT_TRUE(io_due(m, waits, true, pid, 102));
  // A child came or went: the Pss again.
  m.pss.stale = true;
  EXPECT_TRUE(pss_due(m, 0, pid, 102));
  m.pss.stale = false;
  // More than pss::kSharedFew file-backed: every kPssSharedEvery refreshes.
  ReadMarks shared = m;
  shared.anon_bytes = 0;
  shared.rss_bytes = pss::kSharedFew + 1;
  shared.pss.rss_bytes = shared.rss_bytes;
  EXPECT_FALSE(pss_due(shared, 0, pid, 102));
  EXPECT_TRUE(pss_due(shared, 0, pid, 109));
  // A large process: reads spaced by its size (one refresh per pss::kUnitBytes).
  ReadMarks big = m;
  big.rss_bytes = 10 * pss::kUnitBytes;
  big.anon_bytes = big.rss_bytes - (1 << 20);
  big.pss.rss_bytes = big.rss_bytes;
  EXPECT_FALSE(pss_due(big, 1, pid, 102));
  EXPECT_FALSE(pss_due(big, 1, pid, 109));
  EXPECT_TRUE(pss_due(big, 1, pid, 110));
  big.pss.at = 110;
  EXPECT_FALSE(pss_due(big, 0, pid, 125));  // its turn, but not 2 × 10 refreshes since
  EXPECT_TRUE(pss_due(big, 0, pid, 157));

  // Between reads, the Pss follows the anonymous memory it gained or lost.
  EXPECT_EQ(pss_estimate(m), 6ull << 20);
  m.anon_bytes += 1 << 20;
  m.rss_bytes += 1 << 20;
  EXPECT_EQ(pss_estimate(m), 7ull << 20);
  m.anon_bytes = 0;
  EXPECT_EQ(pss_estimate(m), 0u);  // never below 0
  m.pss.bytes = 100ull << 20;
  m.anon_bytes = m.pss.anon_bytes;
  EXPECT_EQ(pss_estimate(m), m.rss_bytes);  // never above the resident size
}

TEST_F(TopCollect, EveryProcessWithItsUserJobContainerAndNamespacePid) {
  const Snapshot s = collect_twice();
  ASSERT_EQ(s.procs.size(), 8u);
  const ProcRow* train = find_pid(s.procs, 4242);
  ASSERT_NE(train, nullptr);
  EXPECT_EQ(train->command, "python3 train.py --epochs 10");
  EXPECT_EQ(train->comm, "python3");
  EXPECT_EQ(train->ppid, 900);
  EXPECT_EQ(train->uid, 1000u);
  EXPECT_EQ(train->job, "77");  // from its job cgroup (the node has slurmstepd.scope)
  EXPECT_EQ(train->container, "");
  EXPECT_EQ(train->ns_pid, 0);
  ASSERT_TRUE(train->pss_bytes.has_value());
  EXPECT_EQ(*train->pss_bytes, 150000u * 1024);  // smaps_rollup's Pss, not the RSS
  EXPECT_EQ(train->rss_bytes, 50000u * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)));
  // The same counters at both refreshes: 0 %, 0 B/s (known, not unknown).
  ASSERT_TRUE(train->cpu_percent.has_value());
  EXPECT_DOUBLE_EQ(*train->cpu_percent, 0.0);
  ASSERT_TRUE(train->read_bps.has_value());
  EXPECT_DOUBLE_EQ(*train->read_bps, 0.0);

  const ProcRow* nginx = find_pid(s.procs, 5100);
  ASSERT_NE(nginx, nullptr);
  EXPECT_EQ(nginx->container, "docker:0123456789ab");
  EXPECT_EQ(nginx->ns_pid, 7);  // NSpid's last entry: its pid inside the container
  EXPECT_EQ(nginx->job, "");
  EXPECT_FALSE(nginx->read_bps.has_value());  // no io file: unknown, not 0

  const ProcRow* kworker = find_pid(s.procs, 40);
  ASSERT_NE(kworker, nullptr);
  EXPECT_EQ(kworker->command, "[kworker/0:1]");  // no command line: a kernel thread
  EXPECT_EQ(kworker->pss_bytes, std::optional<std::uint64_t>(0));  // maps nothing
  EXPECT_EQ(kworker->user, "root");
}

TEST_F(TopCollect, HostFigures) {
  const Snapshot s = collect_twice();
  EXPECT_EQ(s.cpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(s.threads, 1u + 1 + 1 + 1 + 4 + 1 + 2 + 10);
  EXPECT_EQ(s.running, 1u);
  ASSERT_TRUE(s.mem_total_bytes && s.mem_used_bytes);  // the host status plugin's fields
  EXPECT_DOUBLE_EQ(*s.mem_total_bytes, 16384000.0 * 1024);
  EXPECT_DOUBLE_EQ(*s.mem_used_bytes, (16384000.0 - 12288000.0) * 1024);
  ASSERT_TRUE(s.load1.has_value());
  EXPECT_DOUBLE_EQ(*s.load1, 1.5);
  // Unchanged counters: rates of 0 (not loopback, not the partition).
  ASSERT_TRUE(s.net_rx_bps && s.disk_write_bps);
  EXPECT_DOUBLE_EQ(*s.net_rx_bps, 0.0);
  EXPECT_DOUBLE_EQ(*s.disk_write_bps, 0.0);
  EXPECT_TRUE(s.gpus.empty());
  ASSERT_EQ(s.notes.size(), 1u);
}

// ---- the pure functions ----

std::vector<ProcRow> sample_rows() {
  auto row = [](int pid, int ppid, std::string user, std::string job, double cpu, std::uint64_t pss,
                std::string command) {
    ProcRow r;
    r.pid = pid;
    r.ppid = ppid;
    r.user = std::move(user);
    r.job = std::move(job);
    r.cpu_percent = cpu;
    r.pss_bytes = pss;
    r.rss_bytes = pss * 2;
    r.command = std::move(command);
    r.comm = r.command.substr(0, r.command.find(' '));
    return r;
  };
  std::vector<ProcRow> rows = {
      row(1, 0, "root", "", 0.5, 4000, "/sbin/init"),
      row(900, 1, "root", "", 0.0, 3000, "sshd: /usr/sbin/sshd -D"),
      row(4242, 900, "alice", "77", 98.0, 150000, "python3 train.py"),
      row(4300, 4242, "alice", "77", 2.0, 900, "nvidia-smi -l"),
      row(4301, 4242, "alice", "77", 1.0, 800, "python3 loader.py"),
      row(6000, 1, "bob", "78", 50.0, 90000, "Stress --cpu 1"),
  };
  rows[2].gpu_mem_bytes = 1 << 30;
  rows[2].gpus = {0};
  rows[5].gpu_mem_bytes = 1 << 20;
  rows[5].gpus = {1};
  rows[5].container = "podman:aaaaaaaaaaaa";
  return rows;
}

std::vector<int> pids(const std::vector<DisplayRow>& rows) {
  std::vector<int> out;
  for (const auto& r : rows) out.push_back(r.row.pid);
  return out;
}

TEST(TopModel, SortsByFiguresDescendingAndTextAscending) {
  ViewState v;
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4242, 6000, 4300, 4301, 1, 900}));
  v.reverse = true;
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{900, 1, 4301, 4300, 6000, 4242}));
  v = {};
  v.sort = SortKey::user;  // ties by pid
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4242, 4300, 4301, 6000, 1, 900}));
  v.sort = SortKey::mem;
  EXPECT_EQ(arrange(sample_rows(), v).front().row.pid, 4242);
  v.sort = SortKey::gpu_mem;  // unknown below every known figure
  EXPECT_EQ(pids(arrange(sample_rows(), v)).at(1), 6000);
}

TEST(TopModel, FilterNarrows) {
  ViewState v;
  v.filter = "LOADER";  // case-insensitive, in the command line
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4301}));
  v.filter = "4300";  // a pid
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4300}));
  v.filter = "podman";  // a container
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{6000}));
  v.filter = "";
  v.user_filter = "alice";
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4242, 4300, 4301}));
  v.user_filter = "";
  v.job_filter = "78";
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{6000}));
  v.job_filter = "7";  // exact, not a prefix
  EXPECT_TRUE(arrange(sample_rows(), v).empty());
}

TEST(TopModel, GroupsSumTheirProcesses) {
  const auto groups = group_rows(sample_rows(), GroupBy::user);
  ASSERT_EQ(groups.size(), 3u);
  const auto& alice = groups[0];
  EXPECT_EQ(alice.user, "alice");
  EXPECT_EQ(alice.count, 3u);
  EXPECT_EQ(alice.pid, 4242);
  EXPECT_DOUBLE_EQ(*alice.cpu_percent, 101.0);
  EXPECT_EQ(alice.mem_bytes(), 150000u + 900 + 800);  // Pss: shared pages once
  EXPECT_EQ(*alice.gpu_mem_bytes, 1u << 30);
  EXPECT_EQ(alice.command, "3 processes");
  const auto jobs = group_rows(sample_rows(), GroupBy::job);
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].job, "-");  // no job
  EXPECT_EQ(jobs[0].count, 2u);
  const auto containers = group_rows(sample_rows(), GroupBy::container);
  ASSERT_EQ(containers.size(), 2u);
  EXPECT_EQ(containers[1].container, "podman:aaaaaaaaaaaa");
  EXPECT_EQ(containers[1].gpus, (std::vector<int>{1}));
  // arrange: groups sorted like rows (CPU, descending)
  ViewState v;
  v.group = GroupBy::user;
  const auto shown = arrange(sample_rows(), v);
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[0].row.user, "alice");
  EXPECT_EQ(shown[1].row.user, "bob");
}

TEST(TopModel, TreeShowsParentsBeforeChildren) {
  ViewState v;
  v.tree = true;
  const auto rows = arrange(sample_rows(), v);
  EXPECT_EQ(pids(rows), (std::vector<int>{1, 6000, 900, 4242, 4300, 4301}));
  std::vector<std::string> prefixes;
  for (const auto& r : rows) prefixes.push_back(r.tree_prefix);
  EXPECT_EQ(prefixes,
            (std::vector<std::string>{"", "├─ ", "└─ ", "   └─ ", "      ├─ ", "      └─ "}));
  // A filtered tree: a process whose parent is filtered out is a root.
  v.user_filter = "alice";
  EXPECT_EQ(pids(arrange(sample_rows(), v)), (std::vector<int>{4242, 4300, 4301}));
  EXPECT_EQ(arrange(sample_rows(), v)[0].tree_prefix, "");
}

TEST(TopModel, DeepTreeAndCycles) {
  std::vector<ProcRow> chain;
  for (int i = 1; i <= 20000; ++i) {
    ProcRow r;
    r.pid = i;
    r.ppid = i - 1;
    chain.push_back(r);
  }
  ViewState v;
  v.tree = true;
  const auto deep = arrange(chain, v);
  ASSERT_EQ(deep.size(), 20000u);
  EXPECT_EQ(deep.back().tree_prefix, deep[40].tree_prefix);  // the indent stops growing
  // A cycle (pid reuse between reads) shows every process once.
  std::vector<ProcRow> cycle(2);
  cycle[0].pid = 10;
  cycle[0].ppid = 11;
  cycle[1].pid = 11;
  cycle[1].ppid = 10;
  EXPECT_EQ(pids(arrange(cycle, v)), (std::vector<int>{10, 11}));
}

// ---- rendering ----

TEST(TopRender, TextHelpers) {
  EXPECT_EQ(fit("abc", 5), "abc  ");
  EXPECT_EQ(fit("abc", 5, true), "  abc");
  EXPECT_EQ(fit("abcdef", 4, false, true), "abc…");
  EXPECT_EQ(text_width("°C├─"), 4);
  EXPECT_EQ(fit("é├─x", 3), "é├─");
  EXPECT_EQ(short_bytes(512), "512B");
  EXPECT_EQ(short_bytes(1536), "1.5K");
  EXPECT_EQ(short_bytes(150.0 * 1024 * 1024), "150M");
  EXPECT_EQ(bar(50, 10), "|||||     ");
  EXPECT_EQ(sparkline({0, 50, 100}, 10), "▁▅█");
  EXPECT_EQ(sparkline({0, 50, 100}, 2), "▅█");
  EXPECT_EQ(split_nul(std::string("a\0b c\0", 6)), (std::vector<std::string>{"a", "b c"}));
}

TEST(TopRender, ColumnsAppearWhenARowHasAValue) {
  ViewState v;
  auto rows = arrange(sample_rows(), v);
  auto cols = layout_columns(rows, v, 0);
  std::vector<std::string> titles;
  for (const auto& c : cols) titles.push_back(c.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"PID", "USER", "JOB", "CONTAINER", "CPU%", "MEM",
                                              "READ/s", "WRITE/s", "GPUMEM", "COMMAND"}));
  // Click-to-sort: the column under x.
  EXPECT_EQ(column_at(cols, 0), SortKey::pid);
  EXPECT_EQ(column_at(cols, cols[4].x + 2), SortKey::cpu);
  EXPECT_EQ(column_at(cols, 500), SortKey::command);
  // Without jobs, containers and GPUs those columns go.
  std::vector<ProcRow> plain(1);
  plain[0].pid = 1;
  rows = arrange(plain, v);
  titles.clear();
  for (const auto& c : layout_columns(rows, v, 0)) titles.push_back(c.title);
  EXPECT_EQ(titles, (std::vector<std::string>{"PID", "USER", "CPU%", "MEM", "READ/s", "WRITE/s",
                                              "COMMAND"}));
  // The sort column is marked.
  EXPECT_NE(render_column_titles(cols, v, 0).text.find("▼CPU%"), std::string::npos);
}

TEST(TopRender, OnceTextOfASnapshot) {
  Snapshot s;
  s.hostname = "node7";
  s.cpu_ids = {0, 1};
  s.core_percent = {100.0, std::nullopt};
  s.mem_total_bytes = 16.0 * (1 << 30);
  s.mem_used_bytes = 4.0 * (1 << 30);
  s.load1 = 1.5;
  s.load5 = 0.5;
  s.load15 = 0.25;
  status::GpuRow g;
  g.device.index = 0;
  g.device.name = "NVIDIA A100-SXM4-40GB";
  g.device.util_gpu = 87;
  g.device.temperature_c = 41;
  g.device.power_w = 250.5;
  g.device.power_limit_w = 400;
  g.device.mem_used_bytes = 20480ull << 20;
  g.device.mem_total_bytes = 40960ull << 20;
  s.gpus.push_back(g);
  status::GpuRow lost;
  lost.device.index = 1;
  lost.device.name = "Tesla K80";
  lost.device.error = "GPU is lost";
  s.gpus.push_back(lost);
  s.gpu_history = {{10, 50, 87}, {}};
  s.plugin_lines = {"[team] footer"};
  s.procs = sample_rows();
  const std::string text = render_text(s, ViewState{}, 0);
  EXPECT_NE(text.find("sonde top  node7"), std::string::npos) << text;
  EXPECT_NE(text.find("load 1.50 0.50 0.25"), std::string::npos) << text;
  EXPECT_NE(text.find("100.0%]"), std::string::npos) << text;  // core 0's bar
  EXPECT_NE(text.find("Mem[||||"), std::string::npos) << text;
  EXPECT_NE(text.find("[0] NVIDIA A100-SXM4-40GB"), std::string::npos) << text;
  EXPECT_NE(text.find("87%]"), std::string::npos) << text;
  EXPECT_NE(text.find(" 41°C 251/400 W"), std::string::npos) << text;
  EXPECT_NE(text.find("▁▅▇"), std::string::npos) << text;
  EXPECT_NE(text.find("[1] Tesla K80"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU is lost"), std::string::npos) << text;
  EXPECT_NE(text.find("[team] footer"), std::string::npos) << text;
  // Rows not cut without a width; the busiest first.
  const auto titles = text.find("PID USER");
  ASSERT_NE(titles, std::string::npos) << text;
  const auto first = text.find('\n', titles) + 1;
  const std::string row = text.substr(first, text.find('\n', first) - first);
  EXPECT_NE(row.find("4242 alice"), std::string::npos) << row;
  EXPECT_NE(row.find(" 98.0 "), std::string::npos) << row;
  EXPECT_NE(row.find("python3 train.py"), std::string::npos) << row;
  // A width: every line fits.
  for (const int w : {60, 100}) {
    const std::string cut = render_text(s, ViewState{}, w);
    std::size_t start = 0;
    while (start < cut.size()) {
      const auto end = cut.find('\n', start);
      EXPECT_LE(text_width(cut.substr(start, end - start)), w) << cut.substr(start, end - start);
      start = end + 1;
    }
  }
}

}  // namespace
}  // namespace sonde::top
