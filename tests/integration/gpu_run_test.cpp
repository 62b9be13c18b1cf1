// `sonde run` with the fake GPU libraries (tests/fakes): the gpu collector's columns per level,
// per-process attribution, node info and the summary's GPU tags; and without GPUs.
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

std::string scenario(const std::string& name) {
  return std::string(SONDE_FAKE_SCENARIOS) + "/" + name;
}

struct GpuRun {
  RunResult result;
  fs::path run;
  nlohmann::json summary;
};

GpuRun run_with(const std::string& library, const std::string& scenario_file,
                std::vector<std::string> workload) {
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
  options.env = {{"SONDE_NVML_LIBRARY", library},
                 {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
                 {"SONDE_FAKE_GPU_SCENARIO", scenario_file}};
  GpuRun r;
  r.result = run_command(argv, options);
  if (r.result.status == 0) {
    r.run = run_dir(dir / "out");
    r.summary = read_json(dir / "summary.json");
  }
  return r;
}

bool has_tag(const nlohmann::json& summary, const std::string& tag) {
  for (const auto& t : summary.at("tags"))
    if (t.get<std::string>() == tag) return true;
  return false;
}

// Rows where `column` equals `expected`, and rows where it has another (non-NaN) value.
std::pair<std::size_t, std::size_t> count_equal(const CsvTable& t, const std::string& column,
                                                double expected) {
  std::size_t eq = 0, other = 0;
  for (double v : t.numbers(column)) {
    if (std::isnan(v)) continue;
    (std::fabs(v - expected) < 1e-6 ? eq : other)++;
  }
  return {eq, other};
}

TEST(GpuRun, WorkloadGetsItsGpuColumnsAndTags) {
  const GpuRun r = run_with(SONDE_FAKE_NVML, scenario("nvidia_workload.json"), {"burn", "1"});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();

  const nlohmann::json manifest = read_json(r.run / "manifest.json");
  const auto& node = manifest.at("node_info");
  EXPECT_EQ(node.at("num_gpus").get<int>(), 2);
  EXPECT_EQ(node.at("gpu_name").get<std::string>(), "NVIDIA A100-SXM4-40GB");
  EXPECT_DOUBLE_EQ(node.at("gpu_memory_gib").get<double>(), 40.0);

  // The node: the devices as the driver reports them.
  const CsvTable sys = read_csv(r.run / "perf_system.csv");
  ASSERT_GE(sys.rows.size(), 3u);
  for (const char* c :
       {"gpu_util_0", "gpu_util_1", "gpu_util_avg", "gpu_util_min", "gpu_util_max", "gpu_band_0",
        "gpu_band_avg", "gpu_mem_0", "gpu_mem_max", "gpu_power_0", "gpu_power_avg"})
    EXPECT_TRUE(sys.has_column(c)) << c;
  EXPECT_FALSE(sys.has_column("gpu_util_2"));
  const std::vector<std::pair<const char*, double>> system_values = {
      {"gpu_util_0", 90}, {"gpu_util_1", 30},   {"gpu_util_avg", 60},
      {"gpu_band_0", 60}, {"gpu_band_1", 20},   {"gpu_mem_0", 38},
      {"gpu_mem_1", 10},  {"gpu_power_0", 300}, {"gpu_power_1", 100}};
  for (const auto& [column, value] : system_values) {
    const auto [eq, other] = count_equal(sys, column, value);
    EXPECT_EQ(other, 0u) << column;
    EXPECT_EQ(eq, sys.rows.size()) << column;
  }

  // The workload: its own process on GPU 0 (80 % SM, 50 % memory controller, 30 GiB), power in
  // proportion to its share of the device's utilisation; nothing on GPU 1.
  const CsvTable proc = read_csv(r.run / "perf_process.csv");
  ASSERT_GE(proc.rows.size(), 3u);
  const std::vector<std::pair<const char*, double>> process_values = {
      {"gpu_util_0", 80}, {"gpu_band_0", 50}, {"gpu_mem_0", 30}, {"gpu_power_0", 300.0 * 80 / 90}};
  for (const auto& [column, value] : process_values) {
    const auto [eq, other] = count_equal(proc, column, value);
    // Before exec the child still has sonde's name: the first row may not see it yet.
    EXPECT_LE(other, 1u) << column;
    EXPECT_GE(eq, proc.rows.size() - 1) << column;
  }
  for (const char* column : {"gpu_util_1", "gpu_mem_1", "gpu_power_1"}) {
    const auto [eq, other] = count_equal(proc, column, 0);
    EXPECT_EQ(other, 0u) << column;
  }

  EXPECT_EQ(r.summary.at("num_gpus").get<int>(), 2);
  EXPECT_EQ(r.summary.at("gpus_used").get<int>(), 1);
  EXPECT_NEAR(r.summary.at("gpu_util_mean").get<double>(), 80, 1.0);
  EXPECT_DOUBLE_EQ(r.summary.at("gpu_mem_peak_gib").get<double>(), 30);
  EXPECT_TRUE(has_tag(r.summary, "gpu-util-bound")) << r.summary.dump();
  EXPECT_FALSE(has_tag(r.summary, "gpu-memory-bound")) << r.summary.dump();
  // One definition of each GPU figure: the stored run's summary (the report's table, `sonde
  // compare`, Jupyter) says what the end-of-run summary said: the mean utilisation of the GPU the
  // workload used (not 40 %, the mean over both), the peak memory on one GPU.
  const fs::path page = r.run / "plain.html";
  const RunResult rep = run_command(
      {sonde_binary(), "report", r.run.string(), "--uncompressed", "--out", page.string()});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  const nlohmann::json data = report_data(page);
  ASSERT_TRUE(data.is_object()) << "the page embeds its data";
  const auto& groups = data.at("summary").at("levels").at("process").at("groups");
  EXPECT_NEAR(groups.at("gpu_util").at("mean").get<double>(),
              r.summary.at("gpu_util_mean").get<double>(), 0.5);
  EXPECT_NEAR(groups.at("gpu_mem").at("max").get<double>(),
              r.summary.at("gpu_mem_peak_gib").get<double>(), 1e-6);
  EXPECT_EQ(data.at("summary").at("gpus_used"), 1);
  EXPECT_NEAR(data.at("summary").at("gpu_util_mean").get<double>(),
              r.summary.at("gpu_util_mean").get<double>(), 0.5);
  EXPECT_FALSE(has_tag(r.summary, "gpu-allocated-but-not-used")) << r.summary.dump();
}

TEST(GpuRun, MemoryHeldButIdleIsTagged) {
  const GpuRun r =
      run_with(SONDE_FAKE_NVML, scenario("nvidia_workload_idle.json"), {"sleep", "0.8"});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  EXPECT_TRUE(has_tag(r.summary, "gpu-memory-bound")) << r.summary.dump();
  EXPECT_TRUE(has_tag(r.summary, "gpu-allocated-but-not-used")) << r.summary.dump();
  EXPECT_FALSE(has_tag(r.summary, "gpu-util-bound")) << r.summary.dump();
  EXPECT_NEAR(r.summary.at("gpu_mem_peak_gib").get<double>(), 38, 1e-9);
}

TEST(GpuRun, LostGpuLeavesItsColumnsEmpty) {
  const GpuRun r = run_with(SONDE_FAKE_NVML, scenario("nvidia_lost_gpu.json"), {"sleep", "0.5"});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  const CsvTable sys = read_csv(r.run / "perf_system.csv");
  ASSERT_GE(sys.rows.size(), 2u);
  for (double v : sys.numbers("gpu_util_1")) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(count_equal(sys, "gpu_util_0", 10).first, sys.rows.size());
  EXPECT_EQ(count_equal(sys, "gpu_util_2", 20).first, sys.rows.size());
  EXPECT_EQ(count_equal(sys, "gpu_util_avg", 15).first, sys.rows.size());
}

// A driver stuck in a call: the gpu collector's worker is abandoned at its deadline, the run goes
// on and ends complete, and sonde then ends without its exit handlers (which would tear the
// driver down under the stuck call; the fake aborts if they do, as a real one may crash).
TEST(GpuRun, DriverStuckInACallAtTheEndIsNotTornDown) {
  const fs::path dir = scratch_dir();
  const fs::path hang = dir / "hang";
  std::ofstream(hang) << "hang\n";
  RunOptions options;
  options.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
                 {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
                 {"SONDE_FAKE_GPU_SCENARIO", scenario("nvidia_workload.json")},
                 {"SONDE_FAKE_GPU_HANG_FILE", hang.string()}};
  const RunResult r =
      run_command({sonde_binary(), "run", "--out", (dir / "out").string(), "--interval", "0.1",
                   "--levels", "process,system", "--summary-json", (dir / "summary.json").string(),
                   "--", workload_binary(), "burn", "0.5"},
                  options);
  fs::remove(hang);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(hang.string() + ".torn-down")) << r.describe();
  EXPECT_NE(r.err.find("gpu"), std::string::npos) << "the stuck collector is reported: " << r.err;
  EXPECT_EQ(read_json(run_dir(dir / "out") / "manifest.json").at("complete"), true);
  EXPECT_TRUE(read_json(dir / "summary.json").contains("cpu_seconds"));
}

