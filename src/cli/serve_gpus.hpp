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

}  // namespace sonde::cli
