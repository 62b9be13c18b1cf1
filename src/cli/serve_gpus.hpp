#pragma once
// The GPUs a Slurm job's processes hold, for `sonde serve --per-job`: one query of every device
// (with its process list) per scan, attributed to each job as the gpu and energy collectors
// attribute a device to a level (gpu::process_use).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

}  // namespace sonde::cli