TEST(GpuRun, WithoutGpusThereAreNoGpuColumns) {
  const GpuRun r = run_with("/nonexistent/libnvidia-ml.so.1", scenario("nvidia_workload.json"),
                            {"sleep", "0.3"});
  ASSERT_EQ(r.result.status, 0) << r.result.describe();
  for (const char* file : {"perf_process.csv", "perf_system.csv"}) {
    const CsvTable t = read_csv(r.run / file);
    for (const auto& c : t.header) EXPECT_NE(c.rfind("gpu_", 0), 0u) << file << ": " << c;
  }
  EXPECT_EQ(r.summary.at("num_gpus").get<int>(), 0);
  EXPECT_TRUE(r.summary.at("gpu_util_mean").is_null());
  for (const auto& t : r.summary.at("tags")) EXPECT_NE(t.get<std::string>().rfind("gpu-", 0), 0u);

  RunOptions options;
  options.env = {{"SONDE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                 {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"}};
  const RunResult c = run_command({sonde_binary(), "collectors"}, options);
  ASSERT_EQ(c.status, 0) << c.describe();
  EXPECT_NE(c.out.find("unavailable: no GPU"), std::string::npos) << c.out;
}

TEST(GpuRun, AmdGpusThroughRocmSmi) {
  const fs::path dir = scratch_dir();
  RunOptions options;
  options.env = {{"SONDE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"},
                 {"SONDE_ROCM_SMI_LIBRARY", SONDE_FAKE_ROCM},
                 {"SONDE_FAKE_GPU_SCENARIO", scenario("amd_two_gpus.json")}};
  const RunResult r =
      run_command({sonde_binary(), "record", "--system", "--quiet", "--out", (dir / "out").string(),
                   "--interval", "0.1", "--duration", "0.5", "--levels", "system"},
                  options);
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = run_dir(dir / "out");
  const CsvTable sys = read_csv(run / "perf_system.csv");
  ASSERT_GE(sys.rows.size(), 2u);
  EXPECT_EQ(count_equal(sys, "gpu_util_0", 93).first, sys.rows.size());
  EXPECT_EQ(count_equal(sys, "gpu_mem_0", 48).first, sys.rows.size());
  EXPECT_EQ(count_equal(sys, "gpu_power_0", 350).first, sys.rows.size());
  for (double v : sys.numbers("gpu_power_1")) EXPECT_TRUE(std::isnan(v));
  for (double v : sys.numbers("gpu_band_1")) EXPECT_TRUE(std::isnan(v));
  EXPECT_EQ(read_json(run / "manifest.json").at("node_info").at("gpu_name"), "AMD Instinct MI250X");
}

