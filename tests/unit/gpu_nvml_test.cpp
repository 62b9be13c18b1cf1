// The NVML backend against the fake libnvidia-ml.so.1 and its scenarios (tests/fakes).
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "gpu/gpu.hpp"
#include "support/built_paths.hpp"
#include "support/fake_gpu_env.hpp"

namespace sonde::gpu {
namespace {

constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

// Points sonde at a fake library and a scenario for one test, and back afterwards.
class FakeGpu : public test::FakeGpuEnv {
 public:
  FakeGpu(const char* library, const std::string& scenario, const char* rocm = "/nonexistent/x.so")
      : FakeGpuEnv(library, rocm, scenario, "999991,999992,999993") {}
};

const GpuProcess* find_pid(const GpuDevice& d, int pid) {
  if (!d.processes) return nullptr;
  for (const auto& p : *d.processes)
    if (p.pid == pid) return &p;
  return nullptr;
}

TEST(GpuNvml, ThreeGpusAndOneWithoutSupport) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  Gpus gpus = open_gpus();
  ASSERT_TRUE(gpus.nvml_loaded);
  ASSERT_EQ(gpus.backends.size(), 1u);
  EXPECT_STREQ(gpus.backends[0]->vendor(), "nvidia");
  GpuSnapshot s = query_all(gpus, true);
  EXPECT_EQ(s.nvidia_driver, "550.54.15");
  EXPECT_EQ(s.amd_driver, "");
  ASSERT_EQ(s.devices.size(), 4u);

  const GpuDevice& d0 = s.devices[0];
  EXPECT_FALSE(d0.error.has_value());
  EXPECT_EQ(d0.index, 0);
  EXPECT_EQ(d0.vendor, "nvidia");
  EXPECT_EQ(d0.name, "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(d0.uuid, "GPU-a1000000-0000-0000-0000-000000000000");
  EXPECT_EQ(d0.pci_bus_id, "00000000:07:00.0");
  EXPECT_EQ(d0.temperature_c, 41.0);
  EXPECT_EQ(d0.fan_percent, 30.0);
  EXPECT_EQ(d0.util_gpu, 87.0);
  EXPECT_EQ(d0.util_mem, 45.0);
  // The v2 call (correct version stamp) reports used memory without the reserved 512 MiB.
  EXPECT_EQ(d0.mem_used_bytes, 20480 * kMiB);
  EXPECT_EQ(d0.mem_total_bytes, 40960 * kMiB);
  EXPECT_DOUBLE_EQ(*d0.power_w, 250.5);
  EXPECT_DOUBLE_EQ(*d0.power_limit_w, 400.0);
  EXPECT_EQ(d0.energy_mj, 123456789u);
  EXPECT_EQ(d0.enc_util, 0.0);
  EXPECT_EQ(d0.dec_util, 5.0);
  // Compute and graphics lists merged by pid.
  ASSERT_TRUE(d0.processes.has_value());
  EXPECT_EQ(d0.processes->size(), 4u);
  const GpuProcess* self = find_pid(d0, static_cast<int>(getpid()));
  ASSERT_NE(self, nullptr);
  EXPECT_TRUE(self->compute);
  EXPECT_TRUE(self->graphics);
  EXPECT_EQ(self->used_memory_bytes, 10240 * kMiB);
  EXPECT_EQ(self->sm_util, 60.0);
  EXPECT_EQ(self->mem_util, 30.0);
  const GpuProcess* graphics_only = find_pid(d0, 999992);
  ASSERT_NE(graphics_only, nullptr);
  EXPECT_FALSE(graphics_only->compute);
  EXPECT_TRUE(graphics_only->graphics);
  EXPECT_EQ(graphics_only->sm_util, 0.0);  // supported, and no sample: it did not run
  const GpuProcess* init = find_pid(d0, 1);
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->sm_util, 20.0);
  EXPECT_EQ(init->dec_util, 5.0);

  // Two insufficient-size answers in a row: the retry still gets both processes.
  const GpuDevice& d1 = s.devices[1];
  ASSERT_TRUE(d1.processes.has_value());
  ASSERT_EQ(d1.processes->size(), 2u);
  EXPECT_NE(find_pid(d1, 999993), nullptr);
  EXPECT_NE(find_pid(d1, static_cast<int>(getppid())), nullptr);
  // No per-process utilisation offered on this device: absent, not 0.
  EXPECT_FALSE((*d1.processes)[0].sm_util.has_value());

  const GpuDevice& d2 = s.devices[2];
  ASSERT_TRUE(d2.processes.has_value());
  EXPECT_TRUE(d2.processes->empty());
  EXPECT_EQ(d2.util_gpu, 0.0);

