// The NVIDIA backend: NVML loaded with dlopen, versioned entry points with their fallbacks.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "core/trust.hpp"
#include "gpu/backends.hpp"
#include "gpu/nvml_types.hpp"

namespace sonde::gpu {
namespace {

using nvml::kValueNotAvailable;

// Errors after which nothing more is read from the device: it is gone or the driver is broken.
bool device_fatal(nvmlReturn_t r) {
  switch (r) {
    case NVML_ERROR_UNINITIALIZED:
    case NVML_ERROR_DRIVER_NOT_LOADED:
    case NVML_ERROR_IRQ_ISSUE:
    case NVML_ERROR_GPU_IS_LOST:
    case NVML_ERROR_RESET_REQUIRED:
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
    case NVML_ERROR_GPU_NOT_FOUND:
    case NVML_ERROR_UNKNOWN: return true;
    default: return false;
  }
}

std::string error_name(nvmlReturn_t r) {
  switch (r) {
    case NVML_ERROR_UNINITIALIZED: return "NVML not initialised";
    case NVML_ERROR_NOT_SUPPORTED: return "not supported";
    case NVML_ERROR_NO_PERMISSION: return "no permission";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "NVIDIA driver is not loaded";
    case NVML_ERROR_IRQ_ISSUE: return "interrupt issue with the GPU";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML library not found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU needs a reset";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "NVML/driver version mismatch";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_UNKNOWN: return "unknown NVML error";
    default: return fmt::format("NVML error {}", static_cast<int>(r));
  }
}

// The entry points, resolved once; nullptr where the library lacks one.
struct NvmlApi {
  using Dev = nvmlDevice_t;
  using Ret = nvmlReturn_t;
  Ret (*init)() = nullptr;
  Ret (*shutdown)() = nullptr;
  Ret (*system_driver)(char*, unsigned) = nullptr;
  Ret (*count)(unsigned*) = nullptr;
  Ret (*handle)(unsigned, Dev*) = nullptr;
  Ret (*name)(Dev, char*, unsigned) = nullptr;
  Ret (*uuid)(Dev, char*, unsigned) = nullptr;
  Ret (*pci)(Dev, nvmlPciInfo_t*) = nullptr;
  Ret (*temperature)(Dev, int, unsigned*) = nullptr;
  Ret (*fan)(Dev, unsigned*) = nullptr;
  Ret (*utilization)(Dev, nvmlUtilization_t*) = nullptr;
  Ret (*memory_v2)(Dev, nvmlMemory_v2_t*) = nullptr;
  Ret (*memory)(Dev, nvmlMemory_t*) = nullptr;
  Ret (*power)(Dev, unsigned*) = nullptr;
  Ret (*power_limit)(Dev, unsigned*) = nullptr;
  Ret (*energy)(Dev, unsigned long long*) = nullptr;
  Ret (*encoder)(Dev, unsigned*, unsigned*) = nullptr;
  Ret (*decoder)(Dev, unsigned*, unsigned*) = nullptr;
  // Process lists: [0] compute, [1] graphics; _v3/_v2 take nvmlProcessInfo_t, plain takes v1.
  Ret (*procs_v3[2])(Dev, unsigned*, nvmlProcessInfo_t*) = {nullptr, nullptr};
  Ret (*procs_v2[2])(Dev, unsigned*, nvmlProcessInfo_t*) = {nullptr, nullptr};
  Ret (*procs_v1[2])(Dev, unsigned*, nvmlProcessInfo_v1_t*) = {nullptr, nullptr};
  Ret (*process_util)(Dev, nvmlProcessUtilizationSample_t*, unsigned*,
                      unsigned long long) = nullptr;
  // MIG (drivers from R450): all optional, an older driver has none of them.
  Ret (*mig_mode)(Dev, unsigned*, unsigned*) = nullptr;
  Ret (*mig_max)(Dev, unsigned*) = nullptr;
  Ret (*mig_handle)(Dev, unsigned, Dev*) = nullptr;
  Ret (*mig_parent)(Dev, Dev*) = nullptr;
  Ret (*gpu_instance_id)(Dev, unsigned*) = nullptr;
  Ret (*compute_instance_id)(Dev, unsigned*) = nullptr;
};

// A value read from NVML: set, or the reason it is not.
template <typename T>
struct Read {
  nvmlReturn_t status;
  T value{};
  bool ok() const { return status == NVML_SUCCESS; }
};

class NvmlBackend final : public Backend {
 public:
  NvmlBackend(std::unique_ptr<Library> lib, NvmlApi api, int count, std::string driver)
      : lib_(std::move(lib)),
        api_(api),
        count_(count),
        driver_(std::move(driver)),
        last_seen_(static_cast<std::size_t>(count), 0) {}
  ~NvmlBackend() override {
    if (api_.shutdown != nullptr) api_.shutdown();
  }
  const char* vendor() const override { return "nvidia"; }
  std::string driver_version() const override { return driver_; }
  int device_count() const override { return count_; }

