#pragma once
// What the node and the target may use: CPUs, memory limits per level, GPUs. Discovered once at
// start from /proc and /sys (through Roots) and injected into collectors that ask for node_info.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde {

struct NodeInfo {
  std::string hostname;
  std::string kernel;               ///< uname release
  int num_system_cpus = 0;          ///< cpuN lines of /proc/stat
  std::vector<int> system_cpu_ids;  ///< ids of those lines, in order
  std::vector<int> cpu_handles;     ///< CPUs the target may run on (affinity), sorted
  double num_cpus = 0;              ///< CPUs available to the target: min(affinity, cgroup quota)
  std::optional<double> cpu_quota;  ///< cgroup cpu.max / cfs quota in CPUs, when limited
  /// What 100 % CPU means per level (index: level_index): the CPUs the level's processes may run
  /// on. process: the target's affinity, capped by its cgroup quota (= cpu_handles, num_cpus);
  /// user: every CPU of the node (a user's processes may run anywhere); slurm: the job's cgroup
  /// cpuset where there is one, else the node; system: the node.
  std::array<std::vector<int>, kNumLevels> level_cpu_ids{};
  std::array<double, kNumLevels> level_num_cpus{};
  std::array<std::string, kNumLevels> level_cpus_source{};
  std::uint64_t mem_total_bytes = 0;
  /// Memory limit per level in bytes (index: level_index); MemTotal when nothing smaller applies.
  std::array<std::uint64_t, kNumLevels> memory_limit_bytes{};
  /// Where each limit came from, e.g. "cgroup v2 memory.max /sys/fs/cgroup/x", "MemTotal".
  std::array<std::string, kNumLevels> memory_limit_source{};
  // GPUs: filled by GPU discovery before collectors that inject node_info are built.
  int num_gpus = 0;
  std::string gpu_name;
  double gpu_memory_gib = 0;
  /// Energy domains (sonde.collectors.energy): entry i of energy_power_* / energy_joules_*.
  struct Energy {
    std::vector<std::string> domains;  ///< package-0, core-0, dram-0, psys, gpu-0, …
    std::vector<std::string> counted;  ///< those in the node's total (none counted twice)
    std::string method;                ///< how non-system levels get their share
    double carbon_intensity_g_per_kwh = 0;
  } energy;
};

/// What is known about the target before sampling starts.
struct TargetInfo {
  int pid = 0;                           ///< 0 when there is no target (system only)
  std::uint32_t uid = 0;                 ///< real uid of the target (or of sonde without target)
  std::optional<std::string> slurm_job;  ///< SLURM_JOB_ID from the target's environment
  /// A pid never counted at any level, nor its children: `sonde agent` itself (pid 0: none).
  int exclude_pid = 0;
  int exclude_single_pid = 0;  ///< left out of every level, its children not (a multi-node head)
};

/// Discovers node info and limits for `target` (pid 0: sonde itself is used for affinity and
/// limits). Never fails for a missing optional file: a level without a limit of its own (cgroup
/// memory.max or limit_in_bytes, RLIMIT_AS, SLURM_MEM_PER_NODE) gets MemTotal.
Result<NodeInfo> discover_node_info(const Roots& roots, const TargetInfo& target);

/// Reads the target's uid and SLURM_JOB_ID from /proc/<pid>/{status,environ}.
Result<TargetInfo> discover_target(const Roots& roots, int pid);

}  // namespace sonde
