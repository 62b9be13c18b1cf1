// MIG: the NVML backend against the fake's MIG scenarios (tests/fakes/scenarios/nvidia_mig*.json),
// and the renderings of MIG devices (status text and JSON, gpustat's JSON, top's header line,
// the exporter's series) on hand-made data. Every figure is the scenario's.
#include <unistd.h>

#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "cli/serve_gpus.hpp"
#include "gpu/gpu.hpp"
#include "support/built_paths.hpp"
#include "support/fake_gpu_env.hpp"
#include "views/status.hpp"
#include "views/status_hooks.hpp"
#include "views/top_render.hpp"

namespace sonde {
namespace {

constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

class FakeGpu : public test::FakeGpuEnv {
 public:
  FakeGpu(const char* library, const std::string& scenario)
      : FakeGpuEnv(library, "/nonexistent/x.so", scenario, "") {}
};

TEST(GpuMig, BackendReadsTheMigDevicesOfAGpuInMigMode) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_mig.json");
  gpu::Gpus gpus = gpu::open_gpus();
  const gpu::GpuSnapshot s = gpu::query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 2u);
  const gpu::GpuDevice& d0 = s.devices[0];
  ASSERT_FALSE(d0.error) << *d0.error;
  EXPECT_EQ(d0.mig_mode, true);
  EXPECT_FALSE(d0.util_gpu.has_value());  // not supported in MIG mode: unknown, never 0
  EXPECT_EQ(d0.mem_used_bytes, 8231 * kMiB);
  ASSERT_EQ(d0.mig.size(), 3u);
  const struct {
    const char* profile;
    unsigned gi;
    std::uint64_t used_mib, total_mib;
    std::size_t procs;
  } want[] = {
      {"3g.20gb", 1, 8205, 19968, 1}, {"2g.10gb", 5, 13, 9856, 0}, {"1g.5gb", 13, 13, 4864, 0}};
  for (std::size_t i = 0; i < 3; ++i) {
    const gpu::MigDevice& m = d0.mig[i];
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.index, static_cast<int>(i));
    EXPECT_EQ(m.name, std::string("NVIDIA A100-SXM4-40GB MIG ") + want[i].profile);
    EXPECT_EQ(m.profile, want[i].profile);
    EXPECT_EQ(m.uuid, "MIG-a100m000-0000-0000-0000-00000000000" + std::to_string(i + 1));
    EXPECT_EQ(m.gpu_instance_id, want[i].gi);
    EXPECT_EQ(m.compute_instance_id, 0u);
    EXPECT_EQ(m.mem_used_bytes, want[i].used_mib * kMiB);
    EXPECT_EQ(m.mem_total_bytes, want[i].total_mib * kMiB);
    EXPECT_FALSE(m.util_gpu.has_value());
    EXPECT_FALSE(m.error.has_value());
    ASSERT_TRUE(m.processes.has_value());
    EXPECT_EQ(m.processes->size(), want[i].procs);
  }
  const gpu::GpuProcess& p = d0.mig[0].processes->at(0);
  EXPECT_EQ(p.pid, static_cast<int>(::getpid()));
  EXPECT_EQ(p.used_memory_bytes, 8192 * kMiB);
  EXPECT_EQ(p.mig_index, 0);
  EXPECT_FALSE(p.sm_util.has_value());
  // The GPU's own list: the same process, tagged with its MIG device.
  ASSERT_TRUE(d0.processes.has_value());
  ASSERT_EQ(d0.processes->size(), 1u);
  EXPECT_EQ(d0.processes->at(0).pid, static_cast<int>(::getpid()));
  EXPECT_EQ(d0.processes->at(0).mig_index, 0);
  // MIG mode off: no MIG device, its utilisation as usual.
  const gpu::GpuDevice& d1 = s.devices[1];
  EXPECT_EQ(d1.mig_mode, false);
  EXPECT_TRUE(d1.mig.empty());
  EXPECT_EQ(d1.util_gpu, 25.0);
}

TEST(GpuMig, WithoutProcessListsTheMigDevicesHaveNone) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_mig.json");
  gpu::Gpus gpus = gpu::open_gpus();
  const gpu::GpuSnapshot s = gpu::query_all(gpus, false);
  ASSERT_EQ(s.devices.at(0).mig.size(), 3u);
  for (const auto& m : s.devices[0].mig) EXPECT_FALSE(m.processes.has_value());
  EXPECT_EQ(s.devices[0].mig[2].mem_total_bytes, 4864 * kMiB);
}