TEST(GpuRun, JumperStyleEntryWithNodeInfo) {
  const fs::path dir = scratch_dir();
  const fs::path cfg = dir / "jumper.yaml";
  {
    std::ofstream f(cfg);
    f << "collectors:\n"
         "  gpu:\n"
         "    _target_: sonde.collectors.gpu_nvml\n"
         "    inject: [node_info]\n"
         "    handler:\n"
         "      _target_: jumper_extension.monitor.metrics.handlers."
         "PerDeviceMultiAggregateHandler\n"
         "      prefix: gpu_\n"
         "      metrics: [util, band, mem]\n";
  }
  RunOptions options;
  options.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
                 {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
                 {"SONDE_FAKE_GPU_SCENARIO", scenario("nvidia_lost_gpu.json")}};
  const RunResult r =
      run_command({sonde_binary(), "record", "--system", "--quiet", "--config", cfg.string(),
                   "--out", (dir / "out").string(), "--interval", "0.1", "--duration", "0.4"},
                  options);
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = run_dir(dir / "out");
  const CsvTable sys = read_csv(run / "perf_system.csv");
  EXPECT_TRUE(sys.has_column("gpu_mem_2"));
  EXPECT_FALSE(sys.has_column("gpu_power_0"));
  EXPECT_EQ(count_equal(sys, "gpu_band_2", 7).first, sys.rows.size());
  EXPECT_EQ(read_json(run / "manifest.json").at("node_info").at("num_gpus").get<int>(), 3);
}

}  // namespace
}  // namespace sonde::test
