#pragma once
// Factories of the built-in collectors, one file each; registered in register.cpp.
#include "core/collector.hpp"

namespace sonde::collectors {

CollectorInfo process_info();
CollectorInfo cpu_info();
CollectorInfo memory_info();
CollectorInfo memory_rss_info();
CollectorInfo io_info();
CollectorInfo network_info();
CollectorInfo procs_info();
/// "": every GPU (sonde.collectors.gpu); "nvidia" (gpu_nvml) or "amd" (gpu_rocm): one vendor.
CollectorInfo gpu_info(const std::string& vendor = {});
CollectorInfo energy_info();

/// Members of `level` in this tick's snapshot (system: none; system collectors read node files).
inline const std::vector<std::uint32_t>& members(const TickContext& ctx, Level level) {
  return ctx.procs->members[level_index(level)];
}

}  // namespace sonde::collectors
