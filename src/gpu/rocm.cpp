// The AMD backend: ROCm SMI loaded with dlopen.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "core/trust.hpp"
#include "gpu/backends.hpp"
#include "gpu/rocm_types.hpp"

namespace sonde::gpu {
namespace {

using St = rsmi_status_t;

bool device_fatal(St s) {
  return s == RSMI_STATUS_INIT_ERROR || s == RSMI_STATUS_FILE_ERROR ||
         s == RSMI_STATUS_UNKNOWN_ERROR || s == RSMI_STATUS_INTERNAL_EXCEPTION;
}

std::string status_name(St s) {
  switch (s) {
    case RSMI_STATUS_NOT_SUPPORTED: return "not supported";
    case RSMI_STATUS_FILE_ERROR: return "device files not readable (GPU gone?)";
    case RSMI_STATUS_PERMISSION: return "no permission";
    case RSMI_STATUS_INIT_ERROR: return "ROCm SMI initialisation error";
    case RSMI_STATUS_INTERNAL_EXCEPTION: return "ROCm SMI internal exception";
    case RSMI_STATUS_UNKNOWN_ERROR: return "unknown ROCm SMI error";
    default: return fmt::format("ROCm SMI error {}", static_cast<unsigned>(s));
  }
}

struct RocmApi {
  St (*init)(uint64_t) = nullptr;
  St (*shut_down)() = nullptr;
  St (*num_devices)(uint32_t*) = nullptr;
  St (*name)(uint32_t, char*, size_t) = nullptr;
  St (*unique_id)(uint32_t, uint64_t*) = nullptr;
  St (*pci_id)(uint32_t, uint64_t*) = nullptr;
  St (*busy)(uint32_t, uint32_t*) = nullptr;
  St (*memory_busy)(uint32_t, uint32_t*) = nullptr;
  St (*memory_usage)(uint32_t, int, uint64_t*) = nullptr;
  St (*memory_total)(uint32_t, int, uint64_t*) = nullptr;
  St (*temperature)(uint32_t, uint32_t, int, int64_t*) = nullptr;
  St (*fan)(uint32_t, uint32_t, int64_t*) = nullptr;
  St (*fan_max)(uint32_t, uint32_t, uint64_t*) = nullptr;
  St (*power_current)(uint32_t, uint64_t*) = nullptr;
  St (*power_ave)(uint32_t, uint32_t, uint64_t*) = nullptr;
  St (*power_cap)(uint32_t, uint32_t, uint64_t*) = nullptr;
  St (*energy)(uint32_t, uint64_t*, float*, uint64_t*) = nullptr;
  St (*processes)(rsmi_process_info_t*, uint32_t*) = nullptr;
  St (*process_gpus)(uint32_t, uint32_t*, uint32_t*) = nullptr;
  St (*process_by_device)(uint32_t, uint32_t, rsmi_process_info_t*) = nullptr;
  St (*process_by_pid)(uint32_t, rsmi_process_info_t*) = nullptr;
  St (*version_str)(int, char*, uint32_t) = nullptr;
  St (*version)(rsmi_version_t*) = nullptr;
};

class RocmBackend final : public Backend {
 public:
  RocmBackend(std::unique_ptr<Library> lib, RocmApi api, int count, std::string driver)
      : lib_(std::move(lib)), api_(api), count_(count), driver_(std::move(driver)) {}
  ~RocmBackend() override {
    if (api_.shut_down != nullptr) api_.shut_down();
  }
  const char* vendor() const override { return "amd"; }
  std::string driver_version() const override { return driver_; }
  int device_count() const override { return count_; }

