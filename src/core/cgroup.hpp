#pragma once
// Cgroups as sources of a level's figures: where a process's cgroup is (the chain from it up to
// its hierarchy's mounted root), the kernel's exact accounts of a cgroup (CPU in ns or µs, the
// charged memory), and the cgroup `sonde run` makes for its command where it may.
//
// A cgroup's CPU account is exact by construction: the scheduler charges every nanosecond a
// member ran, also of members that lived between two ticks, that sonde reaped, or that escaped
// the process tree (a double fork, a setsid daemon), and none of another process.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "core/result.hpp"

namespace sonde {

/// One cgroup on the path from a process's cgroup up to its hierarchy's mounted root.
struct CgroupDir {
  std::string cgroup_path;  ///< as /proc/<pid>/cgroup names it, for messages
  std::string dir;          ///< where its control files are
};

/// The cgroup of the process whose /proc/<pid>/cgroup gave `entries`, and its ancestors, leaf
/// first, in the hierarchy that `want_v2` (the unified one) or `controller` (a v1 one) selects.
/// Empty when the process is not in such a hierarchy or its cgroup lies outside every mount of it
/// (e.g. another container's subtree). Mount points under /sys are re-rooted at roots.sys.
std::vector<CgroupDir> cgroup_chain(const Roots& roots,
                                    const std::vector<procfs::CgroupEntry>& entries,
                                    const std::vector<procfs::CgroupMount>& mounts, bool want_v2,
                                    std::string_view controller);

namespace cgroup {

/// Where one cgroup's accounts are read: v1 keeps CPU (cpuacct) and memory in two hierarchies,
/// v2 both in one directory.
struct Group {
  int version = 0;         ///< 1 or 2; 0: none
  std::string path;        ///< the cgroup's path, as /proc/<pid>/cgroup names it
  std::string cpu_dir;     ///< v1: the cpuacct directory; v2: the cgroup's directory
  std::string memory_dir;  ///< v1: the memory directory ("" when not made); v2: cpu_dir
  explicit operator bool() const { return version != 0; }
};

/// One reading of a group's accounts.
struct Reading {
  std::optional<double> cpu_s;      ///< CPU time of every member, ever (cpuacct.usage, usage_usec)
  std::vector<double> cpu_s_by_id;  ///< v1: per CPU id (cpuacct.usage_percpu); v2: empty
  /// Memory the members map, shared pages once: anonymous pages and mapped file pages charged to
  /// the group (v1 total_rss + total_mapped_file; v2 anon + file_mapped).
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> memory_peak_bytes;  ///< v1 max_usage_in_bytes; v2 memory.peak
};

/// Reads the group's files (a file that cannot be read leaves its figure unset).
Reading read(const Group& g);

// Parsers of the control files (pure; unit-tested on captured text).
/// v1 cpuacct.usage or any single-number file: the number.
std::optional<std::uint64_t> parse_single(std::string_view text);
/// v1 cpuacct.usage_percpu: nanoseconds per CPU id, in seconds.
std::vector<double> parse_usage_percpu(std::string_view text);
/// A "key value" file (cpu.stat, memory.stat): the value of `key`.
std::optional<std::uint64_t> stat_value(std::string_view text, std::string_view key);
/// memory.stat: the mapped memory (see Reading::memory_bytes) of a v1 or v2 group.
std::optional<std::uint64_t> mapped_memory(std::string_view memory_stat, int version);

/// cgroup.procs: the pids it lists, one per line (a line that is not a positive number is left
/// out).
std::vector<int> parse_procs(std::string_view text);
/// The pids in `dir`/cgroup.procs, or nullopt when it cannot be read (the group is gone).
std::optional<std::vector<int>> member_pids(const std::string& dir);

/// A group's block I/O: bytes its members' bios moved to and from block devices, summed over
/// devices. Not a level's io_read/io_write (docs/accuracy.md, "I/O"): v1 counts a group's bios
/// only on a device with a throttle limit set and charges buffered writeback to the root group;
/// v2 counts a write when it is written back, not when the page is dirtied.
struct BlockIo {
  std::uint64_t read_bytes = 0;
  std::uint64_t write_bytes = 0;
};
/// v1 blkio.throttle.io_service_bytes (or its _recursive twin): the "<maj:min> Read" and
/// "<maj:min> Write" rows summed over devices; each device's "Total" row and the last line's
/// "Total" repeat them and are left out. nullopt for text of another shape.
std::optional<BlockIo> parse_blkio_service_bytes(std::string_view text);
/// v2 io.stat: rbytes and wbytes summed over the devices' lines. nullopt for text of another
/// shape.
std::optional<BlockIo> parse_io_stat(std::string_view text);

/// The cgroup `sonde run` makes for its command below sonde's own cgroup, in the cpuacct and
/// memory hierarchies (v1) or the unified one (v2). The command enters it between fork and exec
/// (SpawnOptions::cgroup_procs), so that every nanosecond it and its descendants run is charged
/// there. At the end, members still alive (a daemon the command left) go back to sonde's own
/// cgroup and the directories are removed.
class RunGroup {
 public:
  /// Makes the group `name`; an error says why it cannot (not root and no delegated subtree, no
  /// cpuacct hierarchy, a read-only cgroup fs), and the caller falls back to the /proc path.
  static Result<RunGroup> create(const Roots& roots, const std::string& name);
  RunGroup() = default;
  RunGroup(RunGroup&&) noexcept;
  RunGroup& operator=(RunGroup&&) noexcept;
  RunGroup(const RunGroup&) = delete;
  RunGroup& operator=(const RunGroup&) = delete;
  ~RunGroup();

  const Group& group() const { return group_; }
  /// Open cgroup.procs of each directory, for the child to write itself into.
  const std::vector<int>& procs_fds() const { return procs_fds_; }
  /// Removes the group (idempotent); what could not be done, or "".
  std::string remove();

 private:
  Group group_;
  std::vector<std::string> dirs_;         ///< made, in each hierarchy
  std::vector<std::string> parent_dirs_;  ///< sonde's own cgroup in the same hierarchy
  std::vector<int> procs_fds_;
};

}  // namespace cgroup
}  // namespace sonde
