// The gpu collector on the fake NVML: node info, system values, per-process attribution.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "core/collector.hpp"
#include "core/handlers.hpp"
#include "support/built_paths.hpp"

namespace sonde {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

class GpuCollectorTest : public ::testing::Test {
 protected:
  void use(const char* library, const std::string& scenario) {
    setenv("SONDE_NVML_LIBRARY", library, 1);
    setenv("SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so", 1);
    setenv("SONDE_FAKE_GPU_SCENARIO", (std::string(SONDE_FAKE_SCENARIOS) + "/" + scenario).c_str(),
           1);
    setenv("SONDE_FAKE_GPU_PIDS", "999991,999992,999993", 1);
  }
  void TearDown() override {
    for (const char* v : {"SONDE_NVML_LIBRARY", "SONDE_ROCM_SMI_LIBRARY", "SONDE_FAKE_GPU_SCENARIO",
                          "SONDE_FAKE_GPU_PIDS"})
      unsetenv(v);
  }
  std::unique_ptr<Collector> make(const std::string& target = "gpu",
                                  std::vector<std::string> metrics = {"util", "band", "mem",
                                                                      "power"}) {
    register_builtin_collectors(registry_);
    const CollectorInfo* info = registry_.find(target);
    EXPECT_NE(info, nullptr) << target;
    if (info == nullptr) return nullptr;
    CollectorArgs args;
    args.name = "gpu";
    args.roots = &roots_;
    args.handler_metrics = std::move(metrics);
    return info->make(args);
  }
  // A tick whose process level holds `pid` only.
  TickContext tick_with(int pid) {
    procs_ = ProcSnapshot{};
    PidSample s;
    s.pid = pid;
    s.level_mask = 1u << level_index(Level::process);
    procs_.pids.push_back(s);
    procs_.members[level_index(Level::process)] = {0};
    TickContext ctx;
    ctx.procs = &procs_;
    return ctx;
  }

  Registry registry_;
  Roots roots_;
  ProcSnapshot procs_;
};

const std::vector<std::vector<double>>& metrics(const Result<RawValue>& r) {
  return std::get<MultiPerDevice>(*r).metrics;
}

TEST_F(GpuCollectorTest, UnavailableWithoutGpus) {
  use("/nonexistent/libnvidia-ml.so.1", "nvidia_three_gpus.json");
  auto c = make();
  auto ok = c->setup();
  ASSERT_FALSE(ok.ok());
  EXPECT_NE(ok.error().message.find("no GPU"), std::string::npos) << ok.error().message;
}

TEST_F(GpuCollectorTest, UnavailableWithoutDevices) {
  use(SONDE_FAKE_NVML, "nvidia_no_devices.json");
  auto c = make();
  EXPECT_FALSE(c->setup().ok());
}

TEST_F(GpuCollectorTest, NodeInfoAndSystemValues) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make();
  ASSERT_TRUE(c->setup().ok());
  EXPECT_EQ(c->devices(Level::system), 4u);
  NodeInfo node;
  c->contribute_node_info(node);
  EXPECT_EQ(node.num_gpus, 4);
  EXPECT_EQ(node.gpu_name, "NVIDIA A100-SXM4-40GB, Tesla K80");
  EXPECT_DOUBLE_EQ(node.gpu_memory_gib, 11441.0 / 1024.0);

