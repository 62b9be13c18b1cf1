// A fake libnvidia-ml.so.1 driven by a scenario file (README.md). Built twice: with every entry
// point, and with -DSONDE_FAKE_NO_V3 without the _v3 process calls and the MIG calls (an older
// driver).
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "fake_scenario.hpp"
#include "gpu/nvml_types.hpp"

struct nvmlDevice_st {
  unsigned index;  ///< the GPU: its entry in "devices"
  int mig = -1;    ///< a MIG device: its entry in the GPU's "mig_devices"; -1 for the GPU
};

namespace {

using fake::json;

struct State {
  bool initialised = false;
  int refs = 0;         // nvmlInit calls not yet matched by nvmlShutdown (NVML counts them)
  double loaded_s = 0;  // when the scenario was read (energy_rate_mw)
  json scenario;
  std::vector<nvmlDevice_st> handles;
  std::vector<std::vector<nvmlDevice_st>> mig_handles;  // per GPU: its MIG devices' handles
  fake::Pids pids;
  std::vector<int> size_failures;             // per device: insufficient-size answers this round
  std::vector<unsigned long long> util_call;  // per device: process-utilisation call count
};
// Never destroyed (fake::immortal): a static State destroyed by the exit handlers under a call
// from an abandoned worker was a use-after-free in the fake (ASan,
// Signals/SignalOnGpuNode.StreamEndsWithStatus0/TERM, once in a fresh-clone run).
State& state() {
  static State& s = fake::immortal(new State);
  return s;
}
// Guards the per-device counters (size_failures, util_call): NVML is thread-safe, and sonde's GPU
// and energy collectors call in from different watchdog workers (a data race under TSan,
// python_monitor). Never held while a call hangs.
std::mutex& counters_mutex() {
  static std::mutex& mu = fake::immortal(new std::mutex);
  return mu;
}

nvmlReturn_t code_of(const json& v) {
  if (v.is_number_integer()) return static_cast<nvmlReturn_t>(v.get<int>());
  static const auto& names = fake::immortal(
      new std::map<std::string, nvmlReturn_t>{{"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
                                              {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
                                              {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
                                              {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
                                              {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
                                              {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
                                              {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
                                              {"UNKNOWN", NVML_ERROR_UNKNOWN}});
  auto it = names.find(v.get<std::string>());
  return it == names.end() ? NVML_ERROR_UNKNOWN : it->second;
}

// The scenario's device behind a handle (a MIG device's own object for a MIG handle), or the
// error the call must return. A lost GPU's MIG devices fail as it does.
nvmlReturn_t device(nvmlDevice_t h, const json*& dev) {
  State& s = state();
  if (!s.initialised) return NVML_ERROR_UNINITIALIZED;
  if (h == nullptr || h->index >= s.handles.size()) return NVML_ERROR_INVALID_ARGUMENT;
  dev = &s.scenario["devices"][h->index];
  if (dev->contains("error")) return code_of((*dev)["error"]);
  if (h->mig >= 0) {
    dev = &(*dev)["mig_devices"][static_cast<std::size_t>(h->mig)];
    if (dev->contains("error")) return code_of((*dev)["error"]);
  }
  return NVML_SUCCESS;
}

template <typename T>
nvmlReturn_t number(nvmlDevice_t h, const char* feature, const char* key, T* out) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake::unsupported(*dev, feature) || !dev->contains(key)) return NVML_ERROR_NOT_SUPPORTED;
  *out = (*dev)[key].get<T>();
  return NVML_SUCCESS;
}

nvmlReturn_t text(const std::string& value, char* buf, unsigned len) {
  if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (value.size() + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(buf, value.c_str(), value.size() + 1);
  return NVML_SUCCESS;
}

constexpr unsigned long long kMiB = 1024ULL * 1024ULL;

// Compute (key "compute_processes") or graphics processes with their pids resolved now. A GPU
// in MIG mode without its own list lists its MIG devices' processes, with their instance ids.
std::vector<nvmlProcessInfo_t> processes(const json& dev, const char* key) {
  std::vector<nvmlProcessInfo_t> out;
  auto add = [&](const json& list, unsigned gi, unsigned ci) {
    for (const auto& p : list) {
      int pid = state().pids.resolve(p.value("pid", json(0)));
      if (pid <= 0) continue;
      nvmlProcessInfo_t info{};
      info.pid = static_cast<unsigned>(pid);
      info.usedGpuMemory = p.contains("used_memory_mib")
                               ? p["used_memory_mib"].get<unsigned long long>() * kMiB
                               : sonde::gpu::nvml::kValueNotAvailable;
      info.gpuInstanceId = gi;
      info.computeInstanceId = ci;
      out.push_back(info);
    }
  };
  constexpr unsigned kNone = 0xFFFFFFFFu;  // what NVML puts there outside MIG
  auto it = dev.find(key);
  if (it != dev.end()) {
    add(*it, dev.value("gpu_instance_id", kNone), dev.value("compute_instance_id", kNone));
  } else if (dev.value("mig_mode", false) && dev.contains("mig_devices")) {
    for (const auto& m : dev["mig_devices"])
      if (auto ml = m.find(key); ml != m.end())
        add(*ml, m.value("gpu_instance_id", kNone), m.value("compute_instance_id", kNone));
  }
  return out;
}

// SONDE_FAKE_GPU_HANG_FILE: while that file exists, the process lists do not return (a driver
// stuck in a call), looked at every 20 ms.
// While a call hangs, the library's destructors (run by exit() or dlclose) write
// "<hang file>.torn-down" and abort: a real driver torn down under a live call may crash, and a
// process that ran its exit handlers there would end in that crash after a complete run.
std::atomic<int> g_hanging{0};

void hang_while_the_file_exists() {
  const char* f = std::getenv("SONDE_FAKE_GPU_HANG_FILE");
  if (f == nullptr || *f == '\0') return;
  g_hanging.fetch_add(1);
  while (::access(f, F_OK) == 0) ::usleep(20000);
  g_hanging.fetch_sub(1);
}

__attribute__((destructor)) void torn_down_under_a_call() {
  if (g_hanging.load() == 0) return;
  const char* f = std::getenv("SONDE_FAKE_GPU_HANG_FILE");
  if (f != nullptr) std::ofstream(std::string(f) + ".torn-down") << "torn down under a call\n";
  std::abort();
}

// The process calls, sized and filled the NVML way. "insufficient_size_rounds": N makes the
// first N filling calls after a sizing call fail as if processes had started meanwhile.
template <typename Info>
nvmlReturn_t list_processes(nvmlDevice_t h, const char* key, unsigned* count, Info* infos) {
  hang_while_the_file_exists();
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake::unsupported(*dev, "processes")) return NVML_ERROR_NOT_SUPPORTED;
  const auto procs = processes(*dev, key);
  std::lock_guard<std::mutex> lock(counters_mutex());
  int& failures = state().size_failures[h->index];
  if (infos == nullptr) failures = 0;
  const int rounds = dev->value("insufficient_size_rounds", 0);
  if (infos != nullptr && failures < rounds) {
    ++failures;
    *count = std::max<unsigned>(*count + 1, static_cast<unsigned>(procs.size()));
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  if (infos == nullptr || *count < procs.size()) {
    const bool empty = procs.empty();
    *count = static_cast<unsigned>(procs.size());
    return empty ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (std::size_t i = 0; i < procs.size(); ++i) {
    Info info{};
    info.pid = procs[i].pid;
    info.usedGpuMemory = procs[i].usedGpuMemory;
    if constexpr (sizeof(Info) == sizeof(nvmlProcessInfo_t)) {
      info.gpuInstanceId = procs[i].gpuInstanceId;
      info.computeInstanceId = procs[i].computeInstanceId;
    }
    infos[i] = info;
  }
  *count = static_cast<unsigned>(procs.size());
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() {
  State& s = state();
  if (s.initialised) {  // as NVML: a nested init only counts; the scenario stays
    ++s.refs;
    return NVML_SUCCESS;
  }
  json scenario;
  std::string error;
  if (!fake::load_scenario("SONDE_FAKE_NVML_SCENARIO", scenario, error)) {
    std::fprintf(stderr, "fake NVML: %s\n", error.c_str());
    return NVML_ERROR_UNKNOWN;
  }
  if (scenario.contains("init_error")) return code_of(scenario["init_error"]);
  s = State{};
  s.scenario = std::move(scenario);
  if (!s.scenario.contains("devices")) s.scenario["devices"] = json::array();
  const std::size_t n = s.scenario["devices"].size();
  for (std::size_t i = 0; i < n; ++i) {
    s.handles.push_back(nvmlDevice_st{static_cast<unsigned>(i), -1});
    s.mig_handles.emplace_back();
    const json& dev = s.scenario["devices"][i];
    if (dev.contains("mig_devices"))
      for (std::size_t k = 0; k < dev["mig_devices"].size(); ++k)
        s.mig_handles.back().push_back(
            nvmlDevice_st{static_cast<unsigned>(i), static_cast<int>(k)});
  }
  s.size_failures.assign(n, 0);
  s.util_call.assign(n, 0);
  s.initialised = true;
  s.refs = 1;
  s.loaded_s = fake::monotonic_s();
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlInit() {
  return nvmlInit_v2();
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  State& s = state();
  if (s.refs > 0) --s.refs;
  s.initialised = s.refs > 0;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* buf,
                                                                               unsigned len) {
  if (!state().initialised) return NVML_ERROR_UNINITIALIZED;
  return text(state().scenario.value("driver_version", "550.54.15"), buf, len);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
  if (!state().initialised) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned>(state().handles.size());
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index,
                                                                                  nvmlDevice_t* h) {
  State& s = state();
  if (!s.initialised) return NVML_ERROR_UNINITIALIZED;
  if (index >= s.handles.size() || h == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  const json& dev = s.scenario["devices"][index];
  if (dev.value("handle_error", false) && dev.contains("error")) return code_of(dev["error"]);
  *h = &s.handles[index];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char* buf,
                                                                      unsigned len) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  return text(dev->value("name", "Fake GPU"), buf, len);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char* buf,
                                                                      unsigned len) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (fake::unsupported(*dev, "uuid")) return NVML_ERROR_NOT_SUPPORTED;
  return text(
      dev->value("uuid", "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(h->index)), buf,
      len);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h,
                                                                            nvmlPciInfo_t* pci) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (fake::unsupported(*dev, "pci") || !dev->contains("pci_bus_id"))
    return NVML_ERROR_NOT_SUPPORTED;
  *pci = nvmlPciInfo_t{};
  const std::string id = (*dev)["pci_bus_id"].get<std::string>();
  std::snprintf(pci->busId, sizeof pci->busId, "%s", id.c_str());
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", id.c_str());
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h,
                                                                             int sensor,
                                                                             unsigned* t) {
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return number(h, "temperature", "temperature", t);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t h,
                                                                          unsigned* f) {
  return number(h, "fan", "fan", f);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(
    nvmlDevice_t h, nvmlUtilization_t* u) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (fake::unsupported(*dev, "utilization") || !dev->contains("util_gpu"))
    return NVML_ERROR_NOT_SUPPORTED;
  u->gpu = (*dev)["util_gpu"].get<unsigned>();
  u->memory = dev->value("util_mem", 0u);
  return NVML_SUCCESS;
}
// v2 reports `used` without the driver's reserved memory; v1 folds it into `used`.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h,
                                                                               nvmlMemory_v2_t* m) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (m == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (m->version != sonde::gpu::nvml::kMemoryV2Version) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (fake::unsupported(*dev, "memory") || fake::unsupported(*dev, "memory_v2") ||
      !dev->contains("memory_total_mib"))
    return NVML_ERROR_NOT_SUPPORTED;
  m->total = (*dev)["memory_total_mib"].get<unsigned long long>() * kMiB;
  m->reserved = dev->value("memory_reserved_mib", 0ULL) * kMiB;
  m->used = dev->value("memory_used_mib", 0ULL) * kMiB;
  m->free = m->total - m->reserved - m->used;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h,
                                                                            nvmlMemory_t* m) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (fake::unsupported(*dev, "memory") || !dev->contains("memory_total_mib"))
    return NVML_ERROR_NOT_SUPPORTED;
  m->total = (*dev)["memory_total_mib"].get<unsigned long long>() * kMiB;
  m->used = (dev->value("memory_used_mib", 0ULL) + dev->value("memory_reserved_mib", 0ULL)) * kMiB;
  m->free = m->total - m->used;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h,
                                                                            unsigned* mw) {
  return number(h, "power", "power_mw", mw);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t h,
                                                                                    unsigned* mw) {
  return number(h, "power", "power_limit_mw", mw);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(
    nvmlDevice_t h, unsigned long long* mj) {
  const nvmlReturn_t r = number(h, "energy", "energy_mj", mj);
  if (r != NVML_SUCCESS) return r;
  const json& dev = state().scenario["devices"][h->index];
  *mj =
      static_cast<unsigned long long>(fake::energy_mj(dev, state().loaded_s, fake::monotonic_s()));
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetEncoderUtilization(
    nvmlDevice_t h, unsigned* u, unsigned* period_us) {
  if (period_us != nullptr) *period_us = 1000000;
  return number(h, "encoder", "encoder", u);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetDecoderUtilization(
    nvmlDevice_t h, unsigned* u, unsigned* period_us) {
  if (period_us != nullptr) *period_us = 1000000;
  return number(h, "decoder", "decoder", u);
}
#ifndef SONDE_FAKE_NO_V3
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_t* infos) {
  return list_processes(h, "compute_processes", n, infos);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_t* infos) {
  return list_processes(h, "graphics_processes", n, infos);
}
#endif
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_t* infos) {
  return list_processes(h, "compute_processes", n, infos);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_t* infos) {
  return list_processes(h, "graphics_processes", n, infos);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_v1_t* infos) {
  return list_processes(h, "compute_processes", n, infos);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(
    nvmlDevice_t h, unsigned* n, nvmlProcessInfo_v1_t* infos) {
  return list_processes(h, "graphics_processes", n, infos);
}
// Samples of "process_utilization" ({pid, sm, mem, enc, dec}); each call makes samples one
// second newer than the previous call's, so `last_seen` filters as the driver does.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t h, nvmlProcessUtilizationSample_t* out, unsigned* n,
    unsigned long long last_seen) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (n == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (fake::unsupported(*dev, "processes") || fake::unsupported(*dev, "process_utilization") ||
      !dev->contains("process_utilization"))
    return NVML_ERROR_NOT_SUPPORTED;
  std::vector<nvmlProcessUtilizationSample_t> samples;
  std::lock_guard<std::mutex> lock(counters_mutex());
  const unsigned long long stamp = (state().util_call[h->index] + 1) * 1000000ULL;
  for (const auto& p : (*dev)["process_utilization"]) {
    int pid = state().pids.resolve(p.value("pid", json(0)));
    if (pid <= 0 || stamp <= last_seen) continue;
    nvmlProcessUtilizationSample_t s{};
    s.pid = static_cast<unsigned>(pid);
    s.timeStamp = stamp;
    s.smUtil = p.value("sm", 0u);
    s.memUtil = p.value("mem", 0u);
    s.encUtil = p.value("enc", 0u);
    s.decUtil = p.value("dec", 0u);
    samples.push_back(s);
  }
  if (samples.empty()) return NVML_ERROR_NOT_FOUND;
  if (out == nullptr || *n < samples.size()) {
    *n = static_cast<unsigned>(samples.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(samples.begin(), samples.end(), out);
  *n = static_cast<unsigned>(samples.size());
  ++state().util_call[h->index];
  return NVML_SUCCESS;
}

#ifndef SONDE_FAKE_NO_V3  // the older driver has no MIG calls either
// MIG: "mig_mode" (bool; absent: the GPU has no MIG, NOT_SUPPORTED), "max_mig_devices" (default
// 7) and "mig_devices" (each: name, uuid, gpu_instance_id, compute_instance_id, memory_*_mib,
// compute_processes, not_supported, error), listed only while "mig_mode" is true.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h,
                                                                         unsigned* current,
                                                                         unsigned* pending) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (h->mig >= 0 || !dev->contains("mig_mode")) return NVML_ERROR_NOT_SUPPORTED;
  *current = (*dev)["mig_mode"].get<bool>() ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  *pending = *current;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h,
                                                                                   unsigned* n) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (n == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
  if (h->mig >= 0 || !dev->contains("mig_mode")) return NVML_ERROR_NOT_SUPPORTED;
  *n = dev->value("max_mig_devices", 7u);
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(
    nvmlDevice_t h, unsigned index, nvmlDevice_t* out) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (out == nullptr || h->mig >= 0) return NVML_ERROR_INVALID_ARGUMENT;
  if (!dev->value("mig_mode", false)) return NVML_ERROR_INVALID_ARGUMENT;
  auto& migs = state().mig_handles[h->index];
  if (index >= migs.size()) return NVML_ERROR_NOT_FOUND;
  *out = &migs[index];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    nvmlDevice_t h, nvmlDevice_t* out) {
  const json* dev = nullptr;
  if (nvmlReturn_t r = device(h, dev); r != NVML_SUCCESS) return r;
  if (out == nullptr || h->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;
  *out = &state().handles[h->index];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h,
                                                                               unsigned* id) {
  if (h != nullptr && h->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;  // not a MIG device
  return number(h, "gpu_instance_id", "gpu_instance_id", id);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h,
                                                                                   unsigned* id) {
  if (h != nullptr && h->mig < 0) return NVML_ERROR_INVALID_ARGUMENT;  // not a MIG device
  return number(h, "compute_instance_id", "compute_instance_id", id);
}
#endif

}  // extern "C"