  GpuDevice query(int index, bool with_processes) override {
    GpuDevice d;
    d.index = index;
    d.vendor = "nvidia";
    nvmlDevice_t dev = nullptr;
    nvmlReturn_t r = api_.handle(static_cast<unsigned>(index), &dev);
    if (r != NVML_SUCCESS) {
      d.error = error_name(r);
      return d;
    }
    // Each read: success sets the field; "not supported" and the like leave it absent; a fatal
    // error marks the device and stops.
    auto fail = [&](nvmlReturn_t s) {
      if (!device_fatal(s)) return false;
      d.error = error_name(s);
      return true;
    };
    char buf[nvml::kNameBufferSize] = {};
    r = api_.name(dev, buf, sizeof buf);
    if (r != NVML_SUCCESS) {
      d.error = error_name(r);
      return d;
    }
    d.name = buf;
    if (api_.uuid != nullptr) {
      char ubuf[nvml::kUuidBufferSize] = {};
      r = api_.uuid(dev, ubuf, sizeof ubuf);
      if (r == NVML_SUCCESS) d.uuid = ubuf;
      if (fail(r)) return d;
    }
    if (api_.pci != nullptr) {
      nvmlPciInfo_t pci{};
      r = api_.pci(dev, &pci);
      if (r == NVML_SUCCESS) d.pci_bus_id = std::string(pci.busId, strnlen(pci.busId, 32));
      if (fail(r)) return d;
    }
    unsigned v = 0;
    if (api_.temperature != nullptr) {
      r = api_.temperature(dev, NVML_TEMPERATURE_GPU, &v);
      if (r == NVML_SUCCESS) d.temperature_c = v;
      if (fail(r)) return d;
    }
    if (api_.fan != nullptr) {
      r = api_.fan(dev, &v);
      if (r == NVML_SUCCESS) d.fan_percent = v;
      if (fail(r)) return d;
    }
    if (api_.utilization != nullptr) {
      nvmlUtilization_t u{};
      r = api_.utilization(dev, &u);
      if (r == NVML_SUCCESS) {
        d.util_gpu = u.gpu;
        d.util_mem = u.memory;
      }
      if (fail(r)) return d;
    }
    if (fail(read_memory(dev, d.mem_used_bytes, d.mem_total_bytes))) return d;
    if (api_.power != nullptr) {
      r = api_.power(dev, &v);
      if (r == NVML_SUCCESS) d.power_w = v / 1000.0;
      if (fail(r)) return d;
    }
    if (api_.power_limit != nullptr) {
      r = api_.power_limit(dev, &v);
      if (r == NVML_SUCCESS) d.power_limit_w = v / 1000.0;
      if (fail(r)) return d;
    }
    if (api_.energy != nullptr) {
      unsigned long long e = 0;
      r = api_.energy(dev, &e);
      if (r == NVML_SUCCESS) d.energy_mj = e;
      if (fail(r)) return d;
    }
    unsigned period = 0;
    if (api_.encoder != nullptr) {
      r = api_.encoder(dev, &v, &period);
      if (r == NVML_SUCCESS) d.enc_util = v;
      if (fail(r)) return d;
    }
    if (api_.decoder != nullptr) {
      r = api_.decoder(dev, &v, &period);
      if (r == NVML_SUCCESS) d.dec_util = v;
      if (fail(r)) return d;
    }
    if (with_processes) {
      r = read_processes(dev, static_cast<std::size_t>(index), d);
      if (fail(r)) return d;
    }
    if (api_.mig_mode != nullptr) {
      unsigned current = 0, pending = 0;
      r = api_.mig_mode(dev, &current, &pending);
      if (r == NVML_SUCCESS) d.mig_mode = current == NVML_DEVICE_MIG_ENABLE;
      if (fail(r)) return d;
    }
    if (d.mig_mode.value_or(false) && fail(read_mig(dev, with_processes, d))) return d;
    return d;
  }

