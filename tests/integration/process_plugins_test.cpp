// Process plugins through the real binary: the Python network example and the shell example
// registered by YAML (columns in perf_<level>.csv and in `sonde stream`), and Python collectors
// that hang, crash, raise, return the wrong type or length, return NaN or overrun their deadline:
// each run completes, the built-in columns stay intact, and no plugin process is left behind.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/plugin_run_helpers.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

const fs::path kSourceRoot = fs::path(SONDE_SOURCE_DIR);
const fs::path kTestPlugins = kSourceRoot / "tests" / "plugins";
const fs::path kPythonExample = kSourceRoot / "examples" / "plugins" / "python_network";
const fs::path kShellExample = kSourceRoot / "examples" / "plugins" / "exec_shell";

// Where the Python collectors are found.
RunOptions python_env(const std::string& marker = "") {
  RunOptions o;
  o.env.emplace_back("PYTHONPATH", kTestPlugins.string() + ":" + kPythonExample.string());
  if (!marker.empty()) o.env.emplace_back("SONDE_TEST_MARKER", marker);
  o.timeout_s = 60;
  return o;
}

PluginRun run_with(const fs::path& cfg, const fs::path& out, const RunOptions& options,
                   const std::string& seconds = "2.5") {
  PluginRun r;
  r.result = run_command(
      {sonde_binary(), "run", "--quiet", "--interval", "0.2", "--levels", "process,system",
       "--config", cfg.string(), "--out", out.string(), "--", workload_binary(), "sleep", seconds},
      options);
  if (r.result.status != 0) return r;
  const fs::path run = run_dir(out);
  r.process = read_csv(run / "perf_process.csv");
  r.system = read_csv(run / "perf_system.csv");
  return r;
}

// Processes whose environment holds SONDE_TEST_MARKER=marker.
std::vector<int> processes_marked(const std::string& marker) {
  std::vector<int> out;
  const std::string needle = "SONDE_TEST_MARKER=" + marker;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::size_t pos = 0;
    while (pos < env.size()) {
      const std::size_t end = env.find('\0', pos);
      if (env.compare(pos, (end == std::string::npos ? env.size() : end) - pos, needle) == 0) {
        out.push_back(std::stoi(name));
        break;
      }
      if (end == std::string::npos) break;
      pos = end + 1;
    }
  }
  return out;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// ---- the examples ----

TEST(ProcessPlugins, PythonNetworkExampleWritesRatesAtTheSystemLevel) {
  const auto dir = scratch_dir("py-network");
  const auto r = run_with(kPythonExample / "sonde.yaml", dir / "out", python_env());
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  for (const char* column :
       {"py_net_bytes_sent", "py_net_bytes_recv", "py_net_packets_sent", "py_net_packets_recv"}) {
    const auto v = r.system.numbers(column);
    ASSERT_GE(v.size(), 5u) << column;
    EXPECT_EQ(count_nan(v), 0u) << column << "; stderr: " << r.result.err;
    for (double x : v) EXPECT_GE(x, 0.0) << column;
    // As in JUmPER, other levels report zeros (no per-process network counters in psutil).
    const auto p = r.process.numbers(column);
    for (double x : p) EXPECT_EQ(x, 0.0) << column;
  }
  expect_builtins_intact(r);
}

TEST(ProcessPlugins, PythonNetworkExampleColumnsReachTheStream) {
  BackgroundProcess target({workload_binary(), "sleep", "20"});
  BackgroundProcess stream(
      {sonde_binary(), "stream", "--interval", "0.1", "--levels", "process,system", "--config",
       (kPythonExample / "sonde.yaml").string(), "--target-pid", std::to_string(target.pid())},
      python_env());
  const std::string ready_line = stream.read_line(30).value_or("");
  json ready;
  ASSERT_NO_THROW(ready = json::parse(ready_line)) << ready_line << "; stderr: " << stream.err();
  const json& system_columns = ready.at("columns_by_level").at("system");
  EXPECT_NE(std::find(system_columns.begin(), system_columns.end(), json("py_net_bytes_recv")),
            system_columns.end())
      << ready_line;
  int system_samples = 0;
  for (int i = 0; i < 40 && system_samples < 3; ++i) {
    const auto line = stream.read_line(10);
    ASSERT_TRUE(line.has_value()) << "stream ended; stderr: " << stream.err();
    const json sample = json::parse(*line);
    if (sample.value("level", "") != "system") continue;
    ++system_samples;
    const json& v = sample.at("sample").at("py_net_bytes_recv");
    ASSERT_TRUE(v.is_number()) << *line;
    EXPECT_GE(v.get<double>(), 0.0);
  }
  EXPECT_EQ(system_samples, 3);
}

