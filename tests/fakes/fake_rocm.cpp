// A fake librocm_smi64.so driven by a scenario file (README.md).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "fake_scenario.hpp"
#include "gpu/rocm_types.hpp"

#define FAKE_EXPORT __attribute__((visibility("default")))

namespace {

using fake::json;
constexpr uint64_t kMiB = 1024ULL * 1024ULL;

struct State {
  bool initialised = false;
  int refs = 0;         // rsmi_init calls not yet matched by rsmi_shut_down (ROCm SMI counts them)
  double loaded_s = 0;  // when the scenario was read (energy_rate_mw)
  json scenario;
  fake::Pids pids;
};
// Never destroyed (fake::immortal): a static State destroyed by the exit handlers under a call
// from an abandoned worker was a use-after-free in the fake (ASan,
// Signals/SignalOnGpuNode.StreamEndsWithStatus0/TERM, once in a fresh-clone run).
State& state() {
  static State& s = fake::immortal(new State);
  return s;
}

rsmi_status_t code_of(const json& v) {
  if (v.is_number_integer()) return static_cast<rsmi_status_t>(v.get<unsigned>());
  const std::string n = v.get<std::string>();
  if (n == "NOT_SUPPORTED") return RSMI_STATUS_NOT_SUPPORTED;
  if (n == "FILE_ERROR" || n == "GPU_IS_LOST") return RSMI_STATUS_FILE_ERROR;
  if (n == "PERMISSION") return RSMI_STATUS_PERMISSION;
  if (n == "INIT_ERROR" || n == "DRIVER_NOT_LOADED") return RSMI_STATUS_INIT_ERROR;
  return RSMI_STATUS_UNKNOWN_ERROR;
}

rsmi_status_t device(uint32_t dv, const json*& dev) {
  State& s = state();
  if (!s.initialised) return RSMI_STATUS_INIT_ERROR;
  if (dv >= s.scenario["devices"].size()) return RSMI_STATUS_INVALID_ARGS;
  dev = &s.scenario["devices"][dv];
  if (dev->contains("error")) return code_of((*dev)["error"]);
  return RSMI_STATUS_SUCCESS;
}

template <typename T>
rsmi_status_t number(uint32_t dv, const char* feature, const char* key, T* out, double scale = 1) {
  const json* dev = nullptr;
  if (rsmi_status_t r = device(dv, dev); r != RSMI_STATUS_SUCCESS) return r;
  if (out == nullptr) return RSMI_STATUS_INVALID_ARGS;
  if (fake::unsupported(*dev, feature) || !dev->contains(key)) return RSMI_STATUS_NOT_SUPPORTED;
  *out = static_cast<T>((*dev)[key].get<double>() * scale);
  return RSMI_STATUS_SUCCESS;
}

struct Proc {
  uint32_t pid;
  uint64_t vram;
  uint32_t cu;
};
// Processes of device `dv` with pids resolved now.
std::vector<Proc> procs_of(const json& dev) {
  std::vector<Proc> out;
  if (fake::unsupported(dev, "processes") || dev.contains("error")) return out;
  for (const auto& p : dev.value("compute_processes", json::array())) {
    int pid = state().pids.resolve(p.value("pid", json(0)));
    if (pid <= 0) continue;
    out.push_back({static_cast<uint32_t>(pid), p.value("used_memory_mib", 0ULL) * kMiB,
                   p.value("cu_occupancy", sonde::gpu::rocm::kCuOccupancyInvalid)});
  }
  return out;
}

}  // namespace