  // "Not supported" is absent, never 0.
  const GpuDevice& d3 = s.devices[3];
  EXPECT_FALSE(d3.error.has_value());
  EXPECT_EQ(d3.name, "Tesla K80");
  EXPECT_EQ(d3.temperature_c, 35.0);
  EXPECT_FALSE(d3.util_gpu.has_value());
  EXPECT_FALSE(d3.util_mem.has_value());
  EXPECT_FALSE(d3.power_w.has_value());
  EXPECT_FALSE(d3.power_limit_w.has_value());
  EXPECT_FALSE(d3.fan_percent.has_value());
  EXPECT_FALSE(d3.energy_mj.has_value());
  EXPECT_FALSE(d3.enc_util.has_value());
  EXPECT_FALSE(d3.processes.has_value());
  EXPECT_TRUE(d3.pci_bus_id.empty());
  // Memory through the v1 fallback.
  EXPECT_EQ(d3.mem_used_bytes, 1000 * kMiB);
  EXPECT_EQ(d3.mem_total_bytes, 11441 * kMiB);
}

TEST(GpuNvml, WithoutProcessesListsNone) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  Gpus gpus = open_gpus();
  GpuSnapshot s = query_all(gpus, false);
  ASSERT_EQ(s.devices.size(), 4u);
  EXPECT_FALSE(s.devices[0].processes.has_value());
  EXPECT_EQ(s.devices[0].util_gpu, 87.0);
}

TEST(GpuNvml, ProcessUtilisationSamplesAreConsumedOncePerSample) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_three_gpus.json");
  Gpus gpus = open_gpus();
  for (int round = 0; round < 3; ++round) {
    GpuSnapshot s = query_all(gpus, true);
    const GpuProcess* self = find_pid(s.devices[0], static_cast<int>(getpid()));
    ASSERT_NE(self, nullptr);
    EXPECT_EQ(self->sm_util, 60.0) << "round " << round;
  }
}

TEST(GpuNvml, DriverWithoutV3ProcessCalls) {
  FakeGpu fake(SONDE_FAKE_NVML_NO_V3, "nvidia_no_v3.json");
  Gpus gpus = open_gpus();
  ASSERT_EQ(gpus.backends.size(), 1u);
  GpuSnapshot s = query_all(gpus, true);
  EXPECT_EQ(s.nvidia_driver, "470.182.03");
  ASSERT_EQ(s.devices.size(), 1u);
  const GpuDevice& d = s.devices[0];
  ASSERT_TRUE(d.processes.has_value());
  ASSERT_EQ(d.processes->size(), 2u);
  const GpuProcess* self = find_pid(d, static_cast<int>(getpid()));
  ASSERT_NE(self, nullptr);
  EXPECT_TRUE(self->compute && self->graphics);
  EXPECT_EQ(self->used_memory_bytes, 5000 * kMiB);
  const GpuProcess* init = find_pid(d, 1);
  ASSERT_NE(init, nullptr);
  EXPECT_FALSE(init->used_memory_bytes.has_value());  // NVML_VALUE_NOT_AVAILABLE
}

TEST(GpuNvml, LostGpuKeepsTheOthers) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_lost_gpu.json");
  Gpus gpus = open_gpus();
  GpuSnapshot s = query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 3u);
  EXPECT_FALSE(s.devices[0].error.has_value());
  EXPECT_EQ(s.devices[0].util_gpu, 10.0);
  ASSERT_TRUE(s.devices[1].error.has_value());
  EXPECT_NE(s.devices[1].error->find("lost"), std::string::npos) << *s.devices[1].error;
  EXPECT_EQ(s.devices[1].index, 1);
  EXPECT_FALSE(s.devices[1].util_gpu.has_value());
  EXPECT_FALSE(s.devices[2].error.has_value());
  EXPECT_EQ(s.devices[2].util_gpu, 20.0);
  EXPECT_EQ(s.devices[2].index, 2);
}

TEST(GpuNvml, NoDevices) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_no_devices.json");
  Gpus gpus = open_gpus();
  EXPECT_TRUE(gpus.nvml_loaded);
  EXPECT_TRUE(gpus.backends.empty());
  EXPECT_EQ(gpus.nvidia_driver, "550.54.15");
  ASSERT_FALSE(gpus.notes.empty());
  EXPECT_NE(gpus.notes[0].find("no NVIDIA GPU"), std::string::npos) << gpus.notes[0];
  GpuSnapshot s = query_all(gpus, true);
  EXPECT_TRUE(s.devices.empty());
  EXPECT_EQ(s.nvidia_driver, "550.54.15");
}

TEST(GpuNvml, InitialisationFailure) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_init_failure.json");
  Gpus gpus = open_gpus();
  EXPECT_FALSE(gpus.nvml_loaded);
  EXPECT_TRUE(gpus.backends.empty());
  ASSERT_FALSE(gpus.notes.empty());
  EXPECT_NE(gpus.notes[0].find("driver is not loaded"), std::string::npos) << gpus.notes[0];
}

TEST(GpuNvml, MissingLibrary) {
  FakeGpu fake("/nonexistent/libnvidia-ml.so.1", "nvidia_three_gpus.json");
  Gpus gpus = open_gpus();
  EXPECT_FALSE(gpus.nvml_loaded);
  EXPECT_TRUE(gpus.backends.empty());
  ASSERT_GE(gpus.notes.size(), 1u);
  EXPECT_NE(gpus.notes[0].find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  EXPECT_TRUE(query_all(gpus, true).devices.empty());
}

TEST(GpuNvml, EightGpusTwoHundredProcesses) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_8gpu_200proc.json");
  Gpus gpus = open_gpus();
  GpuSnapshot s = query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 8u);
  for (const auto& d : s.devices) {
    ASSERT_TRUE(d.processes.has_value());
    EXPECT_GT(d.processes->size(), 0u);
  }
}

}  // namespace
}  // namespace sonde::gpu
