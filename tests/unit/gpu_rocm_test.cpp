// The ROCm SMI backend against the fake librocm_smi64.so (tests/fakes).
#include <unistd.h>

#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "gpu/gpu.hpp"
#include "support/built_paths.hpp"
#include "support/fake_gpu_env.hpp"

namespace sonde::gpu {
namespace {

constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

class FakeRocm : public test::FakeGpuEnv {
 public:
  explicit FakeRocm(const std::string& scenario, const char* nvml = "/nonexistent/libnvml.so")
      : FakeGpuEnv(nvml, SONDE_FAKE_ROCM, scenario, "999991") {}
};

TEST(GpuRocm, TwoGpusWithProcesses) {
  FakeRocm fake("amd_two_gpus.json");
  Gpus gpus = open_gpus();
  EXPECT_FALSE(gpus.nvml_loaded);
  EXPECT_TRUE(gpus.rocm_loaded);
  ASSERT_EQ(gpus.backends.size(), 1u);
  EXPECT_STREQ(gpus.backends[0]->vendor(), "amd");
  GpuSnapshot s = query_all(gpus, true);
  EXPECT_EQ(s.amd_driver, "6.7.0");
  EXPECT_EQ(s.nvidia_driver, "");
  ASSERT_EQ(s.devices.size(), 2u);

  const GpuDevice& d0 = s.devices[0];
  EXPECT_FALSE(d0.error.has_value());
  EXPECT_EQ(d0.vendor, "amd");
  EXPECT_EQ(d0.name, "AMD Instinct MI250X");
  EXPECT_EQ(d0.uuid, "00001234567890ab");
  EXPECT_EQ(d0.pci_bus_id, "0000:0d:00.0");
  EXPECT_EQ(d0.util_gpu, 93.0);
  EXPECT_EQ(d0.util_mem, 41.0);
  EXPECT_EQ(d0.temperature_c, 52.0);
  ASSERT_TRUE(d0.fan_percent.has_value());
  EXPECT_NEAR(*d0.fan_percent, 40.0, 0.5);
  EXPECT_EQ(d0.mem_used_bytes, 49152 * kMiB);
  EXPECT_EQ(d0.mem_total_bytes, 65536 * kMiB);
  EXPECT_DOUBLE_EQ(*d0.power_w, 350.0);
  EXPECT_DOUBLE_EQ(*d0.power_limit_w, 560.0);
  ASSERT_TRUE(d0.energy_mj.has_value());
  EXPECT_NEAR(static_cast<double>(*d0.energy_mj), 918000.0, 1.0);
  EXPECT_FALSE(d0.enc_util.has_value());
  ASSERT_TRUE(d0.processes.has_value());
  ASSERT_EQ(d0.processes->size(), 2u);
  const GpuProcess& self = (*d0.processes)[0];
  EXPECT_EQ(self.pid, static_cast<int>(getpid()));
  EXPECT_EQ(self.used_memory_bytes, 32768 * kMiB);
  EXPECT_EQ(self.sm_util, 70.0);
  // A process on both GPUs: per-device memory, not its total.
  const GpuProcess& other = (*d0.processes)[1];
  EXPECT_EQ(other.pid, 999991);
  EXPECT_EQ(other.used_memory_bytes, 8192 * kMiB);

  const GpuDevice& d1 = s.devices[1];
  EXPECT_FALSE(d1.error.has_value());
  EXPECT_EQ(d1.pci_bus_id, "0000:0d:01.0");
  EXPECT_EQ(d1.temperature_c, 45.0);  // junction sensor when there is no edge sensor
  EXPECT_FALSE(d1.power_w.has_value());
  EXPECT_FALSE(d1.power_limit_w.has_value());
  EXPECT_FALSE(d1.fan_percent.has_value());
  EXPECT_FALSE(d1.util_mem.has_value());
  EXPECT_EQ(d1.util_gpu, 12.0);
  ASSERT_TRUE(d1.processes.has_value());
  ASSERT_EQ(d1.processes->size(), 1u);
  EXPECT_EQ((*d1.processes)[0].used_memory_bytes, 4096 * kMiB);
  EXPECT_FALSE((*d1.processes)[0].sm_util.has_value());  // CU occupancy unknown
}

TEST(GpuRocm, BothVendorsNvidiaFirst) {
  FakeRocm fake("amd_two_gpus.json", SONDE_FAKE_NVML);
  setenv("SONDE_FAKE_NVML_SCENARIO",
         (std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_lost_gpu.json").c_str(), 1);
  Gpus gpus = open_gpus();
  ASSERT_EQ(gpus.backends.size(), 2u);
  GpuSnapshot s = query_all(gpus, false);
  ASSERT_EQ(s.devices.size(), 5u);
  EXPECT_EQ(s.devices[0].vendor, "nvidia");
  EXPECT_EQ(s.devices[3].vendor, "amd");
  EXPECT_EQ(s.devices[3].index, 0);
  EXPECT_EQ(s.nvidia_driver, "535.104.05");
  EXPECT_EQ(s.amd_driver, "6.7.0");
}

TEST(GpuRocm, LostGpuKeepsTheOther) {
  FakeRocm fake("amd_lost_gpu.json");
  Gpus gpus = open_gpus();
  GpuSnapshot s = query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 2u);
  ASSERT_TRUE(s.devices[0].error.has_value());
  EXPECT_FALSE(s.devices[0].util_gpu.has_value());
  EXPECT_FALSE(s.devices[1].error.has_value());
  EXPECT_EQ(s.devices[1].util_gpu, 55.0);
  ASSERT_TRUE(s.devices[1].processes.has_value());
  ASSERT_EQ(s.devices[1].processes->size(), 1u);
  EXPECT_EQ((*s.devices[1].processes)[0].pid, static_cast<int>(getpid()));
  EXPECT_EQ((*s.devices[1].processes)[0].sm_util, 55.0);
}

TEST(GpuRocm, InitialisationFailure) {
  FakeRocm fake("nvidia_init_failure.json");
  Gpus gpus = open_gpus();
  EXPECT_FALSE(gpus.rocm_loaded);
  EXPECT_TRUE(gpus.backends.empty());
  ASSERT_EQ(gpus.notes.size(), 2u);
  EXPECT_NE(gpus.notes[1].find("ROCm SMI: initialisation failed"), std::string::npos)
      << gpus.notes[1];
}

TEST(GpuRocm, NoDevices) {
  FakeRocm fake("nvidia_no_devices.json");
  Gpus gpus = open_gpus();
  EXPECT_TRUE(gpus.rocm_loaded);
  EXPECT_TRUE(gpus.backends.empty());
  EXPECT_TRUE(query_all(gpus, true).devices.empty());
}

}  // namespace
}  // namespace sonde::gpu
