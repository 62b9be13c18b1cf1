#pragma once
// The summary of a stored run (core/stored_run.hpp): the same keys and tag rules as the live
// summary (core/summary.hpp), per level and per node of a multi-node run.
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/stored_run.hpp"
#include "core/summary.hpp"

namespace sonde {

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
/// (percent, limit 100), `gpu_mem` (GiB), all over the GPUs the level used (where it held memory;
/// at the system level every GPU): utilisation and bandwidth their mean per row, memory the
/// largest on one GPU per row (limit one GPU's memory); a level that used no GPU has no GPU
/// group. The level's `gpus_used` counts them; the top level adds gpus_used, gpu_util_mean,
/// gpu_band_mean and gpu_mem_peak_gib of the main level, as summary_json.
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

/// A multi-node run's per-node lines for a terminal (summarize_run's `nodes` and `node_level`:
/// name, status, rows, CPU mean/peak of the node's CPUs, memory peak and limit, clock offset,
/// reason), under a heading; "" for a single node. For `sonde runs show` and the end-of-run
/// summary of a multi-node head.
std::string summary_nodes_text(const nlohmann::json& summary);

}  // namespace sonde
