// Native plugins through the real binary: loading, columns in the CSV and the stream, fault
// containment (hang, crash with isolate: true, throw, wrong type, NaN, overrun), ABI mismatch and
// trust refusal. Every run must complete with the built-in columns intact.
#include <sys/stat.h>

#include <cmath>
#include <fstream>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/plugin_run_helpers.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

std::string plugin(const std::string& name) {
  return std::string(SONDE_TEST_PLUGIN_DIR) + "/libtest_plugin_" + name + ".so";
}

fs::path write_config(const fs::path& dir, const std::string& target,
                      const std::string& extra = "") {
  const fs::path cfg = dir / "plugin.yaml";
  std::ofstream(cfg) << "collectors:\n  testplug:\n    _target_: " << target << "\n"
                     << extra << "    handler: {_target_: ScalarHandler, column: test_value}\n";
  return cfg;
}

PluginRun run_with(const fs::path& cfg, const fs::path& out, double seconds = 2.0) {
  PluginRun r;
  r.result = run_command({sonde_binary(), "run", "--quiet", "--interval", "0.2", "--levels",
                          "process,system", "--config", cfg.string(), "--out", out.string(), "--",
                          workload_binary(), "burn", std::to_string(seconds)});
  r.process = read_csv(out / "perf_process.csv");
  r.system = read_csv(out / "perf_system.csv");
  return r;
}

TEST(NativePlugins, GoodPluginWritesItsColumnAtEveryLevel) {
  const auto dir = scratch_dir("native-good");
  const auto r = run_with(write_config(dir, "plugin:" + plugin("good")), dir / "out");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  for (const auto* table : {&r.process, &r.system}) {
    const auto v = table->numbers("test_value");
    ASSERT_FALSE(v.empty());
    for (double x : v) EXPECT_EQ(x, 42);
  }
  expect_builtins_intact(r);
}