  GpuDevice query(int index, bool with_processes) override {
    GpuDevice d;
    d.index = index;
    d.vendor = "amd";
    const auto dv = static_cast<uint32_t>(index);
    auto fail = [&](St s) {
      if (!device_fatal(s)) return false;
      d.error = status_name(s);
      return true;
    };
    char buf[256] = {};
    St s = api_.name(dv, buf, sizeof buf);
    if (s != RSMI_STATUS_SUCCESS) {
      d.error = status_name(s);
      return d;
    }
    d.name = buf;
    uint64_t u64 = 0;
    if (api_.unique_id != nullptr) {
      s = api_.unique_id(dv, &u64);
      if (s == RSMI_STATUS_SUCCESS) d.uuid = fmt::format("{:016x}", u64);
      if (fail(s)) return d;
    }
    if (api_.pci_id != nullptr) {
      s = api_.pci_id(dv, &u64);
      // BDFID: domain << 32 | bus << 8 | device << 3 | function.
      if (s == RSMI_STATUS_SUCCESS)
        d.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", (u64 >> 32) & 0xffffffff,
                                   (u64 >> 8) & 0xff, (u64 >> 3) & 0x1f, u64 & 0x7);
      if (fail(s)) return d;
    }
    uint32_t u32 = 0;
    if (api_.busy != nullptr) {
      s = api_.busy(dv, &u32);
      if (s == RSMI_STATUS_SUCCESS) d.util_gpu = u32;
      if (fail(s)) return d;
    }
    if (api_.memory_busy != nullptr) {
      s = api_.memory_busy(dv, &u32);
      if (s == RSMI_STATUS_SUCCESS) d.util_mem = u32;
      if (fail(s)) return d;
    }
    if (api_.memory_usage != nullptr) {
      s = api_.memory_usage(dv, RSMI_MEM_TYPE_VRAM, &u64);
      if (s == RSMI_STATUS_SUCCESS) d.mem_used_bytes = u64;
      if (fail(s)) return d;
    }
    if (api_.memory_total != nullptr) {
      s = api_.memory_total(dv, RSMI_MEM_TYPE_VRAM, &u64);
      if (s == RSMI_STATUS_SUCCESS) d.mem_total_bytes = u64;
      if (fail(s)) return d;
    }
    if (api_.temperature != nullptr) {
      int64_t t = 0;
      s = api_.temperature(dv, RSMI_TEMP_TYPE_EDGE, RSMI_TEMP_CURRENT, &t);
      if (s != RSMI_STATUS_SUCCESS && !device_fatal(s))  // MI200+: no edge sensor
        s = api_.temperature(dv, RSMI_TEMP_TYPE_JUNCTION, RSMI_TEMP_CURRENT, &t);
      if (s == RSMI_STATUS_SUCCESS) d.temperature_c = static_cast<double>(t) / 1000.0;
      if (fail(s)) return d;
    }
    if (api_.fan != nullptr) {
      int64_t f = 0;
      s = api_.fan(dv, 0, &f);
      uint64_t max = rocm::kMaxFanSpeed;
      if (s == RSMI_STATUS_SUCCESS && api_.fan_max != nullptr &&
          api_.fan_max(dv, 0, &u64) == RSMI_STATUS_SUCCESS && u64 > 0)
        max = u64;
      if (s == RSMI_STATUS_SUCCESS)
        d.fan_percent = 100.0 * static_cast<double>(f) / static_cast<double>(max);
      if (fail(s)) return d;
    }
    s = RSMI_STATUS_NOT_SUPPORTED;
    if (api_.power_current != nullptr) s = api_.power_current(dv, &u64);  // microwatts
    if (s != RSMI_STATUS_SUCCESS && !device_fatal(s) && api_.power_ave != nullptr)
      s = api_.power_ave(dv, 0, &u64);
    if (s == RSMI_STATUS_SUCCESS) d.power_w = static_cast<double>(u64) / 1e6;
    if (fail(s)) return d;
    if (api_.power_cap != nullptr) {
      s = api_.power_cap(dv, 0, &u64);
      if (s == RSMI_STATUS_SUCCESS) d.power_limit_w = static_cast<double>(u64) / 1e6;
      if (fail(s)) return d;
    }
    if (api_.energy != nullptr) {
      float resolution = 0;
      uint64_t stamp = 0;
      s = api_.energy(dv, &u64, &resolution, &stamp);  // counter × resolution = microjoules
      if (s == RSMI_STATUS_SUCCESS)
        d.energy_mj = static_cast<std::uint64_t>(static_cast<double>(u64) * resolution / 1000.0);
      if (fail(s)) return d;
    }
    if (with_processes) d.processes = processes_on(dv);
    return d;
  }

 private:
  // Processes with memory on device `dv`: the node's compute processes, then for each the
  // devices it uses. nullopt when the library cannot list them.
  std::optional<std::vector<GpuProcess>> processes_on(uint32_t dv) {
    if (api_.processes == nullptr || api_.process_gpus == nullptr) return std::nullopt;
    uint32_t n = 0;
    if (api_.processes(nullptr, &n) != RSMI_STATUS_SUCCESS) return std::nullopt;
    std::vector<rsmi_process_info_t> all(n + 8u);
    n = static_cast<uint32_t>(all.size());
    St s = api_.processes(all.data(), &n);
    if (s != RSMI_STATUS_SUCCESS && s != RSMI_STATUS_INSUFFICIENT_SIZE) return std::nullopt;
    all.resize(std::min<std::size_t>(n, all.size()));
    std::vector<GpuProcess> out;
    for (const auto& p : all) {
      uint32_t devices[64];
      uint32_t nd = 64;
      if (api_.process_gpus(p.process_id, devices, &nd) != RSMI_STATUS_SUCCESS) continue;
      nd = std::min<uint32_t>(nd, 64);
      if (std::find(devices, devices + nd, dv) == devices + nd) continue;
      GpuProcess g;
      g.pid = static_cast<int>(p.process_id);
      g.compute = true;
      rsmi_process_info_t info{};
      if (api_.process_by_device != nullptr &&
          api_.process_by_device(p.process_id, dv, &info) == RSMI_STATUS_SUCCESS) {
        g.used_memory_bytes = info.vram_usage;
        if (info.cu_occupancy != rocm::kCuOccupancyInvalid) g.sm_util = info.cu_occupancy;
      } else if (nd == 1 && api_.process_by_pid != nullptr &&
                 api_.process_by_pid(p.process_id, &info) == RSMI_STATUS_SUCCESS) {
        // The process's totals are this device's when it uses no other.
        g.used_memory_bytes = info.vram_usage;
        if (info.cu_occupancy != rocm::kCuOccupancyInvalid) g.sm_util = info.cu_occupancy;
      }
      out.push_back(g);
    }
    return out;
  }