 private:
  // Memory in use and in all: the v2 call (without the driver's reserved memory), else v1.
  nvmlReturn_t read_memory(nvmlDevice_t dev, std::optional<std::uint64_t>& used,
                           std::optional<std::uint64_t>& total) {
    nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (api_.memory_v2 != nullptr) {
      nvmlMemory_v2_t m{};
      m.version = nvml::kMemoryV2Version;
      r = api_.memory_v2(dev, &m);
      if (r == NVML_SUCCESS) {
        total = m.total;
        used = m.used;
      }
      if (device_fatal(r)) return r;
    }
    if (r != NVML_SUCCESS && api_.memory != nullptr) {
      nvmlMemory_t m{};
      r = api_.memory(dev, &m);
      if (r == NVML_SUCCESS) {
        total = m.total;
        used = m.used;
      }
      if (device_fatal(r)) return r;
    }
    return NVML_SUCCESS;
  }

  // The MIG devices of a GPU in MIG mode: ids, name, memory and (with `with_processes`) the
  // compute processes of each, each process of the GPU's own list tagged with its instance. An
  // index without a MIG device (NOT_FOUND) is skipped; a fatal error on one instance marks that
  // instance and is returned (the GPU is gone or the driver broken).
  nvmlReturn_t read_mig(nvmlDevice_t dev, bool with_processes, GpuDevice& d) {
    if (api_.mig_max == nullptr || api_.mig_handle == nullptr) return NVML_SUCCESS;
    unsigned max = 0;
    nvmlReturn_t r = api_.mig_max(dev, &max);
    if (r != NVML_SUCCESS) return device_fatal(r) ? r : NVML_SUCCESS;
    for (unsigned i = 0; i < max; ++i) {
      nvmlDevice_t m = nullptr;
      r = api_.mig_handle(dev, i, &m);
      if (device_fatal(r)) return r;
      if (r != NVML_SUCCESS || m == nullptr) continue;  // no MIG device at this index
      if (api_.mig_parent != nullptr) {
        nvmlDevice_t parent = nullptr;
        if (api_.mig_parent(m, &parent) == NVML_SUCCESS && parent != dev) continue;
      }
      MigDevice md;
      md.index = static_cast<int>(i);
      r = read_mig_device(m, with_processes, md);
      d.mig.push_back(std::move(md));
      if (r != NVML_SUCCESS) return r;
    }
    if (!d.processes && with_processes) {
      // The GPU itself lists none: its processes are its instances'.
      for (const auto& md : d.mig)
        if (md.processes) {
          if (!d.processes) d.processes.emplace();
          d.processes->insert(d.processes->end(), md.processes->begin(), md.processes->end());
        }
      return NVML_SUCCESS;
    }
    if (!d.processes) return NVML_SUCCESS;
    // The GPU's processes: on which instance each runs (where an instance lists it).
    for (auto& p : *d.processes)
      for (const auto& md : d.mig)
        if (md.processes && std::any_of(md.processes->begin(), md.processes->end(),
                                        [&](const GpuProcess& q) { return q.pid == p.pid; })) {
          p.mig_index = md.index;
          break;
        }
    return NVML_SUCCESS;
  }