TEST(GpuMig, LostGpuInMigModeKeepsTheOther) {
  FakeGpu fake(SONDE_FAKE_NVML, "nvidia_mig_lost.json");
  gpu::Gpus gpus = gpu::open_gpus();
  const gpu::GpuSnapshot s = gpu::query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_EQ(s.devices[0].error, "GPU is lost");
  EXPECT_TRUE(s.devices[0].mig.empty());
  const gpu::GpuDevice& d1 = s.devices[1];
  ASSERT_FALSE(d1.error);
  ASSERT_EQ(d1.mig.size(), 2u);
  EXPECT_EQ(d1.mig[0].profile, "4g.20gb");
  EXPECT_EQ(d1.mig[0].gpu_instance_id, 2u);
  ASSERT_TRUE(d1.mig[0].processes.has_value());
  ASSERT_EQ(d1.mig[0].processes->size(), 1u);
  EXPECT_EQ(d1.mig[0].processes->at(0).used_memory_bytes, 2048 * kMiB);
  EXPECT_EQ(d1.mig[1].profile, "3g.20gb");
  EXPECT_TRUE(d1.mig[1].processes->empty());
  // The exporter's series leave the lost GPU out.
  const auto series = cli::mig_series(s);
  ASSERT_EQ(series.size(), 2u);
  EXPECT_EQ(series[0].gpu, 1);
  EXPECT_EQ(series[0].gpu_instance_id, 2);
  EXPECT_EQ(series[0].processes, 1.0);
}

TEST(GpuMig, DriverWithoutMigCallsStillWorks) {
  // The no-v3 fake is an older driver: no _v3 process calls and no MIG calls.
  FakeGpu fake(SONDE_FAKE_NVML_NO_V3, "nvidia_mig.json");
  gpu::Gpus gpus = gpu::open_gpus();
  const gpu::GpuSnapshot s = gpu::query_all(gpus, true);
  ASSERT_EQ(s.devices.size(), 2u);
  for (const auto& d : s.devices) {
    EXPECT_FALSE(d.error);
    EXPECT_FALSE(d.mig_mode.has_value());
    EXPECT_TRUE(d.mig.empty());
  }
  EXPECT_EQ(s.devices[0].mem_total_bytes, 40960 * kMiB);
}

