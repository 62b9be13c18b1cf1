#pragma once
// One scan of /proc per tick. Builds the pid set of each level and a per-pid sample for the pids
// that belong to a non-system level. Keeps /proc/<pid>/{stat,io} open across ticks and re-reads
// them with pread at offset 0; reads a pid's status/environ only once, when it first appears.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/cgroup.hpp"
#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/node_info.hpp"
#include "core/procfs.hpp"

namespace sonde {

/// What the collectors need from the scan (the union over enabled collectors).
struct ScanNeeds {
  bool io = false;       ///< /proc/<pid>/io for level members
  bool threads = false;  ///< per-thread CPU placement of busy multi-threaded members
  bool pss = false;      ///< /proc/<pid>/smaps_rollup (Pss) for level members
};

/// CPU time of one pid spent on one CPU during the last interval.
struct CpuShare {
  int cpu = -1;
  double seconds = 0;
};

/// One pid of a non-system level, as seen at this tick.
///
/// Attribution is exact by construction: a pid's time and I/O count from when sonde first saw it
/// (or from its start, for pids born while sonde watches, and for the command `sonde run`
/// started), and a reaped child's life reaches its parent's cumulative counters (cutime/cstime,
/// and /proc/<pid>/io) only once: what sonde already knew of the child is subtracted.
struct PidSample {
  int pid = 0;
  int ppid = 0;
  std::uint32_t uid = 0;
  std::uint64_t starttime_ticks = 0;
  /// The command name (field 2 of stat), NUL-terminated: its own copy, at most 15 bytes as the
  /// kernel keeps it, so that a sample outlives the scan that made it (a late plugin call).
  char comm_buf[16] = {};
  char state = '?';              ///< field 3 of stat ('Z': a zombie, not yet reaped)
  double cpu_s = 0;              ///< utime + stime, seconds
  double child_cpu_s = 0;        ///< cutime + cstime (waited-for children), seconds
  double cpu_delta_s = 0;        ///< own CPU since the previous tick (whole life if born since)
  double child_cpu_delta_s = 0;  ///< growth of child_cpu_s since the previous tick
  /// Growth of cminflt since the previous tick: the reaped children's fault counts, which tell
  /// which vanished children this pid reaped (see VanishedPid).
  std::uint64_t child_faults_delta = 0;
  /// CPU of children reaped in this interval that no earlier tick counted: child_cpu_delta_s less
  /// what sonde already knew of the reaped children (their last-read totals, or their totals when
  /// first seen). Never negative.
  double reaped_cpu_s = 0;
  std::uint64_t rss_bytes = 0;  ///< resident set, exact (/proc/<pid>/statm)
  /// Proportional set size (/proc/<pid>/smaps_rollup): shared pages divided among the processes
  /// mapping them, so that a sum over processes counts them once. rss_bytes when smaps_rollup is
  /// not read (ScanNeeds::pss unset) or not readable (pss_from_rss).
  std::uint64_t pss_bytes = 0;
  bool pss_from_rss = false;  ///< smaps_rollup was not readable: pss_bytes is rss_bytes
  bool pss_denied = false;    ///< smaps_rollup is not readable by sonde (EACCES/EPERM)
  bool io_valid = false;      ///< /proc/<pid>/io could be read
  bool io_denied = false;     ///< /proc/<pid>/io is not readable by sonde (EACCES/EPERM)
  procfs::PidIo io;           ///< cumulative counters (including reaped children's)
  procfs::PidIo io_delta;     ///< growth since the previous tick (whole life if born since)
  /// What sonde already counted of the children reaped in this interval (their last-read I/O):
  /// io_delta − io_reaped_known is the level's new I/O of this pid. May run ahead of io_delta by
  /// one tick (the reap seen in stat before io): consumers keep their sums monotonic.
  procfs::PidIo io_reaped_known;
  int processor = -1;
  long num_threads = 0;
  std::uint8_t level_mask = 0;                   ///< bit (1 << level_index) per non-system level
  std::uint32_t share_begin = 0, share_end = 0;  ///< own and reaped CPU in ProcSnapshot::shares
  bool in(Level l) const { return (level_mask >> level_index(l)) & 1u; }
  std::string_view comm() const { return comm_buf; }
  const char* comm_c_str() const { return comm_buf; }
  /// Copies `name`, cut to 15 bytes (a longer one only comes from a plugin protocol peer).
  void set_comm(std::string_view name) {
    const std::size_t n = std::min(name.size(), sizeof comm_buf - 1);
    name.copy(comm_buf, n);
    comm_buf[n] = '\0';
  }
};

/// A pid that is gone and whose reaping parent's counters grew at this tick by at least what was
/// known of it (matched by the parent's cminflt growth: exact, and never zero for a process that
/// ran). Its last-known totals are subtracted from the parent's growth.
struct VanishedPid {
  int pid = 0;
  int ppid = 0;            ///< the member whose counters received it
  double known_cpu_s = 0;  ///< cpu_s + child_cpu_s when last read (0 if born unseen)
  std::uint64_t known_faults = 0;
  bool io_known = false;
  procfs::PidIo known_io;
  std::uint8_t level_mask = 0;  ///< levels it was a member of (0: not a member)
};

/// A level's cgroup account over one interval (ProcScanner::set_level_cgroup): the kernel's exact
/// figures, which the per-process reads only split (the cpu collector) or stand in for.
struct CgroupDelta {
  bool valid = false;                         ///< the group's CPU account was read at both ends
  double cpu_s = 0;                           ///< CPU time of every member in the interval
  std::vector<double> cpu_s_by_id;            ///< the same per CPU id (v1); empty: the total only
  std::optional<std::uint64_t> memory_bytes;  ///< mapped memory now (cgroup::Reading)
};

struct ProcSnapshot {
  std::vector<PidSample> pids;                                 ///< members of non-system levels
  std::array<std::vector<std::uint32_t>, kNumLevels> members;  ///< indices into pids per level
  std::vector<VanishedPid> vanished;
  std::vector<CpuShare> shares;  ///< see PidSample::share_begin
  /// Per level: CPU time of processes sonde reaped after the previous tick (ProcScanner::
  /// reap_own_zombies) that their clock-tick counters had lost, where they ran last.
  std::array<std::vector<CpuShare>, kNumLevels> reaped_late;
  std::size_t total_pids = 0;  ///< every pid on the node
  bool discovered = true;      ///< /proc was listed in this scan (see set_discover_every)
  bool target_alive = false;
  /// Pids whose files could not be kept open (open-file limit) and were opened per tick.
  std::size_t reopened_per_tick = 0;
  /// smaps_rollup files read in this scan (the rest kept their last Pss), for the bench.
  std::size_t pss_reads = 0;
  /// Per level: its cgroup's account over the interval (valid only for a level with a cgroup).
  std::array<CgroupDelta, kNumLevels> cgroup;
};

class ProcScanner {
 public:
  ProcScanner(Roots roots, TargetInfo target, std::array<bool, kNumLevels> active, ScanNeeds needs);
  ~ProcScanner();
  ProcScanner(const ProcScanner&) = delete;
  ProcScanner& operator=(const ProcScanner&) = delete;

