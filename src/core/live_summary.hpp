#pragma once
// The summary of a live run: per level and column the running statistics of its ticks, and the
// end-of-run summary (JSON and text) with the bottleneck tags (core/summary.hpp).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/summary.hpp"

namespace sonde {

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
  /// `record --pid`: the watched process's command line and pid (the command is then empty).
  std::vector<std::string> target_command;
  int target_pid = 0;
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
  /// ProcessTable::json of the run's processes (null: not kept, e.g. no process level).
  nlohmann::json processes;
  /// Phases::json of the run's marks (null: no mark, or not `sonde run`).
  nlohmann::json phases;
};

/// The summary as JSON (keys: command, exit_status, wall_s, user_cpu_s, system_cpu_s,
/// cpu_mean_cores, cpu_peak_cores, memory_peak_gib, memory_limit_gib, read_bytes,
/// written_bytes, net_sent_bytes, net_recv_bytes, tags, level, run_dir, ticks; GPUs: num_gpus,
/// gpu_name, gpu_memory_gib, gpus_used, gpu_util_mean, gpu_band_mean, gpu_mem_peak_gib,
/// gpu_power_mean_w, gpu_energy_j; processes (RunOutcome::processes, with cpu_s_outside: the
/// CPU time of the level that no listed process holds); energy collector: energy_j (over
/// NodeInfo::energy.counted), energy_kwh, co2_g, carbon_intensity_g_per_kwh, energy_by_domain_j,
/// energy_node_j).
nlohmann::json summary_json(const Engine& engine, const RunStats& stats, const RunOutcome& outcome);

/// The text of a summary (summary_json), for a terminal.
std::string summary_text(const nlohmann::json& summary);

}  // namespace sonde
