#pragma once
// GPUs as sonde sees them, whatever the vendor: NVIDIA through NVML, AMD through ROCm SMI, both
// loaded with dlopen at run time (src/gpu/nvml.cpp, src/gpu/rocm.cpp). Absent libraries and nodes
// without devices are normal: open_gpus() then returns no backend and says why in `notes`.
//
// A field the device or driver does not support is std::nullopt (printed `??` in text and `null`
// in JSON), never 0. A device that fails or is lost keeps its slot with `error` set, so the
// other devices are still shown.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace sonde::gpu {

struct GpuProcess {
  int pid = 0;
  std::optional<std::uint64_t> used_memory_bytes;  ///< nullopt: the driver does not say
  bool compute = false;                            ///< listed by the compute-process call
  bool graphics = false;                           ///< listed by the graphics-process call
  /// Per-process utilisation samples over the last interval (NVML process utilisation), percent.
  std::optional<double> sm_util, mem_util, enc_util, dec_util;
  /// On a MIG-enabled GPU: the MIG device (GpuDevice::mig, by its `index`) the process runs on.
  std::optional<int> mig_index;
};

/// One MIG device of a MIG-enabled NVIDIA GPU: a compute instance of a GPU instance, with its
/// own slice of the memory. NVML gives no utilisation for it (NOT_SUPPORTED in real drivers), so
/// `util_gpu` stays nullopt there: shown "n/a", never 0.
struct MigDevice {
  int index = 0;  ///< under its GPU (nvmlDeviceGetMigDeviceHandleByIndex)
  std::optional<unsigned> gpu_instance_id, compute_instance_id;
  std::string uuid;     ///< "MIG-…"
  std::string name;     ///< the driver's: "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
  std::string profile;  ///< "3g.20gb" (the name after "MIG "); "" when the name has none
  std::optional<std::uint64_t> mem_used_bytes, mem_total_bytes;
  std::optional<double> util_gpu;  ///< percent, where a driver gives it
  /// Compute processes on this instance; nullopt: not supported.
  std::optional<std::vector<GpuProcess>> processes;
  std::optional<std::string> error;  ///< this instance failed: what happened
};
/// The profile in a MIG device's name ("… MIG 3g.20gb" → "3g.20gb"), else "".
std::string mig_profile(const std::string& name);

struct GpuDevice {
  int index = 0;       ///< index within its vendor (the `[i]` of gpustat)
  std::string vendor;  ///< "nvidia" or "amd"
  std::string name;    ///< empty only with `error`
  std::string uuid;
  std::string pci_bus_id;
  std::optional<double> temperature_c;
  std::optional<double> fan_percent;
  std::optional<double> util_gpu;  ///< percent
  std::optional<double> util_mem;  ///< memory-controller (bandwidth) utilisation, percent
  std::optional<std::uint64_t> mem_used_bytes, mem_total_bytes;
  std::optional<double> power_w, power_limit_w;
  std::optional<std::uint64_t> energy_mj;  ///< total energy since driver load, millijoules
  std::optional<double> enc_util, dec_util;
  /// nullopt: the driver cannot list processes on this device ("not supported").
  std::optional<std::vector<GpuProcess>> processes;
  std::optional<std::string> error;  ///< lost or failing device: what happened
  /// MIG mode (NVIDIA, current mode): nullopt where the GPU or driver has no MIG.
  std::optional<bool> mig_mode;
  /// Its MIG devices when `mig_mode` is on (ascending index); empty otherwise.
  std::vector<MigDevice> mig;
};

struct GpuSnapshot {
  std::vector<GpuDevice> devices;  ///< NVIDIA first, then AMD
  std::string nvidia_driver;       ///< empty without NVML
  std::string amd_driver;          ///< empty without ROCm SMI
};

/// What a set of processes (a level's members) uses of one device: sums over its processes there.
struct ProcessUse {
  bool any = false;                    ///< one of the processes is on the device
  std::optional<double> sm_util;       ///< %, capped at 100, where the driver gives it per process
  std::optional<double> mem_util;      ///< memory-bandwidth %, capped at 100, likewise
  std::optional<double> memory_bytes;  ///< where the driver gives it per process
  /// The processes' utilisation: their SM use, else the device's (NaN when neither is known).
  double util = 0;
  /// The share of the device's power (and energy) that falls to them: their utilisation over the
  /// device's, else their memory over the device's; NaN when neither can be told.
  double power_share = 0;
};
/// `d` must have a process list (`d.processes`).
ProcessUse process_use(const GpuDevice& d, const std::unordered_set<int>& pids);

/// One vendor library, loaded and initialised. Not thread-safe: one thread queries it.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* vendor() const = 0;
  virtual std::string driver_version() const = 0;
  virtual int device_count() const = 0;
  /// Reads everything about device `index`; never throws, a failure sets `error`.
  /// `with_processes`: also list processes (and per-process utilisation where offered).
  virtual GpuDevice query(int index, bool with_processes) = 0;
};

/// Every backend that could be opened, and why the others could not (e.g. "NVML: cannot load
/// libnvidia-ml.so.1: ..."). `nvml_library` / `rocm_library`: paths to load; empty means
/// $SONDE_NVML_LIBRARY / $SONDE_ROCM_SMI_LIBRARY, else the usual sonames.
struct Gpus {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<std::string> notes;
  bool nvml_loaded = false;  ///< the NVIDIA library was found and initialised
  bool rocm_loaded = false;  ///< the ROCm SMI library was found and initialised
  /// Driver versions, also known when the library reports no device (then no backend is kept).
  std::string nvidia_driver, amd_driver;
};
Gpus open_gpus();
/// Queries every device of every backend.
GpuSnapshot query_all(Gpus& gpus, bool with_processes);

}  // namespace sonde::gpu
