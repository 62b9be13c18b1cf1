#pragma once
// Running statistics of a run (constant memory, whatever its length), the end-of-run summary
// with bottleneck tags, and the summary of a stored run (the same keys and tag rules).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/stored_run.hpp"

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

/// Per level and column, the ColumnStats of a live run.
class RunStats {
 public:
  explicit RunStats(const Engine& engine);
  void add(const Engine::Tick& tick);

  using Column = ColumnStats;
  /// nullptr when the column does not exist at the level.
  const Column* find(Level level, const std::string& column) const;
  std::uint64_t ticks() const { return ticks_; }

 private:
  const Engine& engine_;
  std::array<std::vector<Column>, kNumLevels> columns_;
  std::uint64_t ticks_ = 0;
};

/// What the program did, as far as sonde knows it.
struct RunOutcome {
  std::vector<std::string> command;
  std::optional<int> exit_status;  ///< 128+N when killed by signal N
  double wall_s = 0;
  std::optional<double> user_cpu_s, system_cpu_s;  ///< from wait4, when sonde started the program
  /// wait4's ru_maxrss: the largest resident set of the program or of one process it waited for
  /// (the kernel's peak, not sampled; not the tree's sum).
  std::optional<double> max_rss_bytes;
  /// The peak charge of the cgroup `sonde run` made for the program (v1 max_usage_in_bytes, v2
  /// memory.peak: page cache included), when it made one with the memory controller.
  std::optional<double> cgroup_memory_peak_bytes;
  std::string run_dir;
};

/// What the bottleneck tags are decided from (one level). Absent figures give no tag.
struct TagInputs {
  std::optional<double> cpu_mean_pct;       ///< mean cpu_util_avg
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
/// The tags, in this order: cpu-bound (mean CPU >= 70 % of the available CPUs), memory-bound
/// (peak >= 80 % of the limit), gpu-util-bound (mean >= 70 %), gpu-memory-bound (peak on one GPU
/// >= 90 % of its memory), gpu-allocated-but-not-used (GPU memory held, mean utilisation < 10 %),
/// node-imbalance (multi-node runs: node_imbalance of TagInputs::node_cpu).
/// The one rule for `sonde run`'s summary, `sonde report` and the Jupyter reports.
std::vector<std::string> bottleneck_tags(const TagInputs& in);

/// The summary as JSON (keys: command, exit_status, wall_s, user_cpu_s, system_cpu_s,
/// cpu_mean_cores, cpu_peak_cores, memory_peak_gib, memory_limit_gib, read_bytes,
/// written_bytes, net_sent_bytes, net_recv_bytes, tags, level, run_dir, ticks; GPUs: num_gpus,
/// gpu_name, gpu_memory_gib, gpus_used, gpu_util_mean, gpu_band_mean, gpu_mem_peak_gib,
/// gpu_power_mean_w, gpu_energy_j; energy collector: energy_j (over NodeInfo::energy.counted),
/// energy_kwh, co2_g, carbon_intensity_g_per_kwh, energy_by_domain_j, energy_node_j).
nlohmann::json summary_json(const Engine& engine, const RunStats& stats, const RunOutcome& outcome);

/// Bytes as the summaries show them: "512 B", "1.5 GiB" (binary units up to TiB).
std::string bytes_text(double bytes);

/// What 100 % CPU means at `level` in a manifest's node_info: cpus_per_level.<level>.num_cpus,
/// else (older runs) num_system_cpus for the node and num_cpus for the other levels; NaN if none.
double level_num_cpus(const nlohmann::json& node, Level level);

/// The node_info that the figures of `run` are relative to: the manifest's, except for a
/// multi-node run, whose aggregate levels (slurm, system: manifest multinode.aggregate_levels)
/// count the CPUs, memory limits and GPUs of all its nodes (cpus_per_level.<level>.num_cpus and
/// memory_limits.<level> summed where every node has them, num_gpus summed); its process and
/// user levels stay the head node's.
nlohmann::json run_node_info(const RunData& run);

/// The summary of a stored run, or of the rows whose wallclock lies in `window` (a notebook
/// cell): per level and per metric group (CPU, memory, GPU utilisation, GPU memory, ...) the
/// mean/min/max and the limit, plus the bottleneck tags, with the same keys and tag rules as
/// summary_json where they overlap.
///
/// Keys: the top-level keys of summary_json for its level (process, else system): command,
/// exit_status, wall_s, level, ticks, num_cpus, cpu_mean_cores, cpu_peak_cores, cpu_seconds,
/// memory_peak_gib, memory_limit_gib, read_bytes, written_bytes, net_sent_bytes,
/// net_recv_bytes, tags; plus host, start_wallclock, end_wallclock, window ([from, to] or null)
/// and `levels`: {level: {ticks, duration_s, num_cpus, groups: {group: {mean, min, max, limit,
/// unit}}, totals: {read_bytes, written_bytes, read_ops, write_ops, net_sent_bytes,
/// net_recv_bytes, net_sent_packets, net_recv_packets}}}. Groups: `cpu` (cpu_util_avg, percent
/// of the level's CPUs, limit 100), `cpu_cores` (the same in cores, limit num_cpus), `memory`
/// (GiB, limit the level's memory limit), and when gpu_* columns exist `gpu_util`, `gpu_band`
/// (percent, limit 100), `gpu_mem` (GiB per device on average, limit one device's memory).
/// A statistic without a measured value is null.
///
/// A multi-node run (RunData::nodes) adds `nodes`: per node {name, head, status, reason,
/// clock_offset_s, rows, first_wallclock, last_wallclock, level (the node's level summarised:
/// slurm, else system), num_cpus, cpu_mean_pct, cpu_peak_pct, cpu_mean_cores, cpu_peak_cores,
/// memory_peak_gib, memory_limit_gib, read_bytes, written_bytes, num_gpus, gpu_util_mean, tags},
/// `node_level` (the level the per-node figures come from) and, when node_imbalance says so, the
/// tag node-imbalance in `tags` and in that aggregate level's `tags`.
nlohmann::json summarize_run(const RunData& run,
                             std::optional<std::pair<double, double>> window = std::nullopt);

/// The text of a summary (summary_json), for a terminal.
std::string summary_text(const nlohmann::json& summary);

/// A multi-node run's per-node lines for a terminal (summarize_run's `nodes` and `node_level`:
/// name, status, rows, CPU mean/peak of the node's CPUs, memory peak and limit, clock offset,
/// reason), under a heading; "" for a single node. For `sonde runs show` and the end-of-run
/// summary of a multi-node head.
std::string summary_nodes_text(const nlohmann::json& summary);

}  // namespace sonde