TEST(ProcessPlugins, ShellExampleWritesLoadAveragesAtTheSystemLevelOnly) {
  const auto dir = scratch_dir("exec-shell");
  // The example names ./loadavg.sh relative to its YAML file; run from elsewhere.
  const auto r = run_with(kShellExample / "sonde.yaml", dir / "out", RunOptions{});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  for (const char* column : {"load_0", "load_1", "load_2", "load_avg", "load_min", "load_max"}) {
    const auto v = r.system.numbers(column);
    ASSERT_GE(v.size(), 5u) << column;
    EXPECT_EQ(count_nan(v), 0u) << column << "; stderr: " << r.result.err;
    for (double x : v) EXPECT_GE(x, 0.0) << column;
    EXPECT_FALSE(r.process.has_column(column)) << "no value at the process level";
  }
  expect_builtins_intact(r);
}

TEST(ProcessPlugins, CollectorsShowsSourceFileAndState) {
  const auto dir = scratch_dir("collectors");
  const fs::path cfg = dir / "plugins.yaml";
  std::ofstream(cfg) << "collectors:\n"
                        "  py_network:\n"
                        "    _target_: python:py_network.psutil.PsutilNetworkCollector\n"
                        "    handler: {_target_: CumulativeRateHandler, columns: [a, b, c, d]}\n"
                        "  loadavg:\n"
                        "    _target_: exec\n"
                        "    command: ["
                     << (kShellExample / "loadavg.sh").string()
                     << "]\n"
                        "    handler: {_target_: PerDeviceAggregateHandler, prefix: load_}\n";
  const auto r =
      run_command({sonde_binary(), "collectors", "--config", cfg.string()}, python_env());
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("source   python (py_network.psutil.PsutilNetworkCollector)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("source   exec (" + (kShellExample / "loadavg.sh").string() + ")"),
            std::string::npos)
      << r.out;
  // Every collector works, except the gpu and energy collectors on a node without GPUs (and,
  // for energy, without RAPL: a virtual machine).
  EXPECT_EQ(occurrences(r.out, "state    ok") + occurrences(r.out, "state    unavailable: no GPU") +
                occurrences(r.out, "state    unavailable: no RAPL zone"),
            occurrences(r.out, "state    "))
      << r.out;
  EXPECT_NE(r.out.find("load_0 load_1 load_2 load_avg load_min load_max"), std::string::npos)
      << r.out;
}

// ---- misbehaving Python collectors ----

struct Misbehaviour {
  const char* cls;
  const char* entry;      // more YAML for the entry (after _target_)
  bool disabled;          // disabled after 5 consecutive failures, with one warning
  const char* warn_text;  // in that warning
};

class PythonFaults : public ::testing::TestWithParam<Misbehaviour> {};