  std::unique_ptr<Library> lib_;
  RocmApi api_;
  int count_;
  std::string driver_;
};

}  // namespace

std::unique_ptr<Backend> open_rocm(const std::string& path, std::string& note) {
  std::vector<std::string> names;
  if (!path.empty()) {
    names.push_back(path);
  } else if (const char* env = secure_mode() ? nullptr : std::getenv("SONDE_ROCM_SMI_LIBRARY");
             env != nullptr && *env) {
    names.emplace_back(env);
  } else {
    names = {"librocm_smi64.so",   "librocm_smi64.so.7", "librocm_smi64.so.6",
             "librocm_smi64.so.5", "librocm_smi64.so.1", "/opt/rocm/lib/librocm_smi64.so"};
  }
  auto lib = std::make_unique<Library>();
  if (!lib->open(names)) {
    note = "ROCm SMI: " + (names.size() == 1 ? lib->error()
                                             : "cannot load librocm_smi64.so (" +
                                                   std::to_string(names.size()) + " names tried)");
    return nullptr;
  }
  RocmApi a;
  auto pick = [&](auto& slot, const char* n) {
    slot = lib->sym<std::remove_reference_t<decltype(slot)>>(n);
  };
  pick(a.init, "rsmi_init");
  pick(a.shut_down, "rsmi_shut_down");
  pick(a.num_devices, "rsmi_num_monitor_devices");
  pick(a.name, "rsmi_dev_name_get");
  pick(a.unique_id, "rsmi_dev_unique_id_get");
  pick(a.pci_id, "rsmi_dev_pci_id_get");
  pick(a.busy, "rsmi_dev_busy_percent_get");
  pick(a.memory_busy, "rsmi_dev_memory_busy_percent_get");
  pick(a.memory_usage, "rsmi_dev_memory_usage_get");
  pick(a.memory_total, "rsmi_dev_memory_total_get");
  pick(a.temperature, "rsmi_dev_temp_metric_get");
  pick(a.fan, "rsmi_dev_fan_speed_get");
  pick(a.fan_max, "rsmi_dev_fan_speed_max_get");
  pick(a.power_current, "rsmi_dev_current_socket_power_get");
  pick(a.power_ave, "rsmi_dev_power_ave_get");
  pick(a.power_cap, "rsmi_dev_power_cap_get");
  pick(a.energy, "rsmi_dev_energy_count_get");
  pick(a.processes, "rsmi_compute_process_info_get");
  pick(a.process_gpus, "rsmi_compute_process_gpus_get");
  pick(a.process_by_device, "rsmi_compute_process_info_by_device_get");
  pick(a.process_by_pid, "rsmi_compute_process_info_by_pid_get");
  pick(a.version_str, "rsmi_version_str_get");
  pick(a.version, "rsmi_version_get");
  if (a.init == nullptr || a.num_devices == nullptr || a.name == nullptr) {
    note = "ROCm SMI: " + lib->path() +
           " lacks rsmi_init, rsmi_num_monitor_devices or rsmi_dev_name_get";
    return nullptr;
  }
  St s = a.init(0);
  if (s != RSMI_STATUS_SUCCESS) {
    note = "ROCm SMI: initialisation failed: " + status_name(s);
    return nullptr;
  }
  uint32_t count = 0;
  s = a.num_devices(&count);
  if (s != RSMI_STATUS_SUCCESS) {
    note = "ROCm SMI: cannot count devices: " + status_name(s);
    if (a.shut_down != nullptr) a.shut_down();
    return nullptr;
  }
  std::string driver;
  char buf[128] = {};
  if (a.version_str != nullptr &&
      a.version_str(RSMI_SW_COMP_DRIVER, buf, sizeof buf) == RSMI_STATUS_SUCCESS) {
    driver = buf;
  } else if (rsmi_version_t v{}; a.version != nullptr && a.version(&v) == RSMI_STATUS_SUCCESS) {
    driver = fmt::format("ROCm SMI {}.{}.{}", v.major, v.minor, v.patch);
  }
  if (count == 0) note = "ROCm SMI: no AMD GPU found";
  return std::make_unique<RocmBackend>(std::move(lib), a, static_cast<int>(count),
                                       std::move(driver));
}

}  // namespace sonde::gpu
