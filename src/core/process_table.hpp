#pragma once
// The run's per-process table: which of the run's processes used what (CPU time, peak memory,
// I/O, lifetime, command), accumulated from the scanner's per-pid reads of the process level at
// each tick (no read of its own but one cmdline per new process). For the end-of-run summary,
// `sonde runs show` and the report.
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/proc_scanner.hpp"

namespace sonde {

class ProcessTable {
 public:
  /// `proc_root`: where cmdline files are read (tests: a fixture). `max_tracked`: processes
  /// followed one by one; later ones are only counted in the folded rest.
  explicit ProcessTable(std::string proc_root = "/proc", std::size_t max_tracked = 4096);

  /// The members of `level` in `snap`, at tick time `time_s` (seconds, the rows' `time`).
  void add(const ProcSnapshot& snap, Level level, double time_s);

  /// {"count": processes seen, "cpu_s_sum": their CPU time in all, "shown": N, "processes":
  /// [ROW...] (the `top` by CPU time, then by peak memory), "others": ROW of the rest folded (pid
  /// 0, "count") or null}. ROW: {pid, ppid, comm, command, cpu_s, memory_peak_gib (Pss: shared
  /// pages once), rss_peak_gib, read_bytes, written_bytes (block-layer bytes, as the io columns;
  /// null where /proc/<pid>/io was not readable), first_s, last_s (the first and last tick that saw
  /// it), alive (at the last tick)}.
  nlohmann::json json(std::size_t top = 10) const;

  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    int pid = 0, ppid = 0;
    std::string comm, command;
    double cpu_s = 0;
    std::uint64_t pss_peak = 0, rss_peak = 0;
    double read_bytes = 0, written_bytes = 0;
    bool io_valid = false;
    double first_s = 0, last_s = 0;
    std::uint64_t last_tick = 0;
  };
  struct Folded {
    std::size_t count = 0;
    double cpu_s = 0, read_bytes = 0, written_bytes = 0;
  };
  static nlohmann::json row(const Entry& e, bool alive);

  std::string proc_root_;
  std::size_t max_tracked_;
  std::map<std::pair<int, std::uint64_t>, Entry> entries_;  ///< by (pid, start time)
  Folded untracked_;                                        ///< processes past max_tracked
  std::set<std::pair<int, std::uint64_t>> untracked_seen_;  ///< at most 65,536 remembered
  std::uint64_t ticks_ = 0;
};

}  // namespace sonde