  // One MIG device; returns the fatal status that stopped it (also in md.error), else success.
  nvmlReturn_t read_mig_device(nvmlDevice_t m, bool with_processes, MigDevice& md) {
    auto fail = [&](nvmlReturn_t s) {
      if (!device_fatal(s)) return false;
      md.error = error_name(s);
      return true;
    };
    unsigned v = 0;
    nvmlReturn_t r = NVML_SUCCESS;
    if (api_.gpu_instance_id != nullptr) {
      r = api_.gpu_instance_id(m, &v);
      if (r == NVML_SUCCESS) md.gpu_instance_id = v;
      if (fail(r)) return r;
    }
    if (api_.compute_instance_id != nullptr) {
      r = api_.compute_instance_id(m, &v);
      if (r == NVML_SUCCESS) md.compute_instance_id = v;
      if (fail(r)) return r;
    }
    char buf[nvml::kNameBufferSize] = {};
    r = api_.name(m, buf, sizeof buf);
    if (r == NVML_SUCCESS) {
      md.name = buf;
      md.profile = mig_profile(md.name);
    }
    if (fail(r)) return r;
    if (api_.uuid != nullptr) {
      char ubuf[nvml::kUuidBufferSize] = {};
      r = api_.uuid(m, ubuf, sizeof ubuf);
      if (r == NVML_SUCCESS) md.uuid = ubuf;
      if (fail(r)) return r;
    }
    if (fail(r = read_memory(m, md.mem_used_bytes, md.mem_total_bytes))) return r;
    if (api_.utilization != nullptr) {  // NOT_SUPPORTED on MIG devices in real drivers
      nvmlUtilization_t u{};
      r = api_.utilization(m, &u);
      if (r == NVML_SUCCESS) md.util_gpu = u.gpu;
      if (fail(r)) return r;
    }
    if (!with_processes) return NVML_SUCCESS;
    r = NVML_ERROR_FUNCTION_NOT_FOUND;
    std::vector<std::pair<unsigned, unsigned long long>> found;  // pid, used memory
    for (auto* fn : {api_.procs_v3[0], api_.procs_v2[0]}) {
      if (fn == nullptr) continue;
      std::vector<nvmlProcessInfo_t> infos;
      r = list(fn, m, infos);
      if (r == NVML_SUCCESS)
        for (const auto& p : infos) found.emplace_back(p.pid, p.usedGpuMemory);
      if (r != NVML_ERROR_FUNCTION_NOT_FOUND) break;
    }
    if (r == NVML_ERROR_FUNCTION_NOT_FOUND && api_.procs_v1[0] != nullptr) {
      std::vector<nvmlProcessInfo_v1_t> infos;
      r = list(api_.procs_v1[0], m, infos);
      if (r == NVML_SUCCESS)
        for (const auto& p : infos) found.emplace_back(p.pid, p.usedGpuMemory);
    }
    if (fail(r)) return r;
    if (r != NVML_SUCCESS) return NVML_SUCCESS;  // not supported: processes stay nullopt
    std::map<int, GpuProcess> by_pid;
    for (const auto& [pid, mem] : found) {
      GpuProcess& p = by_pid[static_cast<int>(pid)];
      p.pid = static_cast<int>(pid);
      p.compute = true;
      p.mig_index = md.index;
      if (mem != kValueNotAvailable)
        p.used_memory_bytes = std::max<std::uint64_t>(p.used_memory_bytes.value_or(0), mem);
    }
    md.processes.emplace();
    for (auto& [pid, p] : by_pid) md.processes->push_back(std::move(p));
    return NVML_SUCCESS;
  }

  // One process list (kind 0 compute, 1 graphics) with the newest call the driver has. The count
  // can grow between the sizing call and the filling call: retried a few times.
  template <typename Info, typename Fn>
  static nvmlReturn_t list(Fn fn, nvmlDevice_t dev, std::vector<Info>& out) {
    unsigned n = 0;
    nvmlReturn_t r = fn(dev, &n, nullptr);
    // A sizing call that "succeeds" with a count has listed nothing: ask again with room.
    if (r == NVML_SUCCESS && n > 0) r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; r == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 5; ++attempt) {
      out.assign(n + 8u, Info{});  // room for processes that start meanwhile
      n = static_cast<unsigned>(out.size());
      r = fn(dev, &n, out.data());
    }
    if (r == NVML_SUCCESS)
      out.resize(std::min<std::size_t>(n, out.size()));
    else
      out.clear();
    return r;
  }

