#pragma once
// Pure parsers for /proc and /sys text. Each takes the file's text and returns a typed value or an
// Error whose message says what was expected. No I/O here: tests feed captured text from
// tests/fixtures/.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde::procfs {

/// /proc/<pid>/stat. Times are in clock ticks (sysconf(_SC_CLK_TCK)); rss in pages.
struct PidStat {
  int pid = 0;
  std::string comm;  ///< without the parentheses; may contain spaces and ')'
  char state = '?';
  int ppid = 0;
  std::uint64_t minflt = 0;   ///< minor page faults of the process (field 10)
  std::uint64_t cminflt = 0;  ///< of its waited-for children (field 11): grows when it reaps one
  std::uint64_t majflt = 0;   ///< major page faults (field 12)
  std::uint64_t utime_ticks = 0;
  std::uint64_t stime_ticks = 0;
  std::uint64_t cutime_ticks = 0;  ///< waited-for children's user time
  std::uint64_t cstime_ticks = 0;  ///< waited-for children's system time
  long num_threads = 0;
  std::uint64_t starttime_ticks = 0;  ///< since boot
  std::uint64_t rss_pages = 0;        ///< approximate on Linux >= 6.2 (per-CPU batched): use statm
  /// Bottom of the stack (field 28): placed anew (randomized) by each execve, so a change tells
  /// an exec; 0 where the reader may not ptrace the process.
  std::uint64_t start_stack = 0;
  int processor = -1;  ///< CPU last run on (field 39); -1 when absent
};
Result<PidStat> parse_pid_stat(std::string_view text);

/// /proc/<pid>/statm, in pages. Exact resident size (the stat file's rss is the kernel's
/// per-CPU-batched counter read without its per-CPU deltas).
struct PidStatm {
  std::uint64_t size_pages = 0, resident_pages = 0, shared_pages = 0;
};
Result<PidStatm> parse_pid_statm(std::string_view text);

/// /proc/<pid>/smaps_rollup: the proportional set size (each resident page divided by the number
/// of processes mapping it), so that a sum over processes counts shared pages once.
struct PidSmapsRollup {
  std::uint64_t pss_bytes = 0, rss_bytes = 0;
};
/// An error when the text has no Pss line (the kernel writes an empty file for a process without
/// an address space: a zombie, a kernel thread).
Result<PidSmapsRollup> parse_pid_smaps_rollup(std::string_view text);

/// /proc/<pid>/io
struct PidIo {
  std::uint64_t rchar = 0, wchar = 0, syscr = 0, syscw = 0;
  std::uint64_t read_bytes = 0, write_bytes = 0, cancelled_write_bytes = 0;
};
Result<PidIo> parse_pid_io(std::string_view text);

/// The fields of /proc/<pid>/status that sonde uses.
struct PidStatus {
  std::string name;
  int ppid = 0;
  std::uint32_t uid_real = 0;
  std::uint32_t uid_effective = 0;
  std::vector<int> cpus_allowed;  ///< from Cpus_allowed_list; empty when absent
  /// NSpid: the pid in each PID namespace from the reader's down to the process' own (one entry
  /// when it lives in the reader's namespace; empty when absent, a kernel before 4.1).
  std::vector<int> ns_pids;
};
Result<PidStatus> parse_pid_status(std::string_view text);