  /// Changes the root of the process level (e.g. after `sonde run` spawned its child).
  void set_target_pid(int pid);
  /// Pids started at or after this CLOCK_BOOTTIME instant count their whole life, also at the
  /// first scan (`sonde run`: everything the command did is in scope). Default: none.
  void set_count_from(double boottime_s);
  /// `sonde run` as the child subreaper of its command: orphans of the tree are re-parented to
  /// `pid` (sonde) and stay in the tree, except the pids `is_helper` names (plugin children).
  void set_adopter(int pid, std::function<bool(int)> is_helper);
  /// The target (sonde's child, `sonde run`) is reaped after the next scan that reads it as a
  /// zombie, like the adopted orphans (see reap_own_zombies); its status is then target_reaped().
  void set_reap_target(bool on) { reap_target_ = on; }
  /// `level`'s figures come from `group` (the cgroup `sonde run` made for its command): each scan
  /// reads its account, the interval's delta from `baseline` (read when the group was empty) or
  /// the previous scan. The level's members are still found in /proc (they split the total).
  void set_level_cgroup(Level level, cgroup::Group group, cgroup::Reading baseline);
  /// The level's cgroup (version 0: none) and its last reading.
  const cgroup::Group& level_cgroup(Level l) const { return cgroups_[level_index(l)].group; }
  const cgroup::Reading& level_cgroup_reading(Level l) const {
    return cgroups_[level_index(l)].last;
  }
  /// Why the level's cgroup stopped being its source (a member left it), or "": the level's
  /// figures come from /proc from the scan that saw it.
  const std::string& level_cgroup_left(Level l) const { return cgroups_[level_index(l)].left; }
  /// Whether `l`'s figures still come from its cgroup.
  bool level_cgroup_active(Level l) const {
    return cgroups_[level_index(l)].group && cgroups_[level_index(l)].left.empty();
  }
  /// Whether the slurm level may take its figures from the job's cgroup (default: yes;
  /// `--no-cgroup` turns it off). Where the node puts jobs into cgroups, the first scan that finds
  /// a member whose job comes from its cgroup sets the job's `job_<id>` cgroup as the level's
  /// source (set_level_cgroup); the figures of that first interval still come from /proc.
  void set_job_cgroup_allowed(bool on) { job_cgroup_allowed_ = on; }
  /// Why the slurm level's figures do not come from the job's cgroup ("" while they do, or while
  /// no member has been seen yet).
  const std::string& job_cgroup_not_used() const { return job_cgroup_why_not_; }
  /// What is taken off the level's cgroup account because it is no member's ("" when nothing):
  /// sonde's own time, when an agent runs inside the job's cgroup (see find_job_cgroup).
  const std::string& level_cgroup_minus(Level l) const {
    return cgroups_[level_index(l)].minus_what;
  }
  /// Whether the level's CPU per core comes from its cgroup (v1 cpuacct.usage_percpu, less the
  /// agent's own group's), not from the members' reads splitting the group's total.
  bool level_cgroup_per_cpu(Level l) const {
    const LevelCgroup& c = cgroups_[level_index(l)];
    return c.group.version == 1 && c.minus != LevelCgroup::Minus::self;
  }
  /// After the last scan, once the command is reaped: reads each active cgroup again; what it ran
  /// since that scan (the command's exit) is in no row, and the summary counts it.
  void read_cgroup_tail();
  double cgroup_tail_s(Level l) const { return cgroups_[level_index(l)].tail_s; }
  /// Reaps (wait4) the zombies whose parent is sonde that the last scan read: the adopted orphans
  /// and, after set_reap_target, the target. Called once the tick's collectors are done (they
  /// still see the zombies). What their clock-tick counters lost (rusage µs − the last read) goes
  /// to the next snapshot's reaped_late.
  void reap_own_zombies();
  /// Time reaped_own_zombies found that no snapshot holds yet (the run ended): the summary's.
  double reaped_late_s(Level l) const { return late_s_[level_index(l)]; }
  /// How the target ended, when a scan reaped it: wait status and wait4's rusage (µs).
  struct TargetExit {
    int wstatus = 0;
    double user_cpu_s = 0, system_cpu_s = 0;
    /// ru_maxrss: the largest resident set of the command or of one descendant it waited for.
    double max_rss_bytes = 0;
  };
  const std::optional<TargetExit>& target_reaped() const { return target_reaped_; }
  /// Upper bound on files kept open; beyond it files are opened and closed per tick.
  void set_fd_budget(std::size_t n) { fd_budget_ = n; }
  std::size_t fds_open() const { return fds_open_; }
  /// Lists /proc (finds new and gone pids, re-evaluates membership) only every n-th scan; the
  /// scans in between re-read the known members. The engine raises n when a tick does not fit
  /// its interval. Pids that exit in between are still seen (their reads fail).
  void set_discover_every(unsigned n) { discover_every_ = n == 0 ? 1 : n; }
  unsigned discover_every() const { return discover_every_; }

