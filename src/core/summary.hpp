#pragma once
// What the summaries share (the live one, core/live_summary.hpp, and that of a stored run,
// core/stored_summary.hpp): running statistics of a column (constant memory, whatever the run's
// length), the bottleneck tags and their rules, and bytes as text.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sonde {

/// Statistics of one column: count of measured values, sum, min, max, and the time integral
/// Σ value·dt (each value covers the interval that ends at its tick). A value that is not finite
/// is not measured; a dt that is not finite adds nothing to the integral.
struct ColumnStats {
  std::uint64_t count = 0;
  double sum = 0, min = 0, max = 0, integral = 0;
  double span = 0;  ///< Σ dt of the measured values
  void add(double v, double dt);
  std::optional<double> mean() const {
    return count ? std::optional<double>(sum / static_cast<double>(count)) : std::nullopt;
  }
};

/// What the bottleneck tags are decided from (one level). Absent figures give no tag.
struct TagInputs {
  std::optional<double> cpu_mean_pct;    ///< mean cpu_util_avg
  std::optional<double> cpu_mean_cores;  ///< the same in cores (unset where the count is unknown)
  /// The node's mean cpu_util_avg (system level) beside a lower level's; unset at the system level.
  std::optional<double> node_cpu_mean_pct;
  std::optional<double> memory_peak_gib;    ///< peak `memory`
  std::optional<double> memory_limit_gib;   ///< the level's memory limit
  std::optional<double> gpu_util_mean_pct;  ///< mean utilisation of the GPUs the level used
  std::optional<double> gpu_mem_peak_gib;   ///< peak memory on one GPU
  std::optional<double> gpu_memory_gib;     ///< memory of one GPU (node info)
  /// Multi-node runs: per node, its mean cpu_util_avg (percent of its CPUs) and the fraction of
  /// its ticks above kNodeBusyPct; empty for a single node.
  struct NodeCpu {
    double mean_pct = 0, busy_fraction = 0;
  };
  std::vector<NodeCpu> node_cpu;
};
/// A node is busy above this CPU utilisation (percent of its CPUs) for the node-imbalance tag.
inline constexpr double kNodeBusyPct = 50;
/// node-imbalance: one node idle while others are busy. The busiest node (highest mean) was
/// above kNodeBusyPct for at least half of its ticks, and some other node's mean is below
/// kNodeIdleShare of the busiest node's.
inline constexpr double kNodeIdleShare = 0.25;
/// Whether `nodes` (TagInputs::node_cpu) are imbalanced (the rule above); false for < 2 nodes.
bool node_imbalance(const std::vector<TagInputs::NodeCpu>& nodes);
/// node-saturated: the node's CPUs were busy (the system level's mean at or above this percent of
/// them) while the level got less than this percent of the CPUs available to it: other processes
/// took what it could have used.
inline constexpr double kNodeSaturatedPct = 90;
/// ... and the level used at least this many cores on average: a program that waited (`sleep`,
/// a server between requests, a job blocked on I/O) was not held back by a busy node, and telling
/// its user "your program got 0.00 of 2 cores" would send them after the wrong cause.
inline constexpr double kNodeSaturatedMinCores = 0.05;
/// The rule above; `cpu_mean_cores` unset (the level's CPU count unknown) skips the floor.
bool node_saturated(std::optional<double> node_cpu_mean_pct, std::optional<double> cpu_mean_pct,
                    std::optional<double> cpu_mean_cores);
/// The tags, in this order: cpu-bound (mean CPU >= 70 % of the available CPUs), memory-bound
/// (peak >= 80 % of the limit), gpu-util-bound (mean >= 70 %), gpu-memory-bound (peak on one GPU
/// >= 90 % of its memory), gpu-allocated-but-not-used (GPU memory held, mean utilisation < 10 %),
/// node-imbalance (multi-node runs: node_imbalance of TagInputs::node_cpu), node-saturated
/// (node_saturated).
/// The one rule for `sonde run`'s summary, `sonde report` and the Jupyter reports.
std::vector<std::string> bottleneck_tags(const TagInputs& in);

/// Bytes as the summaries show them: "512 B", "1.5 GiB" (binary units up to TiB).
std::string bytes_text(double bytes);

}  // namespace sonde
