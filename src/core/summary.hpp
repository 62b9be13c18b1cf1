#pragma once
// Running statistics of a run (constant memory, whatever its length) and the end-of-run summary
// with bottleneck tags.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"

namespace sonde {

/// Per level and column: count of measured values, sum, min, max, and the time integral
/// Σ value·dt (each value covers the interval that ends at its tick).
class RunStats {
 public:
  explicit RunStats(const Engine& engine);
  void add(const Engine::Tick& tick);

  struct Column {
    std::uint64_t count = 0;
    double sum = 0, min = 0, max = 0, integral = 0;
    std::optional<double> mean() const {
      return count ? std::optional<double>(sum / static_cast<double>(count)) : std::nullopt;
    }
  };
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
};
/// The tags, in this order: cpu-bound (mean CPU >= 70 % of the available CPUs), memory-bound
/// (peak >= 80 % of the limit), gpu-util-bound (mean >= 70 %), gpu-memory-bound (peak on one GPU
/// >= 90 % of its memory), gpu-allocated-but-not-used (GPU memory held, mean utilisation < 10 %).
/// The one rule for `sonde run`'s summary, `sonde report` and the Jupyter reports.
std::vector<std::string> bottleneck_tags(const TagInputs& in);

/// The summary as JSON (keys: command, exit_status, wall_s, user_cpu_s, system_cpu_s,
/// cpu_mean_cores, cpu_peak_cores, memory_peak_gib, memory_limit_gib, read_bytes,
/// written_bytes, net_sent_bytes, net_recv_bytes, tags, level, run_dir, ticks; GPUs: num_gpus,
/// gpu_name, gpu_memory_gib, gpus_used, gpu_util_mean, gpu_band_mean, gpu_mem_peak_gib,
/// gpu_power_mean_w, gpu_energy_j; energy collector: energy_j (over NodeInfo::energy.counted),
/// energy_kwh, co2_g, carbon_intensity_g_per_kwh, energy_by_domain_j, energy_node_j).
nlohmann::json summary_json(const Engine& engine, const RunStats& stats, const RunOutcome& outcome);

/// The same, as text for a terminal.
std::string summary_text(const nlohmann::json& summary);

}  // namespace sonde