TEST_P(PythonFaults, CostTheCollectorOnly) {
  const Misbehaviour& m = GetParam();
  const auto dir = scratch_dir(std::string("py-") + m.cls);
  const fs::path cfg = dir / "plugin.yaml";
  std::string entry = m.entry;
  const std::string state = "STATE_FILE";
  if (auto pos = entry.find(state); pos != std::string::npos)
    entry.replace(pos, state.size(), (dir / "crashed").string());
  std::ofstream(cfg) << "collectors:\n  mis:\n    _target_: python:sonde_test_plugins." << m.cls
                     << "\n"
                     << entry;
  const std::string marker = std::string("py-fault-") + m.cls + "-" + std::to_string(::getpid());
  const auto r = run_with(cfg, dir / "out", python_env(marker));
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  expect_builtins_intact(r);

  const std::string column = r.process.has_column("mis_value") ? "mis_value" : "mis_a";
  const auto v = r.process.numbers(column);
  ASSERT_GE(v.size(), 6u);
  EXPECT_GT(count_nan(v), 0u) << "a failing tick must be NaN";
  if (m.disabled) {
    EXPECT_NE(r.result.err.find("collector 'mis' disabled after 5 consecutive failures"),
              std::string::npos)
        << r.result.err;
    EXPECT_NE(r.result.err.find(m.warn_text), std::string::npos) << r.result.err;
    EXPECT_EQ(occurrences(r.result.err, "disabled after"), 1u) << r.result.err;
  } else {
    EXPECT_EQ(r.result.err.find("disabled after"), std::string::npos) << r.result.err;
    // It works again after its first failure.
    const auto first_nan = std::find_if(v.begin(), v.end(), [](double x) { return std::isnan(x); });
    EXPECT_TRUE(std::any_of(first_nan, v.end(), [](double x) { return !std::isnan(x); }))
        << "no value after the first failure";
    if (*m.warn_text) {
      EXPECT_NE(r.result.err.find(m.warn_text), std::string::npos) << r.result.err;
    }
  }
  // sonde has exited: none of its plugin processes is left, not even the hung one.
  EXPECT_TRUE(processes_marked(marker).empty());
}

constexpr const char* kScalar = "    handler: {_target_: ScalarHandler, column: mis_value}\n";
constexpr const char* kCounters =
    "    handler: {_target_: CumulativeRateHandler, columns: [mis_a, mis_b, mis_c, mis_d]}\n";

INSTANTIATE_TEST_SUITE_P(
    Plugins, PythonFaults,
    ::testing::Values(
        // Sleeps forever from its third tick: NaN, then disabled; killed at the end.
        Misbehaviour{"Hang", kScalar, true, "still busy with tick 2"},
        // Exits on its third tick: NaN while down, restarted after 0.5 s, values again.
        Misbehaviour{"Crash",
                     "    state_file: STATE_FILE\n    handler: {_target_: ScalarHandler, "
                     "column: mis_value}\n",
                     false, "[mis] crashing on purpose"},
        // Raises on odd ticks: NaN there, the runner survives.
        Misbehaviour{"Raises", kScalar, false, ""},
        Misbehaviour{"WrongType", kScalar, true, "TypeError: collect returned str"},
        Misbehaviour{"WrongLength", kCounters, true, "expected 4 counters, got 3"},
        Misbehaviour{"ReturnsNaN", kScalar, true, "expected a finite number"},
        // Sleeps 0.4 s per tick with a deadline of 0.1 s (half the interval).
        Misbehaviour{"Slow", kScalar, true, "deadline of 100.0 ms"}),
    [](const auto& p) { return std::string(p.param.cls); });

// ---- restarts: a crash is one failure, the wait for the restart none ----

// `sonde run --interval 0.1` with one exec collector (tests/plugins/scripted.sh, whose value is the
// tick number) started with `args`, beside `program` (sonde's command).
PluginRun run_scripted_beside(const fs::path& dir, const std::string& args,
                              const std::vector<std::string>& program) {
  const fs::path cfg = dir / "plugin.yaml";
  std::ofstream(cfg) << "collectors:\n  crashy:\n    _target_: exec\n    command: ["
                     << (kTestPlugins / "scripted.sh").string() << ", " << args
                     << "]\n    handler: {_target_: ScalarHandler, column: crashy_tick}\n";
  std::vector<std::string> cmd = {sonde_binary(),
                                  "run",
                                  "--quiet",
                                  "--interval",
                                  "0.1",
                                  "--levels",
                                  "process,system",
                                  "--config",
                                  cfg.string(),
                                  "--out",
                                  (dir / "out").string(),
                                  "--"};
  cmd.insert(cmd.end(), program.begin(), program.end());
  PluginRun r;
  r.result = run_command(cmd, RunOptions{});
  if (r.result.status != 0) return r;
  const fs::path run = run_dir(dir / "out");
  r.process = read_csv(run / "perf_process.csv");
  r.system = read_csv(run / "perf_system.csv");
  return r;
}
PluginRun run_scripted(const fs::path& dir, const std::string& args, const std::string& seconds) {
  return run_scripted_beside(dir, args, {workload_binary(), "sleep", seconds});
}