  TickContext ctx = tick_with(static_cast<int>(getpid()));
  c->snapshot(ctx);
  auto r = c->collect(Level::system, ctx);
  ASSERT_TRUE(r.ok());
  const auto& m = metrics(r);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0][0], 87);
  EXPECT_EQ(m[0][1], 100);
  EXPECT_EQ(m[0][2], 0);
  EXPECT_TRUE(std::isnan(m[0][3]));  // not supported: NaN, never 0
  EXPECT_EQ(m[1][0], 45);
  EXPECT_DOUBLE_EQ(m[2][0], 20.0);
  EXPECT_DOUBLE_EQ(m[2][3], 1000.0 / 1024.0);
  EXPECT_DOUBLE_EQ(m[3][0], 250.5);
  EXPECT_TRUE(std::isnan(m[3][3]));

  // The handler names the columns as docs/gpus.md says.
  HandlerSpec spec;
  spec.target = "PerDeviceMultiAggregateHandler";
  spec.prefix = "gpu_";
  spec.metrics = {"util", "band", "mem", "power"};
  auto h = make_handler(spec);
  ASSERT_TRUE(h.ok());
  const auto cols = (*h)->columns(c->devices(Level::system));
  ASSERT_EQ(cols.size(), 4u * 7u);
  EXPECT_EQ(cols[0], "gpu_util_0");
  EXPECT_EQ(cols[4], "gpu_util_avg");
  EXPECT_EQ(cols[7], "gpu_band_0");
  EXPECT_EQ(cols[14], "gpu_mem_0");
  EXPECT_EQ(cols[27], "gpu_power_max");
}

TEST_F(GpuCollectorTest, ProcessLevelUsesItsOwnSamples) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make();
  ASSERT_TRUE(c->setup().ok());
  TickContext ctx = tick_with(static_cast<int>(getpid()));
  c->snapshot(ctx);
  auto r = c->collect(Level::process, ctx);
  ASSERT_TRUE(r.ok());
  const auto& m = metrics(r);
  // GPU 0: its own SM (60) and memory-controller (30) samples, 10 GiB, power by util share.
  EXPECT_EQ(m[0][0], 60);
  EXPECT_EQ(m[1][0], 30);
  EXPECT_DOUBLE_EQ(m[2][0], 10.0);
  EXPECT_DOUBLE_EQ(m[3][0], 250.5 * 60 / 87);
  // GPUs 1 and 2: none of its processes.
  for (int metric = 0; metric < 4; ++metric) {
    EXPECT_EQ(m[metric][1], 0);
    EXPECT_EQ(m[metric][2], 0);
  }
  // GPU 3 cannot list processes: unknown.
  for (int metric = 0; metric < 4; ++metric) EXPECT_TRUE(std::isnan(m[metric][3]));
}

TEST_F(GpuCollectorTest, ProcessWithoutSamplesGetsTheDeviceUtilisation) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make();
  ASSERT_TRUE(c->setup().ok());
  TickContext ctx = tick_with(static_cast<int>(getppid()));  // holds 9000 MiB on GPU 1
  c->snapshot(ctx);
  auto r = c->collect(Level::process, ctx);
  ASSERT_TRUE(r.ok());
  const auto& m = metrics(r);
  EXPECT_EQ(m[0][1], 100);
  EXPECT_EQ(m[1][1], 80);
  EXPECT_DOUBLE_EQ(m[2][1], 9000.0 * 1024 * 1024 / kGiB);
  EXPECT_DOUBLE_EQ(m[3][1], 398);
  EXPECT_EQ(m[0][0], 0);
}

TEST_F(GpuCollectorTest, HandlerMetricsChooseAndOrderTheVectors) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make("sonde.collectors.gpu_nvml", {"mem", "util"});  // a JUmPER-style subset
  ASSERT_TRUE(c->setup().ok());
  TickContext ctx = tick_with(static_cast<int>(getpid()));
  c->snapshot(ctx);
  auto r = c->collect(Level::system, ctx);
  ASSERT_TRUE(r.ok());
  const auto& m = metrics(r);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m[0][0], 20.0);
  EXPECT_EQ(m[1][0], 87);
}

TEST_F(GpuCollectorTest, UnknownMetricMakesItUnavailable) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make("gpu", {"util", "temperature"});
  auto ok = c->setup();
  ASSERT_FALSE(ok.ok());
  EXPECT_NE(ok.error().message.find("unknown GPU metric 'temperature'"), std::string::npos)
      << ok.error().message;
}

TEST_F(GpuCollectorTest, VendorCollectorSeesOnlyItsVendor) {
  use(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  auto c = make("sonde.collectors.gpu_rocm");
  EXPECT_FALSE(c->setup().ok());
}

}  // namespace
}  // namespace sonde
