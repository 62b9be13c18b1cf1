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

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "core/pss_rules.hpp"
#include "gpu/gpu.hpp"
#include "views/status_hooks.hpp"
#include "views/top_model.hpp"

namespace sonde::top {

struct CollectOptions {
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::size_t history = 120;  ///< GPU utilisation samples kept per GPU (the sparkline)
  /// `/proc/<pid>/stat` files kept open across refreshes (one per process, read with pread);
  /// beyond that many, a process's stat is opened and closed at each refresh. `sonde top` sets it
  /// from the open-file limit (open_file_budget).
  std::size_t keep_open = 256;
};

/// What decides, at each refresh, whether a process's costlier files are read again: its stat
/// figures at the previous refresh and what statm, smaps_rollup and io gave at their last read.
/// The functions below are pure (unit-tested); Collector keeps one per process.
struct ReadMarks {
  // stat at the previous refresh
  std::uint64_t cpu_ticks = 0, faults = 0, rss_pages = 0;
  // statm (exact resident size; `anon_bytes`: less its file-backed and shmem pages)
  bool statm_valid = false;
  std::uint64_t rss_bytes = 0, anon_bytes = 0;
  // smaps_rollup: the Pss and what it was read against (`pss.at`: the refresh)
  pss::Mark pss;
};
/// stat as read at this refresh (what the decisions compare).
struct StatNow {
  std::uint64_t cpu_ticks = 0, faults = 0, rss_pages = 0;
  char state = '?';
};
/// Refreshes between reads of an idle process's Pss when it has more than pss::kSharedFew of
/// file-backed and shmem pages resident (what other processes map or unmap of them changes its
/// share); pss::kFewSharedEvery when it has less (core/pss_rules.hpp).
constexpr std::uint64_t kPssSharedEvery = 8;
/// Refreshes between reads of an idle process's statm and I/O counters.
constexpr std::uint64_t kIoEvery = 8;
constexpr std::uint64_t kStatmEvery = 32;
/// Whether `pid`'s turn for a periodic read comes at `refresh` (one `every`-th of the processes
/// at each refresh).
bool periodic_turn(int pid, std::uint64_t refresh, std::uint64_t every);
/// The process touched its memory or ran since the previous refresh.
bool stat_moved(const ReadMarks& m, const StatNow& st);
/// statm is read when the process moved, before a periodic Pss read, and every kStatmEvery.
bool statm_due(const ReadMarks& m, const StatNow& st, int pid, std::uint64_t refresh);
/// smaps_rollup is read (after statm, against its figures): at first; when the memory moved
/// (faults, exact resident size) and one refresh per pss::kUnitBytes resident passed; when stale
/// (a child came or went) and an eighth of that passed (pss::due_for_change); on its periodic turn
/// (kPssSharedEvery or pss::kFewSharedEvery) once twice that passed.
bool pss_due(const ReadMarks& m, std::uint64_t faults, int pid, std::uint64_t refresh);
/// Between reads: the last Pss plus the anonymous resident memory gained or lost since (its own),
/// within [0, resident size].
std::uint64_t pss_estimate(const ReadMarks& m);
/// /proc/<pid>/io is read at first, when the process ran (CPU ticks, page faults) or waits on
/// I/O (state D), and every kIoEvery refreshes.
bool io_due(const ReadMarks& m, const StatNow& st, bool io_known, int pid, std::uint64_t refresh);

class Collector {
 public:
  /// `hooks` should be configured with cpu_interval_s 0 (top measures CPU itself).
  Collector(gpu::Gpus& gpus, status::StatusHooks& hooks, CollectOptions options);
  /// One refresh.
  Snapshot collect();
  /// `/proc/<pid>/stat` files held open now.
  std::size_t files_kept_open() const { return fds_open_; }

 private:
  struct Known {
    std::uint64_t seen = 0;  ///< the refresh that last listed it
    UniqueFd stat_fd;        ///< its stat, kept open (pread at each refresh)
    std::uint64_t starttime_ticks = 0;
    std::uint64_t exec_mark = 0;  ///< stat's startstack: changes on exec
    int ppid = 0;
    std::string comm;
    std::uint32_t uid = 0;
    std::string user, job, container, command;
    std::vector<std::string> argv;  ///< the command line (for the status query's GPU processes)
    int ns_pid = 0;
    ReadMarks marks;
    std::optional<procfs::PidIo> io;
    double io_time = 0;  ///< when `io` was read (monotonic seconds)
    bool io_denied = false, pss_denied = false;
  };
  void learn(int pid, const std::string& dir, Known& k);
  /// The status plugins' fields of every process (host_processes, ABI 1.2).
  void add_plugin_fields(status::StatusData& data, std::vector<ProcRow>& procs);
  /// Reads `<pid>/<file>` (opened for this read) into buf_; bytes read or -errno.
  long read_pid_file(int pid, const char* file);
  void mark_pss_stale(int pid);

  gpu::Gpus& gpus_;
  status::StatusHooks& hooks_;
  CollectOptions options_;
  std::unordered_map<int, Known> known_;
  std::vector<int> listing_;
  UniqueFd proc_fd_;  ///< options_.proc_root, for openat
  std::string buf_;   ///< what the last pid file read gave
  std::size_t fds_open_ = 0;
  double prev_time_ = -1;
  std::uint64_t refresh_ = 0;
  std::optional<procfs::ProcStat> prev_stat_;
  std::optional<std::pair<double, double>> prev_net_;   ///< rx, tx bytes
  std::optional<std::pair<double, double>> prev_disk_;  ///< read, written bytes
  std::vector<std::string> disks_;                      ///< whole physical disks
  bool slurm_cgroups_ = false;
  std::map<std::string, std::deque<double>> history_;  ///< per GPU (uuid, else index)
  double clk_tck_;
  std::uint64_t page_size_ = 4096;
};

}  // namespace sonde::top
