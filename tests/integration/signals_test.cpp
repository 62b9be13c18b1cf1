// SIGTERM, SIGINT and SIGHUP end every entry point cleanly on a node with a GPU: the GPU collector
// runs on the engine's watchdog worker (a thread), and a thread that left the signals unblocked
// took them with their default action, so that sonde died without its summary (exit 143) and
// `sonde run` left its command running as an orphan. Each case runs with the fake NVML and checks
// the end a user relies on: the exit status, a complete manifest, the summary, the command told.
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"
#include "support/signal_case.hpp"

namespace sonde::test {
namespace {

#ifdef SONDE_FAKE_NVML

RunOptions gpu_env() {
  RunOptions o;
  o.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
           {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
           {"SONDE_FAKE_GPU_SCENARIO", std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_workload.json"},
           {"SONDE_PLUGIN_PATH", ""}};
  o.timeout_s = 60;
  return o;
}

// Waits until `file` has at least `lines` lines (the sampler is running and has written rows).
bool wait_for_lines(const fs::path& dir, const std::string& name, std::size_t lines,
                    BackgroundProcess& p, double timeout_s = 30) {
  for (double waited = 0; waited < timeout_s; waited += 0.05) {
    std::error_code ec;
    if (fs::exists(dir, ec))
      for (const auto& e : fs::recursive_directory_iterator(dir, ec))
        if (e.path().filename() == name) {
          const std::string text = read_file(e.path());
          if (static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) >= lines)
            return true;
        }
    if (!p.running() || p.poll()) return false;
    sleep_for(0.05);
  }
  return false;
}

// The run was recorded with the GPU collector (so the watchdog's thread existed), is complete and
// the summary was printed.
void expect_complete_run(const fs::path& out, const std::string& level, const std::string& err) {
  const fs::path run = run_dir(out);
  const nlohmann::json manifest = read_json(run / "manifest.json");
  EXPECT_TRUE(manifest.at("complete").get<bool>()) << manifest.dump(2);
  const CsvTable t = read_csv(run / ("perf_" + level + ".csv"));
  bool gpu = false;
  for (const auto& h : t.header) gpu = gpu || h.rfind("gpu", 0) == 0;
  EXPECT_TRUE(gpu) << "no GPU column: the case does not exercise the watchdog's thread";
  EXPECT_NE(err.find("sonde summary ("), std::string::npos) << err;
}

class SignalOnGpuNode : public ::testing::TestWithParam<SignalCase> {};

TEST_P(SignalOnGpuNode, RunTellsTheCommandAndEndsWithItsSummary) {
  const SignalCase c = GetParam();
  const fs::path dir = scratch_dir();
  const fs::path trap_file = dir / "signals.txt";
  BackgroundProcess sonde(
      {sonde_binary(), "run", "--interval", "0.1", "--levels", "process,system", "--out",
       (dir / "out").string(), "--", workload_binary(), "trap", trap_file.string(), "20"},
      gpu_env());
  std::optional<std::string> line;
  while ((line = sonde.read_line(30)) && *line != "ready") {
  }
  ASSERT_TRUE(line.has_value()) << "no 'ready' from the workload; stderr: " << sonde.err();
  ASSERT_TRUE(wait_for_lines(dir / "out", "perf_process.csv", 3, sonde)) << sonde.err();

  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "sonde did not exit after the signal; stderr: " << sonde.err();
  EXPECT_EQ(*status, 100 + c.signum) << "stderr: " << sonde.err();  // the command's status
  EXPECT_EQ(read_file(trap_file), std::string(c.name) + "\n")
      << "the command should have received " << c.name << " exactly once";
  expect_complete_run(dir / "out", "process", sonde.err());
}

TEST_P(SignalOnGpuNode, RecordSystemEndsWithItsSummary) {
  const SignalCase c = GetParam();
  const fs::path dir = scratch_dir();
  BackgroundProcess sonde(
      {sonde_binary(), "record", "--system", "--interval", "0.1", "--out", (dir / "out").string()},
      gpu_env());
  ASSERT_TRUE(wait_for_lines(dir / "out", "perf_system.csv", 3, sonde)) << sonde.err();
  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "sonde did not exit after the signal; stderr: " << sonde.err();
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
  expect_complete_run(dir / "out", "system", sonde.err());
}

TEST_P(SignalOnGpuNode, RecordPidEndsWithItsSummaryAndLeavesTheProcessAlone) {
  const SignalCase c = GetParam();
  const fs::path dir = scratch_dir();
  BackgroundProcess target({workload_binary(), "sleep", "60"});
  BackgroundProcess sonde(
      {sonde_binary(), "record", "--pid", std::to_string(target.pid()), "--levels",
       "process,system", "--interval", "0.1", "--out", (dir / "out").string()},
      gpu_env());
  ASSERT_TRUE(wait_for_lines(dir / "out", "perf_process.csv", 3, sonde)) << sonde.err();
  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "sonde did not exit after the signal; stderr: " << sonde.err();
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
  expect_complete_run(dir / "out", "process", sonde.err());
  EXPECT_TRUE(target.running() && !target.poll()) << "the recorded process was harmed";
}

TEST_P(SignalOnGpuNode, StreamEndsWithStatus0) {
  const SignalCase c = GetParam();
  BackgroundProcess target({workload_binary(), "sleep", "60"});
  BackgroundProcess sonde({sonde_binary(), "stream", "--target-pid", std::to_string(target.pid()),
                           "--interval", "0.1", "--levels", "process,system"},
                          gpu_env());
  int samples = 0;
  bool gpu = false;
  for (int i = 0; i < 40 && samples < 3; ++i) {
    const auto line = sonde.read_line(30);
    ASSERT_TRUE(line.has_value()) << "stream ended early; stderr: " << sonde.err();
    gpu = gpu || line->find("\"gpu") != std::string::npos;
    if (line->find("\"status\"") == std::string::npos) ++samples;
  }
  EXPECT_TRUE(gpu) << "no GPU field: the case does not exercise the watchdog's thread";
  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "stream did not exit after the signal; stderr: "
                                  << sonde.err();
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
}

TEST_P(SignalOnGpuNode, AgentSaysWhyItEnded) {
  const SignalCase c = GetParam();
  RunOptions o = gpu_env();
  o.env.emplace_back("SLURM_JOB_ID", "424242");
  BackgroundProcess sonde(
      {sonde_binary(), "agent", "--job", "424242", "--interval", "0.1", "--node-name", "n1"}, o);
  int lines = 0;
  for (; lines < 4; ++lines)
    ASSERT_TRUE(sonde.read_line(30).has_value()) << "agent ended early; stderr: " << sonde.err();
  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "agent did not exit after the signal; stderr: " << sonde.err();
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
  std::string last;
  while (auto line = sonde.read_line(1)) last = *line;
  EXPECT_NE(last.find("\"end\""), std::string::npos) << last;
  EXPECT_NE(last.find("signal"), std::string::npos) << last;
}

TEST_P(SignalOnGpuNode, ServeStopsWithStatus0) {
  const SignalCase c = GetParam();
  BackgroundProcess sonde({sonde_binary(), "serve", "--listen", "127.0.0.1:0", "--interval", "0.1"},
                          gpu_env());
  for (double waited = 0; waited < 30 && sonde.err().find("serving") == std::string::npos;
       waited += 0.05) {
    ASSERT_FALSE(sonde.poll().has_value()) << sonde.err();
    (void)sonde.read_line(0.05);  // drains stderr too
  }
  ASSERT_NE(sonde.err().find("serving"), std::string::npos) << sonde.err();
  sleep_for(0.5);  // a few ticks, the GPU collector's thread among them
  sonde.signal(c.signum);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value()) << "serve did not exit after the signal; stderr: " << sonde.err();
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
}

INSTANTIATE_TEST_SUITE_P(Signals, SignalOnGpuNode,
                         ::testing::Values(SignalCase{SIGTERM, "TERM"}, SignalCase{SIGINT, "INT"},
                                           SignalCase{SIGHUP, "HUP"}),
                         [](const auto& p) { return std::string(p.param.name); });

#endif  // SONDE_FAKE_NVML

}  // namespace
}  // namespace sonde::test