  /// Scans /proc once. `boottime_s` is CLOCK_BOOTTIME now, used to tell pids born since the
  /// previous scan (whose whole life counts) from pids first seen for another reason.
  const ProcSnapshot& scan(double boottime_s);
  const ProcSnapshot& last() const { return *snap_; }
  /// The last snapshot, kept alive for a collector that may still read it after the next scan
  /// (a plugin that overran its deadline); the next scan then fills a fresh one.
  std::shared_ptr<const ProcSnapshot> shared() const { return snap_; }
  /// A call that holds the last snapshot was abandoned (core/watchdog): it may read it at any
  /// time from now, on a thread this one never synchronises with again, so the next scan fills a
  /// fresh one whatever use_count() says (a relaxed read that orders nothing: a data race under
  /// TSan, python_monitor, when the abandoned call let go of it between two scans).
  void snapshot_abandoned() { fresh_next_ = true; }

 private:
  struct Entry;
  bool discover(int pid, Entry& e);
  bool refresh(int pid, Entry& e, double prev_boottime_s, PidSample& out);
  void read_threads(int pid, Entry& e, PidSample& s, std::uint64_t cpu_ticks);
  void place_reaped();
  struct OwnZombie {
    int pid = 0;
    double known_cpu_s = 0;  ///< cpu_s + child_cpu_s at the last read
    std::uint8_t level_mask = 0;
    std::vector<CpuShare> last_cpus;
  };
  std::vector<OwnZombie> own_zombies_;
  struct LevelCgroup {
    cgroup::Group group;
    cgroup::Reading last;
    std::string left;   ///< set once a member is seen outside the group
    double tail_s = 0;  ///< read_cgroup_tail
    /// Time in the group that is no member's: an agent inside the job's cgroup. `group`: the
    /// agent's own cgroup below the job's, which holds no member of the level (its account,
    /// per CPU on v1); `self`: sonde's own CPU time (getrusage, µs), read with the group's.
    enum class Minus { none, group, self } minus = Minus::none;
    cgroup::Group minus_group;
    cgroup::Reading minus_last;
    double self_last_s = 0;
    std::string minus_what;  ///< for the manifest
  };
  /// The level's cgroup account and what it leaves out, read now: the CPU delta since `c.last`
  /// (and its minus) into `d`, the readings kept for the next. False when a read failed (the
  /// last good baselines are kept: the next good read covers both intervals).
  bool read_level_cgroup(LevelCgroup& c, CgroupDelta& d) const;
  /// Whether the cgroup directory `dir` (and those below it) holds only sonde and processes that
  /// are no member of the slurm level.
  bool holds_no_member(const std::string& dir) const;
  /// A process in the cgroup directory `dir` or below it, outside `skip` (the agent's own cgroup,
  /// whose account is taken off; "" for none), that is neither sonde (nor its helper children)
  /// nor a member of the slurm level (a multi-node head, its srun): its time would be counted in
  /// the level. 0 when there is none.
  int foreign_in_job(const std::string& dir, const std::string& skip) const;
  std::array<LevelCgroup, kNumLevels> cgroups_;
  void read_cgroups();
  /// The slurm level's job cgroup, looked for until found or found unusable (see
  /// set_job_cgroup_allowed).
  void find_job_cgroup();
  bool job_cgroup_allowed_ = true;
  bool job_cgroup_done_ = false;
  std::string job_cgroup_why_not_;
  /// Whether `pid`, alive, is in a cgroup outside `g` and its descendants.
  bool left_group(int pid, const cgroup::Group& g) const;
  std::array<std::vector<CpuShare>, kNumLevels> late_;
  std::array<double, kNumLevels> late_s_{};
  /// The next read of `pid` re-reads its Pss (a child of it appeared or went).
  void mark_pss_stale(int pid);
  /// Closes the files kept open for `e`.
  void close_files(Entry& e);
  /// `e` is gone (reaped or vanished) but stays listed until the next listing misses it: reported
  /// as reaped, no member, no previous read, its files closed.
  void mark_gone(Entry& e);