// At 0.1 s a restart 0.5 s after a crash spans 5 ticks: they must not count as failures (before,
// they did, and one crash disabled the collector for the rest of the run).
TEST(ProcessPlugins, OneCrashAtATenthOfASecondIsRestartedAndItsRowsResume) {
  const auto dir = scratch_dir("exec-one-crash");
  const auto r = run_scripted(dir, "--exit-at, 8", "3");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  expect_builtins_intact(r);
  const auto v = r.system.numbers("crashy_tick");
  ASSERT_GE(v.size(), 20u);
  // Values up to the crash, a gap while it restarts, values again to the end.
  const auto gap = std::find_if(v.begin(), v.end(), [](double x) { return std::isnan(x); });
  ASSERT_NE(gap, v.end()) << "no tick without a value: the child did not crash";
  const auto back = std::find_if(gap, v.end(), [](double x) { return !std::isnan(x); });
  ASSERT_NE(back, v.end()) << "no value after the crash; stderr: " << r.result.err;
  EXPECT_GE(std::distance(gap, back), 3) << "the restart waits 0.5 s";
  EXPECT_EQ(std::count_if(back, v.end() - 1, [](double x) { return std::isnan(x); }), 0)
      << "a tick without a value after the restart; stderr: " << r.result.err;
  EXPECT_GT(*back, 8.0) << "the new child answers the ticks after the crash";
  EXPECT_EQ(r.result.err.find("disabled"), std::string::npos) << r.result.err;
  EXPECT_EQ(occurrences(r.result.err,
                        "collector 'crashy': it closed its stdout (exited with "
                        "status 3); restarting in 0.5 s (crash 1 of at most 5 "
                        "within 60 s)"),
            1u)
      << r.result.err;
  EXPECT_EQ(occurrences(r.result.err, "collector 'crashy': restarted (restart 1 of this run)"), 1u)
      << r.result.err;
  EXPECT_EQ(occurrences(r.result.err, "restarted ("), 1u) << r.result.err;
}

// A child that dies at its first tick, every time: restarted after 0.5, 1, 2 and 4 s (each comes
// up, answers setup, then dies); its 5th crash ends the restarts and the collector is disabled
// with that reason.
TEST(ProcessPlugins, RepeatedCrashesEndInDisabledWithTheReason) {
  const auto dir = scratch_dir("exec-crash-loop");
  // The command lives until the 5th child has died, then 2 s more for sonde to see it: however
  // long the restarts took on this machine (0.5 + 1 + 2 + 4 s of waits, plus each start).
  const fs::path exits = dir / "exits";
  const std::string wait_fifth = "i=0; while [ $i -lt 1200 ]; do [ \"$(wc -l < " + exits.string() +
                                 " 2>/dev/null)\" -ge 5 ] && exec sleep 2; sleep 0.05; "
                                 "i=$((i+1)); done";
  const auto r = run_scripted_beside(dir, "--exit-after, 1, --exits-file, " + exits.string(),
                                     {"/bin/sh", "-c", wait_fifth});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  expect_builtins_intact(r);
  const auto v = r.system.numbers("crashy_tick");
  EXPECT_EQ(count_nan(v), v.size()) << "no child lived to answer";
  for (const char* delay : {"0.5", "1.0", "2.0", "4.0"})
    EXPECT_EQ(occurrences(r.result.err, std::string("restarting in ") + delay + " s (crash "), 1u)
        << delay << "; " << r.result.err;
  EXPECT_NE(r.result.err.find("collector 'crashy' disabled after 5 consecutive failures; last: "),
            std::string::npos)
      << r.result.err;
  EXPECT_NE(r.result.err.find("level: not restarted after 5 crashes within 60 s; last: it closed "
                              "its stdout (exited with status 3)"),
            std::string::npos)
      << r.result.err;
  EXPECT_EQ(occurrences(r.result.err, "disabled after"), 1u) << r.result.err;
  EXPECT_EQ(occurrences(r.result.err, "restarted (restart "), 4u) << r.result.err;
}