  // Fills d.processes (nullopt when no call can list them); returns the first fatal status.
  nvmlReturn_t read_processes(nvmlDevice_t dev, std::size_t slot, GpuDevice& d) {
    std::map<int, GpuProcess> by_pid;
    bool any_listed = false;
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<std::pair<unsigned, unsigned long long>> found;  // pid, used memory
      nvmlReturn_t r = NVML_ERROR_FUNCTION_NOT_FOUND;
      for (auto* fn : {api_.procs_v3[kind], api_.procs_v2[kind]}) {
        if (fn == nullptr) continue;
        std::vector<nvmlProcessInfo_t> infos;
        r = list(fn, dev, infos);
        if (r == NVML_SUCCESS)
          for (const auto& p : infos) found.emplace_back(p.pid, p.usedGpuMemory);
        if (r != NVML_ERROR_FUNCTION_NOT_FOUND) break;
      }
      if (r == NVML_ERROR_FUNCTION_NOT_FOUND && api_.procs_v1[kind] != nullptr) {
        std::vector<nvmlProcessInfo_v1_t> infos;
        r = list(api_.procs_v1[kind], dev, infos);
        if (r == NVML_SUCCESS)
          for (const auto& p : infos) found.emplace_back(p.pid, p.usedGpuMemory);
      }
      if (device_fatal(r)) return r;
      if (r != NVML_SUCCESS) continue;
      any_listed = true;
      for (const auto& [pid, mem] : found) {
        GpuProcess& p = by_pid[static_cast<int>(pid)];
        p.pid = static_cast<int>(pid);
        (kind == 0 ? p.compute : p.graphics) = true;
        if (mem != kValueNotAvailable)
          p.used_memory_bytes = std::max<std::uint64_t>(p.used_memory_bytes.value_or(0), mem);
      }
    }
    if (!any_listed) return NVML_SUCCESS;
    std::vector<GpuProcess> procs;
    procs.reserve(by_pid.size());
    for (auto& [pid, p] : by_pid) procs.push_back(std::move(p));
    nvmlReturn_t r = read_process_util(dev, slot, procs);
    d.processes = std::move(procs);
    return device_fatal(r) ? r : NVML_SUCCESS;
  }

  // Per-process utilisation samples since the last call on this device, averaged per pid.
  nvmlReturn_t read_process_util(nvmlDevice_t dev, std::size_t slot,
                                 std::vector<GpuProcess>& procs) {
    if (api_.process_util == nullptr || procs.empty()) return NVML_SUCCESS;
    unsigned long long since = last_seen_[slot];
    unsigned n = 0;
    nvmlReturn_t r = api_.process_util(dev, nullptr, &n, since);
    std::vector<nvmlProcessUtilizationSample_t> samples;
    if (r == NVML_SUCCESS && n > 0) r = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; attempt < 5 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      samples.assign(n + 8u, nvmlProcessUtilizationSample_t{});
      n = static_cast<unsigned>(samples.size());
      r = api_.process_util(dev, samples.data(), &n, since);
      if (r == NVML_SUCCESS) samples.resize(std::min<std::size_t>(n, samples.size()));
    }
    if (r == NVML_SUCCESS && samples.empty() && n == 0) r = NVML_ERROR_NOT_FOUND;
    if (r == NVML_ERROR_NOT_FOUND) {
      // Supported, and no process ran on the device since the last call.
      for (auto& p : procs) p.sm_util = p.mem_util = p.enc_util = p.dec_util = 0.0;
      return NVML_SUCCESS;
    }
    if (r != NVML_SUCCESS) return r;
    struct Sum {
      double sm = 0, mem = 0, enc = 0, dec = 0;
      int n = 0;
    };
    std::map<unsigned, Sum> sums;
    for (const auto& s : samples) {
      Sum& t = sums[s.pid];
      t.sm += s.smUtil;
      t.mem += s.memUtil;
      t.enc += s.encUtil;
      t.dec += s.decUtil;
      ++t.n;
      last_seen_[slot] = std::max(last_seen_[slot], s.timeStamp);
    }
    for (auto& p : procs) {
      auto it = sums.find(static_cast<unsigned>(p.pid));
      if (it == sums.end()) {
        p.sm_util = p.mem_util = p.enc_util = p.dec_util = 0.0;
        continue;
      }
      const double k = it->second.n;
      p.sm_util = it->second.sm / k;
      p.mem_util = it->second.mem / k;
      p.enc_util = it->second.enc / k;
      p.dec_util = it->second.dec / k;
    }
    return NVML_SUCCESS;
  }

  std::unique_ptr<Library> lib_;
  NvmlApi api_;
  int count_;
  std::string driver_;
  std::vector<unsigned long long> last_seen_;  ///< per device: newest process sample seen
};

}  // namespace