TEST(GpuMig, ProfileFromTheName) {
  EXPECT_EQ(gpu::mig_profile("NVIDIA A100-SXM4-40GB MIG 3g.20gb"), "3g.20gb");
  EXPECT_EQ(gpu::mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"), "1g.10gb+me");
  EXPECT_EQ(gpu::mig_profile("NVIDIA A100-SXM4-40GB"), "");
}

// ---- renderings on hand-made data ----

status::StatusData mig_data() {
  status::StatusData d;
  d.hostname = "node01";
  d.query_time = std::chrono::system_clock::from_time_t(1'700'000'000);
  d.nvidia_driver = "535.104.05";
  status::GpuRow g;
  g.device.index = 0;
  g.device.vendor = "nvidia";
  g.device.name = "NVIDIA A100-SXM4-40GB";
  g.device.uuid = "GPU-0";
  g.device.mem_used_bytes = 8231 * kMiB;
  g.device.mem_total_bytes = 40960 * kMiB;
  g.device.mig_mode = true;
  status::ProcessRow p;
  p.pid = 4242;
  p.user = "alice";
  p.command = "train";
  p.full_command = {"train"};
  p.gpu_memory_bytes = 8192 * kMiB;
  g.processes = std::vector<status::ProcessRow>{p};
  status::MigRow a;
  a.device.index = 0;
  a.device.name = "NVIDIA A100-SXM4-40GB MIG 3g.20gb";
  a.device.profile = "3g.20gb";
  a.device.uuid = "MIG-1";
  a.device.gpu_instance_id = 1;
  a.device.compute_instance_id = 0;
  a.device.mem_used_bytes = 8205 * kMiB;
  a.device.mem_total_bytes = 19968 * kMiB;
  a.processes = std::vector<status::ProcessRow>{p};
  status::MigRow b;
  b.device.index = 1;
  b.device.name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb";
  b.device.profile = "1g.5gb";
  b.device.uuid = "MIG-2";
  b.device.gpu_instance_id = 13;
  b.device.compute_instance_id = 0;
  b.device.mem_used_bytes = 13 * kMiB;
  b.device.mem_total_bytes = 4864 * kMiB;
  b.processes.emplace();
  g.mig = {a, b};
  d.gpus = {g};
  return d;
}

TEST(GpuMig, StatusTextShowsEachMigDeviceWithItsProcesses) {
  status::StatusSettings settings;
  status::StatusHooks hooks({}, settings);
  const std::string t = status::status_text(mig_data(), hooks, false);
  EXPECT_NE(t.find("| MIG on, 2 devices"), std::string::npos) << t;
  // The GPU in MIG mode has no utilisation either: n/a, as the JSON's null (not "??").
  EXPECT_NE(t.find(" |  ??°C,   n/a util,   n/a mem bw |   8.0 GiB /  40.0 GiB"), std::string::npos)
      << t;
  EXPECT_EQ(t.find("?? % util"), std::string::npos) << t;
  EXPECT_NE(t.find("├─ MIG 3g.20gb  GI  1 CI  0 | n/a util |   8.0 GiB /  19.5 GiB | 1 process"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("│  └─ alice         4242   8.0 GiB gpu mem"), std::string::npos) << t;
  EXPECT_NE(t.find("└─ MIG 1g.5gb   GI 13 CI  0 | n/a util |    13 MiB /   4.8 GiB | no processes"),
            std::string::npos)
      << t;
  // The process is shown once: under its MIG device, not again under the GPU.
  EXPECT_EQ(t.find("4242"), t.rfind("4242")) << t;
  EXPECT_EQ(t.find(" 0 %"), std::string::npos) << t;  // no utilisation made up
}

TEST(GpuMig, StatusAndGpustatJson) {
  const auto d = mig_data();
  const auto s = status::status_json(d);
  const auto& g = s["gpus"][0];
  EXPECT_EQ(g["mig_mode"], true);
  ASSERT_EQ(g["mig_devices"].size(), 2u);
  const auto& m = g["mig_devices"][0];
  EXPECT_EQ(m["profile"], "3g.20gb");
  EXPECT_EQ(m["gpu_instance_id"], 1);
  EXPECT_EQ(m["compute_instance_id"], 0);
  EXPECT_TRUE(m["util_gpu_percent"].is_null());
  EXPECT_EQ(m["mem_used_bytes"], 8205 * kMiB);
  EXPECT_EQ(m["mem_total_bytes"], 19968 * kMiB);
  ASSERT_EQ(m["processes"].size(), 1u);
  EXPECT_EQ(m["processes"][0]["pid"], 4242);
  EXPECT_EQ(m["processes"][0]["gpu_memory_bytes"], 8192 * kMiB);

  const auto j = status::gpustat_json(d, {});
  const auto& gm = j["gpus"][0]["mig_devices"];
  ASSERT_EQ(gm.size(), 2u);
  EXPECT_EQ(gm[1]["gpu_instance_id"], 13);
  EXPECT_TRUE(gm[1]["utilization.gpu"].is_null());
  EXPECT_EQ(gm[1]["memory.used"], 13);
  EXPECT_EQ(gm[1]["memory.total"], 4864);
  EXPECT_EQ(gm[0]["processes"][0]["gpu_memory_usage"], 8192);
  // A GPU outside MIG mode keeps gpustat's keys exactly.
  auto plain = d;
  plain.gpus[0].device.mig_mode = false;
  plain.gpus[0].mig.clear();
  EXPECT_FALSE(status::gpustat_json(plain, {})["gpus"][0].contains("mig_devices"));
}

TEST(GpuMig, TopHeaderLineOfAMigDevice) {
  const auto d = mig_data();
  const std::string l = top::mig_line(d.gpus[0].mig[0]);
  EXPECT_NE(l.find("MIG 3g.20gb  GI  1 CI  0"), std::string::npos) << l;
  EXPECT_NE(l.find("n/a]"), std::string::npos) << l;
  EXPECT_NE(l.find("8.0G/20G]"), std::string::npos) << l;
  EXPECT_NE(l.find("1 proc (pid 4242)"), std::string::npos) << l;
  const std::string e = top::mig_line(d.gpus[0].mig[1]);
  EXPECT_NE(e.find("13M/4.8G]"), std::string::npos) << e;
  EXPECT_NE(e.find("0 proc"), std::string::npos) << e;
}

}  // namespace
}  // namespace sonde