/// CPU times of one line of /proc/stat, in clock ticks.
struct CpuTimes {
  std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                steal = 0, guest = 0, guest_nice = 0;
  /// Busy time: everything but idle and iowait (guest is already inside user).
  std::uint64_t busy() const { return user + nice + system + irq + softirq + steal; }
  std::uint64_t total() const { return busy() + idle + iowait; }
};
struct ProcStat {
  CpuTimes total;                 ///< the "cpu" line
  std::vector<int> cpu_ids;       ///< ids of the "cpuN" lines, in file order
  std::vector<CpuTimes> per_cpu;  ///< same order as cpu_ids
};
Result<ProcStat> parse_proc_stat(std::string_view text);
/// Each CPU's busy share (0..1) of the time between two /proc/stat reads, in the order of `ids`
/// (nullopt for a CPU not in both reads: it went offline). nullopt as a whole when the interval
/// is too short for the counters to resolve: no time passed, or a CPU present in both reads
/// whose counters did not move at all (below a clock tick: its share is unknown, not 0). The
/// caller then keeps the earlier read as its baseline, so that the next row covers both
/// intervals, and leaves this row's cells *and* their avg/min/max empty (never a subset).
std::optional<std::vector<std::optional<double>>> busy_shares(const ProcStat& prev,
                                                              const ProcStat& cur,
                                                              const std::vector<int>& ids);

/// /proc/meminfo values in bytes (the file says kB); absent fields are nullopt.
struct MemInfo {
  std::optional<std::uint64_t> total_bytes, available_bytes, free_bytes, swap_total_bytes,
      swap_free_bytes;
  /// Pages mapped by processes: anonymous and file-backed (including shmem). Their sum bounds the
  /// Pss sum of every process on the node.
  std::optional<std::uint64_t> anon_pages_bytes, mapped_bytes;
};
Result<MemInfo> parse_meminfo(std::string_view text);

/// One line of /proc/diskstats.
struct DiskStat {
  unsigned major = 0, minor = 0;
  std::string name;
  std::uint64_t reads_completed = 0, sectors_read = 0, writes_completed = 0, sectors_written = 0;
};
Result<std::vector<DiskStat>> parse_diskstats(std::string_view text);

/// One interface of /proc/net/dev.
struct NetDev {
  std::string iface;
  std::uint64_t rx_bytes = 0, rx_packets = 0, tx_bytes = 0, tx_packets = 0;
};
Result<std::vector<NetDev>> parse_net_dev(std::string_view text);

/// A CPU list such as "0-3,8,10-11" (Cpus_allowed_list, cpuset.cpus, /sys/.../online).
Result<std::vector<int>> parse_cpu_list(std::string_view text);

/// One line of /proc/<pid>/cgroup: "4:memory:/slurm/uid_1/job_7" (v1) or "0::/user.slice" (v2).
struct CgroupEntry {
  int hierarchy_id = 0;
  std::vector<std::string> controllers;  ///< empty for the v2 line; "name=systemd" kept as is
  std::string path;
};
Result<std::vector<CgroupEntry>> parse_pid_cgroup(std::string_view text);

/// A cgroup mount from /proc/self/mountinfo.
struct CgroupMount {
  bool v2 = false;
  std::vector<std::string> controllers;  ///< v1: super options naming controllers (memory, cpu…)
  std::string root;                      ///< field 4: the cgroup path mounted at mount_point
  std::string mount_point;               ///< field 5
};
Result<std::vector<CgroupMount>> parse_cgroup_mounts(std::string_view mountinfo_text);

/// cgroup v2 cpu.max ("max 100000" or "150000 100000"): CPUs allowed, nullopt when unlimited.
Result<std::optional<double>> parse_cpu_max(std::string_view text);
/// cgroup v2 memory.max or v1 memory.limit_in_bytes: bytes, nullopt for "max" or a value
/// >= 2^62 (v1's "unlimited" is a huge page-aligned number).
Result<std::optional<std::uint64_t>> parse_memory_limit(std::string_view text);

/// /proc/<pid>/limits: the soft "Max address space" in bytes, nullopt when unlimited.
Result<std::optional<std::uint64_t>> parse_limits_address_space(std::string_view text);

/// /proc/<pid>/environ (NUL-separated): the value of `key`, nullopt when absent.
std::optional<std::string> environ_value(std::string_view environ_text, std::string_view key);

/// "major minor" device numbers of whole disks: true for a /sys/block entry whose link target
/// does not go through /devices/virtual/ (loop, ram, zram, dm are virtual).
bool is_physical_block_link(std::string_view sys_block_link_target);

}  // namespace sonde::procfs