std::unique_ptr<Backend> open_nvml(const std::string& path, std::string& note) {
  std::string name = path;
  if (name.empty()) {
    // Not under setuid/capabilities (AT_SECURE): the environment must not pick a library.
    const char* env = secure_mode() ? nullptr : std::getenv("SONDE_NVML_LIBRARY");
    name = env != nullptr && *env != '\0' ? env : "libnvidia-ml.so.1";
  }
  auto lib = std::make_unique<Library>();
  if (!lib->open({name})) {
    note = "NVML: " + lib->error();
    return nullptr;
  }
  NvmlApi a;
  auto pick = [&](auto& slot, std::initializer_list<const char*> names) {
    for (const char* n : names) {
      slot = lib->sym<std::remove_reference_t<decltype(slot)>>(n);
      if (slot != nullptr) return;
    }
  };
  pick(a.init, {"nvmlInit_v2", "nvmlInit"});
  pick(a.shutdown, {"nvmlShutdown"});
  pick(a.system_driver, {"nvmlSystemGetDriverVersion"});
  pick(a.count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  pick(a.handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  pick(a.name, {"nvmlDeviceGetName"});
  pick(a.uuid, {"nvmlDeviceGetUUID"});
  pick(a.pci, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2"});
  pick(a.temperature, {"nvmlDeviceGetTemperature"});
  pick(a.fan, {"nvmlDeviceGetFanSpeed"});
  pick(a.utilization, {"nvmlDeviceGetUtilizationRates"});
  pick(a.memory_v2, {"nvmlDeviceGetMemoryInfo_v2"});
  pick(a.memory, {"nvmlDeviceGetMemoryInfo"});
  pick(a.power, {"nvmlDeviceGetPowerUsage"});
  pick(a.power_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
  pick(a.energy, {"nvmlDeviceGetTotalEnergyConsumption"});
  pick(a.encoder, {"nvmlDeviceGetEncoderUtilization"});
  pick(a.decoder, {"nvmlDeviceGetDecoderUtilization"});
  pick(a.procs_v3[0], {"nvmlDeviceGetComputeRunningProcesses_v3"});
  pick(a.procs_v2[0], {"nvmlDeviceGetComputeRunningProcesses_v2"});
  pick(a.procs_v1[0], {"nvmlDeviceGetComputeRunningProcesses"});
  pick(a.procs_v3[1], {"nvmlDeviceGetGraphicsRunningProcesses_v3"});
  pick(a.procs_v2[1], {"nvmlDeviceGetGraphicsRunningProcesses_v2"});
  pick(a.procs_v1[1], {"nvmlDeviceGetGraphicsRunningProcesses"});
  pick(a.process_util, {"nvmlDeviceGetProcessUtilization"});
  pick(a.mig_mode, {"nvmlDeviceGetMigMode"});
  pick(a.mig_max, {"nvmlDeviceGetMaxMigDeviceCount"});
  pick(a.mig_handle, {"nvmlDeviceGetMigDeviceHandleByIndex"});
  pick(a.mig_parent, {"nvmlDeviceGetDeviceHandleFromMigDeviceHandle"});
  pick(a.gpu_instance_id, {"nvmlDeviceGetGpuInstanceId"});
  pick(a.compute_instance_id, {"nvmlDeviceGetComputeInstanceId"});
  if (a.init == nullptr || a.count == nullptr || a.handle == nullptr || a.name == nullptr) {
    note = "NVML: " + name +
           " lacks nvmlInit, nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex or "
           "nvmlDeviceGetName";
    return nullptr;
  }
  nvmlReturn_t r = a.init();
  if (r != NVML_SUCCESS) {
    note = "NVML: initialisation failed: " + error_name(r);
    return nullptr;
  }
  unsigned count = 0;
  r = a.count(&count);
  if (r != NVML_SUCCESS) {
    note = "NVML: cannot count devices: " + error_name(r);
    if (a.shutdown != nullptr) a.shutdown();
    return nullptr;
  }
  std::string driver;
  if (a.system_driver != nullptr) {
    char buf[nvml::kDriverBufferSize] = {};
    if (a.system_driver(buf, sizeof buf) == NVML_SUCCESS) driver = buf;
  }
  if (count == 0) note = "NVML: no NVIDIA GPU found";
  return std::make_unique<NvmlBackend>(std::move(lib), a, static_cast<int>(count),
                                       std::move(driver));
}

}  // namespace sonde::gpu