  Roots roots_;
  TargetInfo target_;
  std::array<bool, kNumLevels> active_;
  ScanNeeds needs_;
  bool slurm_cgroups_ = false;  ///< the node puts Slurm jobs into cgroups (node_has_slurm_cgroups)
  std::unordered_map<int, std::unique_ptr<Entry>> entries_;
  /// Vanished pids not yet matched with their parent's counter growth (oldest first).
  struct Pending {
    VanishedPid pid;
    std::vector<CpuShare> last_cpus;  ///< where it ran last (weights), for its unseen tail
    double last_delta_s = 0;          ///< its CPU in the interval before it vanished
    unsigned age = 0;
  };
  Pending pending_of(int pid, const Entry& e) const;
  /// Matched this tick, per parent pid (for the placement of their tails).
  std::unordered_map<int, std::vector<Pending>> matched_;
  std::vector<Pending> pending_;
  void match_vanished();
  std::vector<int> listing_;
  std::string buf_;
  std::shared_ptr<ProcSnapshot> snap_ = std::make_shared<ProcSnapshot>();
  bool fresh_next_ = false;  ///< snapshot_abandoned
  std::uint64_t generation_ = 0;
  double prev_boottime_s_ = -1;
  double clk_tck_;
  std::uint64_t page_size_;
  std::size_t fd_budget_ = 1024;
  std::size_t fds_open_ = 0;
  unsigned discover_every_ = 1;
  std::size_t total_pids_ = 0;
  UniqueFd proc_dir_fd_;
  std::uint64_t count_from_ticks_ = 0;  ///< 0: none
  int adopter_ = 0;
  std::function<bool(int)> is_helper_;
  bool reap_target_ = false;
  std::optional<TargetExit> target_reaped_;
};

}  // namespace sonde
