// What the summaries share (core/summary.hpp): column statistics, the bottleneck tags, bytes as
// text.
#include "core/summary.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sonde {

void ColumnStats::add(double v, double dt) {
  if (!std::isfinite(v)) return;
  if (count == 0) min = max = v;
  min = std::min(min, v);
  max = std::max(max, v);
  sum += v;
  ++count;
  if (std::isfinite(dt)) {
    integral += v * dt;
    span += dt;
  }
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}

std::vector<std::string> bottleneck_tags(const TagInputs& in) {
  constexpr double kCpuBound = 70, kMemoryBound = 0.8, kGpuUtilBound = 70, kGpuMemoryBound = 0.9,
                   kGpuUnused = 10;
  std::vector<std::string> tags;
  if (in.cpu_mean_pct && *in.cpu_mean_pct >= kCpuBound) tags.push_back("cpu-bound");
  if (in.memory_peak_gib && in.memory_limit_gib && *in.memory_limit_gib > 0 &&
      *in.memory_peak_gib >= kMemoryBound * *in.memory_limit_gib)
    tags.push_back("memory-bound");
  if (in.gpu_util_mean_pct && *in.gpu_util_mean_pct >= kGpuUtilBound)
    tags.push_back("gpu-util-bound");
  if (in.gpu_mem_peak_gib && in.gpu_memory_gib && *in.gpu_memory_gib > 0 &&
      *in.gpu_mem_peak_gib >= kGpuMemoryBound * *in.gpu_memory_gib)
    tags.push_back("gpu-memory-bound");
  if (in.gpu_mem_peak_gib && *in.gpu_mem_peak_gib > 0 && in.gpu_util_mean_pct &&
      *in.gpu_util_mean_pct < kGpuUnused)
    tags.push_back("gpu-allocated-but-not-used");
  if (node_imbalance(in.node_cpu)) tags.push_back("node-imbalance");
  if (node_saturated(in.node_cpu_mean_pct, in.cpu_mean_pct, in.cpu_mean_cores))
    tags.push_back("node-saturated");
  return tags;
}

bool node_saturated(std::optional<double> node_cpu_mean_pct, std::optional<double> cpu_mean_pct,
                    std::optional<double> cpu_mean_cores) {
  return node_cpu_mean_pct && cpu_mean_pct && *node_cpu_mean_pct >= kNodeSaturatedPct &&
         *cpu_mean_pct < kNodeSaturatedPct &&
         !(cpu_mean_cores && *cpu_mean_cores < kNodeSaturatedMinCores);
}

bool node_imbalance(const std::vector<TagInputs::NodeCpu>& nodes) {
  if (nodes.size() < 2) return false;
  std::size_t busiest = 0;
  for (std::size_t i = 1; i < nodes.size(); ++i)
    if (nodes[i].mean_pct > nodes[busiest].mean_pct) busiest = i;
  const auto& b = nodes[busiest];
  if (!(b.busy_fraction >= 0.5)) return false;
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (i != busiest && nodes[i].mean_pct < kNodeIdleShare * b.mean_pct) return true;
  return false;
}

}  // namespace sonde