TEST(ProcessPlugins, RaisingCollectorKeepsItsGoodTicks) {
  const auto dir = scratch_dir("py-raises-values");
  const fs::path cfg = dir / "plugin.yaml";
  std::ofstream(cfg) << "collectors:\n  mis:\n    _target_: python:sonde_test_plugins.Raises\n"
                     << kScalar;
  const auto r = run_with(cfg, dir / "out", python_env());
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  const auto v = r.system.numbers("mis_value");
  std::size_t good = 0;
  for (double x : v)
    if (x == 5.0) ++good;
  EXPECT_GE(good, 3u);
  EXPECT_EQ(good + count_nan(v), v.size());
}

// ---- setup problems are not fatal ----

TEST(ProcessPlugins, UnknownKeywordMakesItUnavailableAndTheRunGoesOn) {
  const auto dir = scratch_dir("py-unknown-kwarg");
  const fs::path cfg = dir / "plugin.yaml";
  std::ofstream(cfg) << "collectors:\n  const:\n    _target_: python:sonde_test_plugins.Constant\n"
                        "    colour: red\n"
                     << kScalar;
  const auto listed =
      run_command({sonde_binary(), "collectors", "--config", cfg.string()}, python_env());
  ASSERT_EQ(listed.status, 0) << listed.describe();
  EXPECT_NE(listed.out.find("unavailable: Constant.__init__ does not take unknown keyword "
                            "argument 'colour'"),
            std::string::npos)
      << listed.out;
  const auto r = run_with(cfg, dir / "out", python_env());
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_FALSE(r.system.has_column("mis_value"));
  EXPECT_NE(r.result.err.find("collector 'const' is unavailable"), std::string::npos)
      << r.result.err;
  expect_builtins_intact(r);
}

TEST(ProcessPlugins, ExecCommandThatIsNotAListIsAConfigErrorAtItsLine) {
  const auto dir = scratch_dir("exec-bad-command");
  const fs::path cfg = dir / "plugin.yaml";
  std::ofstream(cfg) << "collectors:\n  sensors:\n    _target_: exec\n"
                        "    command: /usr/local/bin/my-sensor --json\n"
                        "    handler: {_target_: ScalarHandler, column: temp}\n";
  const auto r = run_command({sonde_binary(), "run", "--quiet", "--config", cfg.string(), "--out",
                              (dir / "out").string(), "--", workload_binary(), "sleep", "0.1"});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find(cfg.string() + ":4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'command' expected a non-empty list of strings"), std::string::npos)
      << r.err;
}

// ---- a native plugin isolated in `sonde plugin-host` ----

TEST(ProcessPlugins, IsolatedNativePluginIsServedByThePluginHost) {
  const auto dir = scratch_dir("isolated-good");
  const fs::path cfg = dir / "plugin.yaml";
  const std::string lib = std::string(SONDE_TEST_PLUGIN_DIR) + "/libtest_plugin_good.so";
  std::ofstream(cfg) << "collectors:\n  testplug:\n    _target_: plugin:" << lib
                     << "\n    isolate: true\n"
                        "    handler: {_target_: ScalarHandler, column: test_value}\n";
  const auto listed = run_command({sonde_binary(), "collectors", "--config", cfg.string()});
  ASSERT_EQ(listed.status, 0) << listed.describe();
  EXPECT_NE(listed.out.find("source   native (" + lib + ")"), std::string::npos) << listed.out;
  const auto r = run_with(cfg, dir / "out", RunOptions{});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  for (const auto* table : {&r.process, &r.system}) {
    const auto v = table->numbers("test_value");
    ASSERT_GE(v.size(), 5u);
    for (double x : v) EXPECT_EQ(x, 42);
  }
  expect_builtins_intact(r);
}

}  // namespace
}  // namespace sonde::test