TEST(NativePlugins, ShownByCollectorsWithSourceFileAndPriority) {
  const auto dir = scratch_dir("native-list");
  const auto cfg = write_config(dir, "plugin:" + plugin("good"));
  const auto r = run_command({sonde_binary(), "collectors", "--config", cfg.string()});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("source   native (" + plugin("good") + ")"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("priority 5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("test_value"), std::string::npos) << r.out;
}

TEST(NativePlugins, ColumnsReachTheStream) {
  const auto dir = scratch_dir("native-stream");
  const auto cfg = write_config(dir, "plugin:" + plugin("good"));
  BackgroundProcess target({workload_binary(), "sleep", "5"});
  BackgroundProcess stream({sonde_binary(), "stream", "--interval", "0.1", "--levels",
                            "process,system", "--config", cfg.string(), "--target-pid",
                            std::to_string(target.pid())});
  const std::string ready = stream.read_line(10).value_or("");
  ASSERT_NE(ready.find("\"status\":\"ready\""), std::string::npos) << ready;
  EXPECT_NE(ready.find("test_value"), std::string::npos);
  const std::string sample = stream.read_line(10).value_or("");
  EXPECT_NE(sample.find("\"test_value\":42"), std::string::npos) << sample;
}

struct Misbehaviour {
  const char* name;
  const char* extra;      // more YAML for the entry
  bool disabled;          // expected to be disabled with a warning
  const char* warn_text;  // expected in the warning
};

class NativeFaults : public ::testing::TestWithParam<Misbehaviour> {};

TEST_P(NativeFaults, CostTheCollectorOnly) {
  const Misbehaviour& m = GetParam();
  const auto dir = scratch_dir(std::string("native-") + m.name);
  const auto r = run_with(write_config(dir, "plugin:" + plugin(m.name), m.extra), dir / "out", 2.5);
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  const auto v = r.process.numbers("test_value");
  ASSERT_GE(v.size(), 6u);
  EXPECT_EQ(v[0], 42);  // the plugin behaves for its first ticks
  EXPECT_TRUE(std::isnan(v.back())) << "a failing tick must be NaN";
  expect_builtins_intact(r);
  if (m.disabled) {
    EXPECT_NE(r.result.err.find("collector 'testplug' disabled after 5 consecutive failures"),
              std::string::npos)
        << r.result.err;
    EXPECT_NE(r.result.err.find(m.warn_text), std::string::npos) << r.result.err;
    // One warning, not one per tick.
    const auto first = r.result.err.find("disabled after");
    EXPECT_EQ(r.result.err.find("disabled after", first + 1), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plugins, NativeFaults,
    ::testing::Values(Misbehaviour{"hang", "", true, "deadline"},
                      Misbehaviour{"throw", "", true, "the test plugin throws"},
                      Misbehaviour{"wrong_type", "", true, "expected a scalar"},
                      Misbehaviour{"nan_value", "", false, ""},
                      Misbehaviour{"slow", "", true, "deadline"},
                      Misbehaviour{"crash", "    isolate: true\n", false, ""}),
    [](const auto& p) { return std::string(p.param.name); });

// A plugin that calls the host with NULL keys, handles and outputs: each call is refused and the
// run goes on with the plugin's values (on the main before issue 22, the first such call crashed
// sonde or threw through the plugin's frames).
TEST(NativePlugins, HostCallsWithNullArgumentsAreRefused) {
  const auto dir = scratch_dir("native-bad-args");
  const auto r = run_with(write_config(dir, "plugin:" + plugin("bad_args")), dir / "out", 2.0);
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  const auto v = r.process.numbers("test_value");
  ASSERT_GE(v.size(), 5u);
  for (double x : v) EXPECT_EQ(x, 42);
  EXPECT_NE(r.result.err.find("bad arguments survived"), std::string::npos) << r.result.err;
  EXPECT_EQ(r.result.err.find("disabled"), std::string::npos) << r.result.err;
  expect_builtins_intact(r);
}

TEST(NativePlugins, AbiMismatchIsRefusedNamingFileAndVersions) {
  const auto dir = scratch_dir("native-abi");
  const auto r = run_with(write_config(dir, "plugin:" + plugin("abi_mismatch")), dir / "out");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_NE(r.result.err.find(plugin("abi_mismatch")), std::string::npos) << r.result.err;
  EXPECT_NE(r.result.err.find("ABI 99.0"), std::string::npos) << r.result.err;
  EXPECT_NE(r.result.err.find("ABI 1."), std::string::npos) << r.result.err;
  EXPECT_FALSE(r.process.has_column("test_value"));
  expect_builtins_intact(r);
}

TEST(NativePlugins, UntrustedFilesAreRefusedAndTheRunGoesOn) {
  const auto dir = scratch_dir("native-trust");
  // Group-writable copy.
  const fs::path writable = dir / "libwritable.so";
  fs::copy_file(plugin("good"), writable);
  ::chmod(writable.c_str(), 0775);
  auto r = run_with(write_config(dir, "plugin:" + writable.string()), dir / "out1");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_NE(r.result.err.find("writable by its group"), std::string::npos) << r.result.err;
  EXPECT_FALSE(r.process.has_column("test_value"));
  expect_builtins_intact(r);
  // A symbolic link.
  const fs::path link = dir / "liblink.so";
  fs::create_symlink(plugin("good"), link);
  r = run_with(write_config(dir, "plugin:" + link.string()), dir / "out2");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_NE(r.result.err.find("symbolic link"), std::string::npos) << r.result.err;
  // A directory writable by others.
  const fs::path open_dir = dir / "open";
  fs::create_directories(open_dir);
  ::chmod(open_dir.c_str(), 0777);
  fs::copy_file(plugin("good"), open_dir / "libgood.so");
  r = run_with(write_config(dir, "plugin:" + (open_dir / "libgood.so").string()), dir / "out3");
  EXPECT_NE(r.result.err.find("its directory is writable by others"), std::string::npos)
      << r.result.err;
}

TEST(NativePlugins, FoundInThePluginPathThroughItsDefaultEntry) {
  const auto dir = scratch_dir("native-discover");
  const fs::path plugins = dir / "plugins";
  fs::create_directories(plugins);
  ::chmod(plugins.c_str(), 0755);
  fs::copy_file(plugin("good"), plugins / "libgood.so");
  const auto r = run_command({sonde_binary(), "run", "--quiet", "--interval", "0.2", "--out",
                              (dir / "out").string(), "--", workload_binary(), "sleep", "0.6"},
                             {.env = {{"SONDE_PLUGIN_PATH", plugins.string()}}});
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto csv = read_csv(dir / "out" / "perf_process.csv");
  ASSERT_TRUE(csv.has_column("test_value"));
  EXPECT_EQ(csv.numbers("test_value").front(), 42);
}

TEST(NativePlugins, FailingSetupMakesItUnavailableNotFatal) {
  const auto dir = scratch_dir("native-setup");
  const auto r =
      run_with(write_config(dir, "plugin:" + plugin("good"), "    fail_setup: yes\n"), dir / "out");
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_NE(r.result.err.find("asked to fail in setup"), std::string::npos) << r.result.err;
  EXPECT_FALSE(r.process.has_column("test_value"));
}

}  // namespace
}  // namespace sonde::test
