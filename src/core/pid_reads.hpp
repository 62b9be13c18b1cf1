#pragma once
// /proc read on demand, outside the levels' scan, for the views of other processes than the
// levels' (sonde status/gpustat, sonde serve --per-user/--per-job). Part of the ProcScanner's API
// (implemented in proc_scanner.cpp, whose scan() lists /proc with list_pids): the same listing and
// the same parsers, so /proc is read in one place.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sonde {

/// One pid as read by read_pid.
struct PidReading {
  std::uint64_t starttime_ticks = 0;
  std::uint64_t cpu_ticks = 0;  ///< utime + stime
  std::uint64_t rss_bytes = 0;  ///< statm's resident (exact), else stat's rss
  int ppid = 0;
  std::uint64_t cminflt = 0;  ///< waited-for children's minor faults: grows when it reaps one
  std::string comm;
  std::uint64_t start_stack = 0;  ///< stat's startstack: changes on exec (see procfs::PidStat)
  char state = '?';               ///< stat's state ('R' running, 'Z' zombie, ...)
  long num_threads = 0;
};

/// The pids under `proc_root` (replaces `out`'s contents).
void list_pids(const std::string& proc_root, std::vector<int>& out);
/// stat (and statm, for the exact resident size) of one pid; nullopt when it is gone.
std::optional<PidReading> read_pid(const std::string& proc_root, int pid);
/// The real uid in /proc/<pid>/status; nullopt when it cannot be read.
std::optional<std::uint32_t> read_pid_uid(const std::string& proc_root, int pid);

}  // namespace sonde
