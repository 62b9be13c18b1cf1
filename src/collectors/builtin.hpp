#pragma once
// Factories of the built-in collectors, one file each; registered in register.cpp.
#include <algorithm>

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

/// Hands each CPU share the members of `level` ran this interval to `place(cpu, seconds)`, which
/// returns whether it took it (a CPU it does not know is not placed), and the time sonde recovered
/// when it reaped its own children after the previous tick. Returns the seconds left unplaced: per
/// process its own and reaped CPU time beyond what was placed (never negative),
/// which the caller spreads over the CPUs it counts. The rule of the cpu and energy collectors.
template <typename Place>
double place_cpu_shares(const TickContext& ctx, Level level, Place&& place) {
  const auto& procs = *ctx.procs;
  double unplaced = 0;
  for (auto i : members(ctx, level)) {
    const PidSample& p = procs.pids[i];
    double placed = 0;
    for (auto s = p.share_begin; s < p.share_end; ++s) {
      const CpuShare& share = procs.shares[s];
      if (place(share.cpu, share.seconds)) placed += share.seconds;
    }
    unplaced += std::max(0.0, p.cpu_delta_s + p.reaped_cpu_s - placed);
  }
  // Time recovered when sonde reaped its own children after the previous tick.
  for (const CpuShare& share : procs.reaped_late[level_index(level)])
    if (!place(share.cpu, share.seconds)) unplaced += share.seconds;
  return unplaced;
}

}  // namespace sonde::collectors
