// `sonde top --once` through the real binary: a child burning a core appears with its pid, user,
// command and a CPU figure that agrees with the child's own CPU time; a process in another PID
// namespace shows its pid there; the GPU blocks and GPU processes agree with `sonde status` on
// the same fake NVML and fake ROCm (a lost GPU too); flags are checked. The interactive view:
// tests/integration/top_tui_test.cpp.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/procfs.hpp"
#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"
#include "views/top_render.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

// No GPU library, no plugin of the user's.
RunOptions plain_env(const fs::path& scratch) {
  RunOptions o;
  fs::create_directories(scratch / "config");
  o.env = {{"SONDE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
           {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
           {"XDG_CONFIG_HOME", (scratch / "config").string()},
           {"SONDE_PLUGIN_PATH", ""}};
  o.timeout_s = 60;
  return o;
}

// utime + stime of a live process, seconds.
double cpu_seconds(pid_t pid) {
  const std::string text = read_file(fmt::format("/proc/{}/stat", pid));
  auto st = procfs::parse_pid_stat(text);
  if (!st) throw std::runtime_error("cannot read /proc/" + std::to_string(pid) + "/stat");
  return static_cast<double>(st->utime_ticks + st->stime_ticks) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// The table of `--once` output: its titles' line and rows, cells cut at the titles' columns.
struct Table {
  std::string titles;
  std::vector<std::string> rows;
  /// The cell of `row` under the title `name`, or "": a right-aligned figure ends where its
  /// title ends, a left-aligned word starts where its title starts, COMMAND is the rest.
  std::string cell(const std::string& row, const std::string& name) const {
    const auto at = titles.find(name);
    if (at == std::string::npos) throw std::runtime_error("no column " + name + ": " + titles);
    if (name == "COMMAND") return at < row.size() ? row.substr(at) : "";
    static const std::vector<std::string> right = {"PID",    "NSPID",   "CPU%",   "MEM",
                                                   "READ/s", "WRITE/s", "GPUMEM", "SM%"};
    if (std::find(right.begin(), right.end(), name) != right.end()) {
      const std::size_t end = at + name.size();
      if (end > row.size() || row[end - 1] == ' ') return "";
      const auto sp = row.rfind(' ', end - 1);
      const std::size_t begin = sp == std::string::npos ? 0 : sp + 1;
      return row.substr(begin, end - begin);
    }
    if (at >= row.size() || row[at] == ' ') return "";
    return row.substr(at, row.find(' ', at) - at);
  }
  const std::string* row_of(int pid) const {
    for (const auto& r : rows)
      if (cell(r, "PID") == std::to_string(pid)) return &r;
    return nullptr;
  }
};

Table table_of(const std::string& out) {
  Table t;
  bool in_table = false;
  for (auto l : lines_of(out)) {
    // The sort mark (one character, three bytes) as one byte, so that offsets are columns.
    for (const char* mark : {"▼", "▲"})
      for (auto at = l.find(mark); at != std::string::npos; at = l.find(mark))
        l.replace(at, 3, "^");
    if (!in_table &&
        (l.find("PID USER") != std::string::npos || l.find("PROCS USER") != std::string::npos)) {
      t.titles = l;
      in_table = true;
    } else if (in_table && l.find(std::string(sonde_binary()) + " top") == std::string::npos) {
      t.rows.push_back(l);  // (not sonde top itself: its command line has the filter)
    }
  }
  return t;
}

std::string my_user() {
  struct passwd* pw = ::getpwuid(::getuid());
  return pw ? pw->pw_name : std::to_string(::getuid());
}

TEST(TopOnce, ABusyChildWithItsCpuUserAndCommand) {
  const auto dir = scratch_dir();
  BackgroundProcess child({workload_binary(), "burn", "60"});
  sleep_for(0.3);  // exec'd: its command line is the workload's
  const double cpu0 = cpu_seconds(child.pid()), t0 = now_s();
  const RunResult r = sonde({"top", "--once", "--interval", "1"}, plain_env(dir));
  const double cpu1 = cpu_seconds(child.pid()), t1 = now_s();
  ASSERT_EQ(r.status, 0) << r.describe();
  // The child's own share of a core while sonde ran (a busy machine may give it less than one).
  const double own_percent = 100.0 * (cpu1 - cpu0) / (t1 - t0);

  const Table t = table_of(r.out);
  ASSERT_FALSE(t.rows.empty()) << r.out;
  const std::string* row = t.row_of(child.pid());
  ASSERT_NE(row, nullptr) << "pid " << child.pid() << " not listed\n" << r.out;
  EXPECT_EQ(t.cell(*row, "USER"), my_user()) << *row;
  EXPECT_EQ(t.cell(*row, "COMMAND"), std::string(workload_binary()) + " burn 60") << *row;
  const double shown = std::stod(t.cell(*row, "CPU%"));
  // One thread: at most a core (a clock tick of rounding over the window); at least a good
  // part of what the child itself got while sonde ran.
  EXPECT_LE(shown, 103.0) << *row;
  EXPECT_GE(shown, 0.5 * own_percent) << *row << "\nown share " << own_percent << " %";
  EXPECT_GT(own_percent, 10.0) << "the child did not run";
  // Its memory is its Pss (readable: our own process), not RSS marked '*'.
  EXPECT_EQ(t.cell(*row, "MEM").find('*'), std::string::npos) << *row;
  // Sorted by CPU, descending: the burning child is above every idle process.
  const auto pos = std::find(t.rows.begin(), t.rows.end(), *row) - t.rows.begin();
  EXPECT_LT(pos, 5) << r.out;
  // The header: one bar per CPU, memory, the no-GPU line.
  EXPECT_NE(r.out.find("sonde top  "), std::string::npos);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  EXPECT_NE(r.out.find(fmt::format("{:>3}[", cpus - 1)), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Mem["), std::string::npos);
  EXPECT_NE(r.out.find("No GPU found"), std::string::npos);
}

TEST(TopOnce, FilterTreeAndGroups) {
  const auto dir = scratch_dir();
  BackgroundProcess one({workload_binary(), "hold", "1", "61.789"});
  BackgroundProcess decoy({workload_binary(), "hold", "1", "61.78"});
  BackgroundProcess child({workload_binary(), "spawn", "2", "20000"});
  sleep_for(0.6);  // the spawner's first child is running
  RunResult r = sonde({"top", "--once", "--interval", "0.2", "--filter", "61.789"}, plain_env(dir));
  ASSERT_EQ(r.status, 0) << r.describe();
  Table t = table_of(r.out);
  ASSERT_EQ(t.rows.size(), 1u) << r.out;  // narrowed to the one process
  EXPECT_NE(t.row_of(one.pid()), nullptr) << r.out;
  // The tree: the spawner, then its child under it.
  r = sonde({"top", "--once", "--interval", "0.2", "--tree", "--filter", "spawn 2 20000"},
            plain_env(dir));
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("└─ " + std::string(workload_binary())), std::string::npos) << r.out;
  // Grouped by user: one row for this user, with its process count.
  r = sonde({"top", "--once", "--interval", "0.2", "--group-by", "user", "--user", my_user()},
            plain_env(dir));
  ASSERT_EQ(r.status, 0) << r.describe();
  t = table_of(r.out);
  ASSERT_EQ(t.rows.size(), 1u) << r.out;
  EXPECT_NE(t.rows[0].find(my_user()), std::string::npos);
  EXPECT_NE(t.rows[0].find(" processes"), std::string::npos) << t.rows[0];
}

TEST(TopOnce, ProcessInAnotherPidNamespaceShowsItsPidThere) {
  if (run_command({"unshare", "--pid", "--fork", "true"}).status != 0)
    GTEST_SKIP() << "cannot make a PID namespace here";
  const auto dir = scratch_dir();
  BackgroundProcess ns({"unshare", "--pid", "--fork", workload_binary(), "hold", "1", "59.5"});
  // The workload is unshare's child: pid 1 in its namespace.
  std::string out;
  for (int i = 0; i < 50; ++i) {
    sleep_for(0.1);
    const RunResult r =
        sonde({"top", "--once", "--interval", "0.1", "--filter", "hold 1 59.5"}, plain_env(dir));
    out = r.out;
    if (r.out.find("NSPID") != std::string::npos && table_of(r.out).rows.size() == 2) break;
  }
  const Table t = table_of(out);
  ASSERT_FALSE(t.rows.empty()) << out;
  bool found = false;
  for (const auto& row : t.rows)
    if (t.cell(row, "COMMAND").find("unshare") == std::string::npos) {
      EXPECT_EQ(t.cell(row, "NSPID"), "1") << row;
      found = true;
    }
  EXPECT_TRUE(found) << out;
}

#ifdef SONDE_FAKE_NVML
// `sonde status --json` and `sonde top --once` on the same fake GPUs (the environment `o`): each
// GPU's line in top shows status' figures (a lost GPU: its error), and `pid`'s GPU memory is the
// sum over its GPUs (when `on_gpu`: the scenario gives it some).
void expect_top_agrees_with_status(const RunOptions& o, int pid, std::size_t gpus, bool on_gpu) {
  const RunResult st = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(st.status, 0) << st.describe();
  const RunResult top = sonde({"top", "--once", "--interval", "0.2"}, o);
  ASSERT_EQ(top.status, 0) << top.describe();
  const json s = json::parse(st.out);
  ASSERT_EQ(s["gpus"].size(), gpus) << st.out;
  const auto lines = lines_of(top.out);
  std::uint64_t child_gpu_mem = 0;
  for (const auto& g : s["gpus"]) {
    const std::string head =
        fmt::format("[{}] {}", g["index"].get<int>(), g["name"].get<std::string>());
    const auto line = std::find_if(lines.begin(), lines.end(),
                                   [&](const std::string& l) { return l.rfind(head, 0) == 0; });
    ASSERT_NE(line, lines.end()) << head << "\n" << top.out;
    if (g.contains("error") && !g["error"].is_null()) {  // a lost GPU: its error, no figures
      EXPECT_NE(line->find(g["error"].get<std::string>()), std::string::npos) << *line;
      continue;
    }
    auto num = [&](const char* key) {
      return g[key].is_null() ? std::string("??")
                              : std::to_string(std::llround(g[key].get<double>()));
    };
    if (!g["util_gpu_percent"].is_null()) {
      EXPECT_NE(line->find(num("util_gpu_percent") + "%]"), std::string::npos) << *line;
    }
    EXPECT_NE(line->find(fmt::format("{:>3}°C", num("temperature_c"))), std::string::npos) << *line;
    EXPECT_NE(line->find(fmt::format("{:>3}/{:>3} W", num("power_w"), num("power_limit_w"))),
              std::string::npos)
        << *line;
    if (!g["mem_used_bytes"].is_null()) {
      EXPECT_NE(line->find(top::short_bytes(g["mem_used_bytes"].get<double>()) + "/" +
                           top::short_bytes(g["mem_total_bytes"].get<double>())),
                std::string::npos)
          << *line;
    }
    if (g["processes"].is_array())
      for (const auto& p : g["processes"])
        if (p["pid"] == pid) child_gpu_mem += p["gpu_memory_bytes"].get<std::uint64_t>();
  }
  EXPECT_NE(top.out.find("Power"), std::string::npos);  // the GPUs' power, from the host plugin
  if (!on_gpu) return;
  // The child's GPU memory: the sum over the GPUs status lists it on.
  ASSERT_GT(child_gpu_mem, 0u);
  const Table t = table_of(top.out);
  const std::string* row = t.row_of(pid);
  ASSERT_NE(row, nullptr) << top.out;
  EXPECT_EQ(t.cell(*row, "GPUMEM"), top::short_bytes(static_cast<double>(child_gpu_mem))) << *row;
}

TEST(TopOnce, AgreesWithStatusOnTheSameFakeGpus) {
  const auto dir = scratch_dir();
  BackgroundProcess child({workload_binary(), "hold", "1", "60"});
  RunOptions o = plain_env(dir);
  const std::string scenario = std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_three_gpus.json";
  for (auto& [k, v] : o.env)
    if (k == "SONDE_NVML_LIBRARY") v = SONDE_FAKE_NVML;
  o.env.push_back({"SONDE_FAKE_GPU_SCENARIO", scenario});
  o.env.push_back({"SONDE_FAKE_GPU_PIDS", fmt::format("{},1,1", child.pid())});
  expect_top_agrees_with_status(o, child.pid(), 4, true);
}

// The same through ROCm SMI (the fake librocm_smi64.so): two AMD GPUs, then one of them lost.
TEST(TopOnce, AgreesWithStatusOnFakeAmdGpusAndALostOne) {
  for (const char* name : {"amd_two_gpus.json", "amd_lost_gpu.json"}) {
    SCOPED_TRACE(name);
    const auto dir = scratch_dir();
    BackgroundProcess child({workload_binary(), "hold", "1", "60"});
    RunOptions o = plain_env(dir);
    for (auto& [k, v] : o.env)
      if (k == "SONDE_ROCM_SMI_LIBRARY") v = SONDE_FAKE_ROCM;
    o.env.push_back({"SONDE_FAKE_GPU_SCENARIO", std::string(SONDE_FAKE_SCENARIOS) + "/" + name});
    o.env.push_back({"SONDE_FAKE_GPU_PIDS", fmt::format("{},1,1", child.pid())});
    expect_top_agrees_with_status(o, child.pid(), 2, std::string(name) == "amd_two_gpus.json");
  }
}
#endif

TEST(TopOnce, FlagsAndTerminal) {
  const auto dir = scratch_dir();
  const RunResult help = sonde({"top", "--help"}, plain_env(dir));
  EXPECT_EQ(help.status, 0);
  for (const char* flag : {"--once", "--interval", "--readonly", "--no-color", "--tree", "--sort",
                           "--group-by", "--filter"})
    EXPECT_NE(help.out.find(flag), std::string::npos) << flag;
  const RunResult all = sonde({"--help"}, plain_env(dir));
  EXPECT_NE(all.out.find("top"), std::string::npos) << all.out;
  // The interactive view needs a terminal: a clear error, not a garbled screen.
  const RunResult no_tty = sonde({"top"}, plain_env(dir));
  EXPECT_EQ(no_tty.status, 2);
  EXPECT_NE(no_tty.err.find("--once"), std::string::npos) << no_tty.err;
  const RunResult bad_sort = sonde({"top", "--once", "--sort", "colour"}, plain_env(dir));
  EXPECT_EQ(bad_sort.status, 2);
  EXPECT_NE(bad_sort.err.find("colour"), std::string::npos) << bad_sort.err;
  const RunResult bad_interval = sonde({"top", "--once", "--interval", "inf"}, plain_env(dir));
  EXPECT_EQ(bad_interval.status, 2) << bad_interval.describe();
}

}  // namespace
}  // namespace sonde::test
