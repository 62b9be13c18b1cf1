#pragma once
// `sonde top`'s snapshots: every process (the ProcScanner's pid reads and the procfs parsers),
// the host's CPUs, network and disks, and one status query (GPUs, their processes, the status
// plugins' fields and lines) per refresh. Rates and CPU figures are over the time since the
// previous refresh.
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/procfs.hpp"
#include "gpu/gpu.hpp"
#include "views/status_hooks.hpp"
#include "views/top_model.hpp"

namespace sonde::top {

struct CollectOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::size_t history = 120;  ///< GPU utilisation samples kept per GPU (the sparkline)
};

class Collector {
 public:
  /// `hooks` should be configured with cpu_interval_s 0 (top measures CPU itself).
  Collector(gpu::Gpus& gpus, status::StatusHooks& hooks, CollectOptions options);
  /// One refresh.
  Snapshot collect();

 private:
  struct Known {
    std::uint64_t starttime_ticks = 0;
    std::uint64_t exec_mark = 0;  ///< stat's startstack: changes on exec
    std::string comm;
    std::uint32_t uid = 0;
    std::string user, job, container, command;
    int ns_pid = 0;
    std::uint64_t cpu_ticks = 0;
    std::optional<procfs::PidIo> io;
    double io_time = 0;                ///< when `io` was read (monotonic seconds)
    std::optional<std::uint64_t> pss;  ///< last Pss read
    std::uint64_t pss_rss = 0;         ///< the RSS when it was read
    bool io_denied = false, pss_denied = false;
  };
  /// Pss and I/O counters of a process that did not change are read again after this many
  /// refreshes (staggered by pid): 10,000 smaps_rollup walks a second cost more than the rest.
  static constexpr std::uint64_t kRereadEvery = 5;
  void learn(int pid, const std::string& dir, Known& k);
  /// The status plugins' fields of every process (host_processes, ABI 1.2).
  void add_plugin_fields(status::StatusData& data, std::vector<ProcRow>& procs);

  gpu::Gpus& gpus_;
  status::StatusHooks& hooks_;
  CollectOptions options_;
  std::unordered_map<int, Known> known_;
  std::vector<int> listing_;
  double prev_time_ = -1;
  std::uint64_t refresh_ = 0;
  std::optional<procfs::ProcStat> prev_stat_;
  std::optional<std::pair<double, double>> prev_net_;   ///< rx, tx bytes
  std::optional<std::pair<double, double>> prev_disk_;  ///< read, written bytes
  std::vector<std::string> disks_;                      ///< whole physical disks
  bool slurm_cgroups_ = false;
  std::map<std::string, std::deque<double>> history_;  ///< per GPU (uuid, else index)
  double clk_tck_;
};

}  // namespace sonde::top
