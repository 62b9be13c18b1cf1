#pragma once
// The GPUs a Slurm job's processes hold, for `sonde serve --per-job`: one query of every device
// (with its process list) per scan, attributed to each job as the gpu and energy collectors
// attribute a device to a level (gpu::process_use).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/watchdog.hpp"
#include "gpu/gpu.hpp"
#include "sinks/prometheus.hpp"
#include "sinks/prometheus_owners.hpp"

namespace sonde::cli {

class JobGpus {
 public:
  /// Null when no GPU library or device is found (nothing to attribute).
  static std::unique_ptr<JobGpus> open();
  explicit JobGpus(gpu::Gpus gpus);

  /// Each job's use of each device it holds; `now_s` a monotonic time (energy from power when a
  /// device has no energy counter).
  std::vector<prom::JobGpuUse> attribute(const std::map<std::string, std::vector<int>>& pids,
                                         double now_s);

 private:
  struct DeviceState {
    std::optional<double> prev_mj;
    std::optional<double> prev_s;
  };
  gpu::Gpus gpus_;
  std::vector<DeviceState> devices_;
};

/// JobGpus::attribute under a watchdog (core/watchdog.hpp), as the engine runs the gpu collector:
/// the driver is code sonde does not control, and a call stuck in it must not stall the scan of
/// the node. A query that overruns `deadline_s` leaves the jobs' GPU series out of that scan (the
/// other series go on) and is reported once on stderr; while the abandoned call is still inside
/// the driver, later scans skip the GPUs; once it returns, the next scan queries them again (and
/// says so). The abandoned thread owns the JobGpus through its call, so it is never destroyed
/// under a driver call.
class GuardedJobGpus {
 public:
  GuardedJobGpus(std::shared_ptr<JobGpus> gpus, double deadline_s);
  std::vector<prom::JobGpuUse> attribute(const std::map<std::string, std::vector<int>>& pids);

 private:
  std::shared_ptr<JobGpus> gpus_;
  double deadline_s_;
  Watchdog dog_{1};
  bool stuck_ = false;  ///< reported as not answering, not yet reported back
};

/// The MIG devices of the node's GPUs in MIG mode, for `sonde serve`'s sonde_gpu_mig_* series
/// (docs/prometheus.md): one query of every device per scan (with process lists, for the count
/// per MIG device), under a watchdog as GuardedJobGpus: a query that overruns `deadline_s` leaves
/// the MIG series out of that scan, reported once on stderr; while the abandoned call is still
/// inside the driver, later scans skip it. A GPU that is lost leaves its MIG series out.
class GuardedMigGpus {
 public:
  /// Null when no GPU is in MIG mode now (nothing to show; MIG mode changes need a GPU reset).
  static std::unique_ptr<GuardedMigGpus> open(double deadline_s);
  GuardedMigGpus(std::shared_ptr<gpu::Gpus> gpus, double deadline_s);
  std::vector<prom::MigSeries> series();

 private:
  std::shared_ptr<gpu::Gpus> gpus_;
  double deadline_s_;
  Watchdog dog_{1};
  bool stuck_ = false;
};

/// The series of the MIG devices in a snapshot (`gpu`: the device's place in it, as the gpu
/// collector numbers devices).
std::vector<prom::MigSeries> mig_series(const gpu::GpuSnapshot& snap);

}  // namespace sonde::cli
