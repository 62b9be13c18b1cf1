// The two summaries agree: `sonde run`'s (summary_json, from running statistics) and that of the
// stored run (summarize_run, what `sonde report` and the Jupyter package show), on the same run
// with the fake GPU libraries: the same tags, ticks and figures.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "core/live_summary.hpp"
#include "core/stored_summary.hpp"
#include "sinks/run_reader.hpp"
#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

void expect_same_number(const nlohmann::json& live, const nlohmann::json& stored, const char* key) {
  ASSERT_TRUE(live.contains(key)) << key;
  ASSERT_TRUE(stored.contains(key)) << key;
  if (live[key].is_null() || stored[key].is_null()) {
    EXPECT_EQ(live[key].is_null(), stored[key].is_null()) << key;
    return;
  }
  const double a = live[key].get<double>(), b = stored[key].get<double>();
  // The run directory keeps 10 significant digits.
  EXPECT_NEAR(a, b, 1e-6 * std::max(1.0, std::fabs(a))) << key;
}

void check_agreement(const std::string& scenario_file, std::vector<std::string> workload) {
  const fs::path dir = scratch_dir();
  std::vector<std::string> argv = {sonde_binary(),
                                   "run",
                                   "--quiet",
                                   "--out",
                                   (dir / "out").string(),
                                   "--interval",
                                   "0.1",
                                   "--levels",
                                   "process,system",
                                   "--summary-json",
                                   (dir / "summary.json").string(),
                                   "--",
                                   workload_binary()};
  argv.insert(argv.end(), workload.begin(), workload.end());
  RunOptions options;
  options.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
                 {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
                 {"SONDE_FAKE_GPU_SCENARIO", scenario_file}};
  const RunResult result = run_command(argv, options);
  ASSERT_EQ(result.status, 0) << result.describe();
  const nlohmann::json live = read_json(dir / "summary.json");
  auto run = read_run(run_dir(dir / "out").string());
  ASSERT_TRUE(run) << run.error().message;
  const nlohmann::json stored = summarize_run(*run);

  EXPECT_EQ(live.at("tags"), stored.at("tags")) << live.dump() << "\n" << stored.dump();
  EXPECT_FALSE(live.at("tags").empty()) << "the scenario is chosen to give tags";
  EXPECT_EQ(live.at("level"), stored.at("level"));
  EXPECT_EQ(live.at("ticks"), stored.at("ticks"));
  EXPECT_EQ(live.at("command"), stored.at("command"));
  EXPECT_EQ(live.at("exit_status"), stored.at("exit_status"));
  for (const char* key :
       {"num_cpus", "cpu_mean_cores", "cpu_peak_cores", "memory_peak_gib", "memory_limit_gib"})
    expect_same_number(live, stored, key);
  // Time integrals: the live run weighs each value by the engine's dt (0 s for the first tick),
  // the stored run by the time between its rows (the first row by the interval): they differ by
  // at most the first row's share, plus rounding.
  const LevelTable* process = run->find(Level::process);
  ASSERT_NE(process, nullptr);
  ASSERT_FALSE(process->rows.empty());
  const double cpus = live.at("num_cpus").get<double>();
  for (const auto& [key, column, scale] :
       {std::tuple{"cpu_seconds", "cpu_util_avg", cpus / 100},
        std::tuple{"read_bytes", "io_read", 1.0}, std::tuple{"written_bytes", "io_write", 1.0}}) {
    const auto c = process->find(column);
    ASSERT_TRUE(c) << column;
    const double first = process->rows.front()[*c];
    const double first_weight = std::isfinite(first) ? std::fabs(first) * 0.1 * scale : 0.0;
    ASSERT_TRUE(live.at(key).is_number() && stored.at(key).is_number()) << key;
    const double a = live.at(key).get<double>(), b = stored.at(key).get<double>();
    EXPECT_LE(std::fabs(b - a), first_weight + 1e-3 * std::max(1.0, std::fabs(a))) << key;
  }
}

TEST(SummaryAgreement, BusyGpuRun) {
  check_agreement(std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_workload.json", {"burn", "1"});
}

TEST(SummaryAgreement, IdleGpuMemoryRun) {
  check_agreement(std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_workload_idle.json",
                  {"sleep", "0.8"});
}

}  // namespace
}  // namespace sonde::test