extern "C" {

FAKE_EXPORT rsmi_status_t rsmi_init(uint64_t) {
  State& s = state();
  if (s.initialised) {  // as ROCm SMI: a nested init only counts; the scenario stays
    ++s.refs;
    return RSMI_STATUS_SUCCESS;
  }
  json scenario;
  std::string error;
  if (!fake::load_scenario("SONDE_FAKE_ROCM_SCENARIO", scenario, error)) {
    std::fprintf(stderr, "fake ROCm SMI: %s\n", error.c_str());
    return RSMI_STATUS_INIT_ERROR;
  }
  if (scenario.contains("init_error")) return code_of(scenario["init_error"]);
  s = State{};
  s.scenario = std::move(scenario);
  if (!s.scenario.contains("devices")) s.scenario["devices"] = json::array();
  s.initialised = true;
  s.refs = 1;
  s.loaded_s = fake::monotonic_s();
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_shut_down() {
  State& s = state();
  if (s.refs > 0) --s.refs;
  s.initialised = s.refs > 0;
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_num_monitor_devices(uint32_t* n) {
  if (!state().initialised) return RSMI_STATUS_INIT_ERROR;
  *n = static_cast<uint32_t>(state().scenario["devices"].size());
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_version_str_get(int component, char* buf, uint32_t len) {
  if (!state().initialised) return RSMI_STATUS_INIT_ERROR;
  if (component != RSMI_SW_COMP_DRIVER) return RSMI_STATUS_INVALID_ARGS;
  const std::string v = state().scenario.value("driver_version", "6.7.0");
  if (v.size() + 1 > len) return RSMI_STATUS_INSUFFICIENT_SIZE;
  std::memcpy(buf, v.c_str(), v.size() + 1);
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_dev_name_get(uint32_t dv, char* buf, size_t len) {
  const json* dev = nullptr;
  if (rsmi_status_t r = device(dv, dev); r != RSMI_STATUS_SUCCESS) return r;
  const std::string v = dev->value("name", "AMD Fake GPU");
  if (v.size() + 1 > len) return RSMI_STATUS_INSUFFICIENT_SIZE;
  std::memcpy(buf, v.c_str(), v.size() + 1);
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv, uint64_t* id) {
  return number(dv, "uuid", "unique_id", id);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv, uint64_t* bdf) {
  return number(dv, "pci", "pci_bdfid", bdf);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv, uint32_t* p) {
  return number(dv, "utilization", "util_gpu", p);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_memory_busy_percent_get(uint32_t dv, uint32_t* p) {
  return number(dv, "memory_busy", "util_mem", p);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv, int type, uint64_t* v) {
  if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
  return number(dv, "memory", "memory_used_mib", v, static_cast<double>(kMiB));
}
FAKE_EXPORT rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv, int type, uint64_t* v) {
  if (type != RSMI_MEM_TYPE_VRAM) return RSMI_STATUS_NOT_SUPPORTED;
  return number(dv, "memory", "memory_total_mib", v, static_cast<double>(kMiB));
}
// "temperature_sensor": "junction" makes the edge sensor unsupported (MI200 and later).
FAKE_EXPORT rsmi_status_t rsmi_dev_temp_metric_get(uint32_t dv, uint32_t sensor, int metric,
                                                   int64_t* t) {
  const json* dev = nullptr;
  if (rsmi_status_t r = device(dv, dev); r != RSMI_STATUS_SUCCESS) return r;
  if (metric != RSMI_TEMP_CURRENT) return RSMI_STATUS_NOT_SUPPORTED;
  const bool junction = dev->value("temperature_sensor", "edge") == "junction";
  if ((sensor == RSMI_TEMP_TYPE_EDGE) == junction) return RSMI_STATUS_NOT_SUPPORTED;
  return number(dv, "temperature", "temperature", t, 1000.0);  // millidegrees
}
FAKE_EXPORT rsmi_status_t rsmi_dev_fan_speed_get(uint32_t dv, uint32_t, int64_t* v) {
  return number(dv, "fan", "fan", v, 255.0 / 100.0);  // scenario in percent, RSMI in 0..255
}
FAKE_EXPORT rsmi_status_t rsmi_dev_fan_speed_max_get(uint32_t dv, uint32_t, uint64_t* v) {
  const json* dev = nullptr;
  if (rsmi_status_t r = device(dv, dev); r != RSMI_STATUS_SUCCESS) return r;
  *v = 255;
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_dev_power_ave_get(uint32_t dv, uint32_t, uint64_t* uw) {
  return number(dv, "power", "power_mw", uw, 1000.0);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_power_cap_get(uint32_t dv, uint32_t, uint64_t* uw) {
  return number(dv, "power", "power_limit_mw", uw, 1000.0);
}
FAKE_EXPORT rsmi_status_t rsmi_dev_energy_count_get(uint32_t dv, uint64_t* counter, float* res,
                                                    uint64_t* stamp) {
  if (res != nullptr) *res = 15.3f;  // microjoules per count
  if (stamp != nullptr) *stamp = 0;
  rsmi_status_t r = number(dv, "energy", "energy_mj", counter, 1000.0 / 15.3);
  if (r != RSMI_STATUS_SUCCESS) return r;
  const json& dev = state().scenario["devices"][dv];
  *counter = static_cast<uint64_t>(fake::energy_mj(dev, state().loaded_s, fake::monotonic_s()) *
                                   1000.0 / 15.3);
  return r;
}
FAKE_EXPORT rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t* procs, uint32_t* n) {
  State& s = state();
  if (!s.initialised) return RSMI_STATUS_INIT_ERROR;
  std::vector<uint32_t> pids;
  for (const auto& dev : s.scenario["devices"])
    for (const Proc& p : procs_of(dev))
      if (std::find(pids.begin(), pids.end(), p.pid) == pids.end()) pids.push_back(p.pid);
  if (procs == nullptr) {
    *n = static_cast<uint32_t>(pids.size());
    return RSMI_STATUS_SUCCESS;
  }
  const uint32_t fill = std::min<uint32_t>(*n, static_cast<uint32_t>(pids.size()));
  for (uint32_t i = 0; i < fill; ++i) {
    procs[i] = rsmi_process_info_t{};
    procs[i].process_id = pids[i];
    procs[i].pasid = 0x8000 + i;
  }
  const bool fits = fill == pids.size();
  *n = fits ? fill : static_cast<uint32_t>(pids.size());
  return fits ? RSMI_STATUS_SUCCESS : RSMI_STATUS_INSUFFICIENT_SIZE;
}
FAKE_EXPORT rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t* devices,
                                                        uint32_t* n) {
  State& s = state();
  if (!s.initialised) return RSMI_STATUS_INIT_ERROR;
  std::vector<uint32_t> found;
  const auto& devs = s.scenario["devices"];
  for (uint32_t i = 0; i < devs.size(); ++i)
    for (const Proc& p : procs_of(devs[i]))
      if (p.pid == pid) found.push_back(i);
  if (found.empty()) return RSMI_STATUS_NOT_FOUND;
  const uint32_t fill = std::min<uint32_t>(*n, static_cast<uint32_t>(found.size()));
  if (devices != nullptr) std::copy(found.begin(), found.begin() + fill, devices);
  *n = static_cast<uint32_t>(found.size());
  return RSMI_STATUS_SUCCESS;
}
FAKE_EXPORT rsmi_status_t rsmi_compute_process_info_by_pid_get(uint32_t pid,
                                                               rsmi_process_info_t* out) {
  State& s = state();
  if (!s.initialised) return RSMI_STATUS_INIT_ERROR;
  bool found = false;
  *out = rsmi_process_info_t{};
  out->process_id = pid;
  out->cu_occupancy = sonde::gpu::rocm::kCuOccupancyInvalid;
  for (const auto& dev : s.scenario["devices"])
    for (const Proc& p : procs_of(dev))
      if (p.pid == pid) {
        found = true;
        out->vram_usage += p.vram;
        out->cu_occupancy = p.cu;
      }
  return found ? RSMI_STATUS_SUCCESS : RSMI_STATUS_NOT_FOUND;
}
#ifndef SONDE_FAKE_NO_BY_DEVICE
FAKE_EXPORT rsmi_status_t rsmi_compute_process_info_by_device_get(uint32_t pid, uint32_t dv,
                                                                  rsmi_process_info_t* out) {
  const json* dev = nullptr;
  if (rsmi_status_t r = device(dv, dev); r != RSMI_STATUS_SUCCESS) return r;
  if (fake::unsupported(*dev, "process_by_device")) return RSMI_STATUS_NOT_SUPPORTED;
  for (const Proc& p : procs_of(*dev))
    if (p.pid == pid) {
      *out = rsmi_process_info_t{};
      out->process_id = pid;
      out->vram_usage = p.vram;
      out->cu_occupancy = p.cu;
      return RSMI_STATUS_SUCCESS;
    }
  return RSMI_STATUS_NOT_FOUND;
}
#endif

}  // extern "C"
