#include "core/proc_scanner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/job_cgroup.hpp"
#include "core/pid_reads.hpp"
#include "core/pss_rules.hpp"
#include "core/slurm_job.hpp"

namespace sonde {

struct ProcScanner::Entry {
  std::uint64_t seen_generation = 0;
  // Fixed at discovery.
  int ppid = 0;
  int live_ppid =
      0;  ///< the parent at the last read (an orphan's is its reaper: init or a subreaper)
  std::uint32_t uid = 0;
  std::uint64_t starttime_ticks = 0;
  std::optional<std::string> slurm_job;
  std::string comm;
  bool resolved = false;   // level_mask is computed
  bool resolving = false;  // cycle guard while resolving through parents
  std::uint8_t level_mask = 0;
  // Kept open across ticks while the fd budget allows.
  UniqueFd stat_fd;
  UniqueFd statm_fd;
  UniqueFd io_fd;
  bool io_denied = false;
  // Previous tick.
  bool have_prev = false;
  std::uint64_t read_generation = 0;  // the scan of the last read
  bool count_full_life = false;       // started while sonde watches: nothing before it to leave out
  bool reported_reaped = false;       // already reported as vanished (reaped right after its read)
  std::uint64_t prev_cpu_ticks = 0;
  std::uint64_t prev_child_ticks = 0;
  std::uint64_t prev_cminflt = 0;
  // Memory: the last exact value (statm) and what tells whether it may have moved.
  bool statm_valid = false;
  std::uint64_t rss_bytes = 0;
  std::uint64_t anon_bytes = 0;  // rss_bytes less statm's shared (file-backed, shmem) pages
  std::uint64_t statm_generation = 0;
  std::uint64_t prev_faults = 0;
  std::uint64_t prev_rss_pages = 0;
  // Pss (smaps_rollup): the last value and what it was read against (`pss.at`: the scan's
  // generation). `pss.stale`: a child appeared or went, which changes how this process's shared
  // pages divide without it moving.
  pss::Mark pss;
  bool pss_denied = false;
  bool prev_io_valid = false;
  procfs::PidIo prev_io;
  // What is known of it: its totals at the last read, or when discovered (0 when born since).
  double known_cpu_s = 0;
  std::uint64_t known_faults = 0;
  bool io_known = false;
  procfs::PidIo known_io;
  std::vector<CpuShare> last_cpus;  // where its last interval's own CPU went
  double last_delta_s = 0;
  // Threads of a multi-threaded member: tid → utime+stime and CPU at the last thread read, and
  // the process's own ticks then (threads that exit leave their time in the process's total).
  struct Thread {
    int tid = 0;
    std::uint64_t ticks = 0;
    int cpu = -1;
  };
  std::vector<Thread> threads;  // sorted by tid
  std::uint64_t threads_proc_ticks = 0;
  bool threads_read = false;
};

namespace {

// An idle process's exact memory is re-read at least every this many scans. Its Pss too: what
// other processes map or unmap of the pages it shares changes its share without it moving.
constexpr std::uint64_t kStatmEvery = 8;
// (The Pss rules shared with `sonde top`: core/pss_rules.hpp.)

bool parse_pid(const char* name, int& pid) {
  const char* end = name + std::strlen(name);
  auto [p, ec] = std::from_chars(name, end, pid);
  return ec == std::errc() && p == end && pid > 0;
}

// Closes a file kept open, counted in `counter`.
void close_fd(UniqueFd& fd, std::size_t& counter) {
  if (fd) {
    fd.reset();
    --counter;
  }
}

// Reads a /proc file through an fd kept open, or opens it for this read only.
long read_proc(int dir_fd, const std::string& rel, UniqueFd& fd, bool keep, std::size_t& fds_open,
               std::string& buf) {
  if (fd) return pread_all(fd.get(), buf);
  UniqueFd f(::openat(dir_fd, rel.c_str(), O_RDONLY | O_CLOEXEC));
  if (!f) return -errno;
  const long n = pread_all(f.get(), buf);
  if (keep && n >= 0) {
    fd = std::move(f);
    ++fds_open;
  }
  return n;
}

procfs::PidIo io_delta(const procfs::PidIo& cur, const procfs::PidIo& prev) {
  auto d = [](std::uint64_t a, std::uint64_t b) { return a > b ? a - b : 0; };
  procfs::PidIo r;
  r.rchar = d(cur.rchar, prev.rchar);
  r.wchar = d(cur.wchar, prev.wchar);
  r.syscr = d(cur.syscr, prev.syscr);
  r.syscw = d(cur.syscw, prev.syscw);
  r.read_bytes = d(cur.read_bytes, prev.read_bytes);
  r.write_bytes = d(cur.write_bytes, prev.write_bytes);
  r.cancelled_write_bytes = d(cur.cancelled_write_bytes, prev.cancelled_write_bytes);
  return r;
}

// sonde's own CPU time: every thread of it, and the children it reaped (its helpers), in µs.
double own_cpu_s() {
  double s = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru{};
    if (::getrusage(who, &ru) != 0) continue;
    s += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  }
  return s;
}

}  // namespace

ProcScanner::ProcScanner(Roots roots, TargetInfo target, std::array<bool, kNumLevels> active,
                         ScanNeeds needs)
    : roots_(std::move(roots)), target_(std::move(target)), active_(active), needs_(needs) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
  page_size_ = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc_dir_fd_.reset(::open(roots_.proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  buf_.resize(4096);
  if (!target_.slurm_job) active_[level_index(Level::slurm)] = false;
  if (active_[level_index(Level::slurm)]) slurm_cgroups_ = node_has_slurm_cgroups(roots_);
}

ProcScanner::~ProcScanner() = default;

void ProcScanner::set_target_pid(int pid) {
  target_.pid = pid;
  // Membership is re-evaluated; a pid's previous read still counts only if it was at the last
  // scan (see refresh), so nothing from before that scan is attributed to a new member.
  for (auto& [p, e] : entries_) e->resolved = false;
}

void ProcScanner::set_count_from(double boottime_s) {
  // starttime is in whole clock ticks, truncated: a pid started in the same tick counts.
  count_from_ticks_ = static_cast<std::uint64_t>(std::max(0.0, std::floor(boottime_s * clk_tck_)));
}

void ProcScanner::set_adopter(int pid, std::function<bool(int)> is_helper) {
  adopter_ = pid;
  is_helper_ = std::move(is_helper);
  for (auto& [p, e] : entries_) e->resolved = false;
}

bool ProcScanner::discover(int pid, Entry& e) {
  const std::string dir = std::to_string(pid);
  const bool keep = fds_open_ < fd_budget_;
  const long n = read_proc(proc_dir_fd_.get(), dir + "/stat", e.stat_fd, keep, fds_open_, buf_);
  if (n < 0) return false;
  auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
  if (!st) return false;
  e.ppid = st->ppid;
  e.live_ppid = st->ppid;
  e.starttime_ticks = st->starttime_ticks;
  e.comm = std::move(st->comm);
  // What it had used when sonde first saw it: the part a reaping parent must not count again.
  e.known_cpu_s =
      static_cast<double>(st->utime_ticks + st->stime_ticks + st->cutime_ticks + st->cstime_ticks) /
      clk_tck_;
  e.known_faults = st->minflt + st->cminflt;
  if (active_[level_index(Level::user)]) {
    auto status = read_file(roots_.proc + "/" + dir + "/status");
    if (!status) return false;
    auto parsed = procfs::parse_pid_status(*status);
    if (!parsed) return false;
    e.uid = parsed->uid_real;
  }
  if (active_[level_index(Level::slurm)]) {
    // The job's cgroup where the node has them, else SLURM_JOB_ID; sonde's own multi-node
    // launcher and agents (marked in their environment) are never in the job.
    auto env = read_file(roots_.proc + "/" + dir + "/environ");
    static const std::string kUnreadable;
    if (!(env && procfs::environ_value(*env, kAgentMarkerEnv)))
      e.slurm_job =
          slurm_job_of_process(roots_.proc + "/" + dir, slurm_cgroups_, env ? &*env : &kUnreadable)
              .job;
  }
  return true;
}

ProcScanner::Pending ProcScanner::pending_of(int pid, const Entry& e) const {
  Pending p;
  p.pid.pid = pid;
  p.pid.ppid = e.live_ppid;
  p.pid.known_cpu_s = e.known_cpu_s;
  p.pid.known_faults = e.known_faults;
  p.pid.io_known = e.io_known;
  p.pid.known_io = e.known_io;
  p.pid.level_mask = e.level_mask;
  p.last_cpus = e.last_cpus;
  p.last_delta_s = e.last_delta_s;
  return p;
}

void list_pids(const std::string& proc_root, std::vector<int>& out) {
  out.clear();
  if (DIR* d = ::opendir(proc_root.c_str())) {
    while (dirent* de = ::readdir(d)) {
      int pid = 0;
      if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && parse_pid(de->d_name, pid))
        out.push_back(pid);
    }
    ::closedir(d);
  }
}

std::optional<PidReading> read_pid(const std::string& proc_root, int pid) {
  const std::string dir = proc_root + "/" + std::to_string(pid);
  auto text = read_file(dir + "/stat");
  if (!text) return std::nullopt;
  auto st = procfs::parse_pid_stat(*text);
  if (!st) return std::nullopt;
  static const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  PidReading r;
  r.starttime_ticks = st->starttime_ticks;
  r.cpu_ticks = st->utime_ticks + st->stime_ticks;
  r.rss_bytes = st->rss_pages * page;
  r.ppid = st->ppid;
  r.cminflt = st->cminflt;
  r.start_stack = st->start_stack;
  r.state = st->state;
  r.num_threads = st->num_threads;
  // statm's resident field is exact (stat's rss is per-CPU-batched, see procfs::PidStat).
  if (auto statm = read_file(dir + "/statm"))
    if (auto m = procfs::parse_pid_statm(*statm)) r.rss_bytes = m->resident_pages * page;
  r.comm = std::move(st->comm);
  return r;
}

std::optional<std::uint32_t> read_pid_uid(const std::string& proc_root, int pid) {
  auto text = read_file(proc_root + "/" + std::to_string(pid) + "/status");
  if (!text) return std::nullopt;
  auto parsed = procfs::parse_pid_status(*text);
  if (!parsed) return std::nullopt;
  return parsed->uid_real;
}

const ProcSnapshot& ProcScanner::scan(double boottime_s) {
  ++generation_;
  const bool first_scan = prev_boottime_s_ < 0;
  // Shared with a call that is synchronised with this thread (the watchdog's batch ends under its
  // mutex), or abandoned inside one (snapshot_abandoned): fill a fresh one.
  if (fresh_next_ || snap_.use_count() > 1) snap_ = std::make_shared<ProcSnapshot>();
  fresh_next_ = false;
  snap_->pids.clear();
  for (auto& m : snap_->members) m.clear();
  snap_->vanished.clear();
  snap_->shares.clear();
  snap_->reopened_per_tick = 0;
  // What the reaps after the previous tick recovered is this interval's.
  for (std::size_t li = 0; li < kNumLevels; ++li) {
    snap_->reaped_late[li] = std::move(late_[li]);
    late_[li].clear();
    late_s_[li] = 0;
  }
  own_zombies_.clear();
  snap_->pss_reads = 0;

  const bool discover_now = first_scan || generation_ % discover_every_ == 0;
  snap_->discovered = discover_now;
  if (discover_now) {
    // 1. List the pids. The directory is reopened each tick: procfs directory offsets are pid-based
    // and rewinding works, but a fresh open is as cheap and robust to a remounted root.
    list_pids(roots_.proc, listing_);
    total_pids_ = listing_.size();

    // 2. Discover new pids (read their stat once, and status/environ when a level needs them).
    for (int pid : listing_) {
      auto& slot = entries_[pid];
      if (!slot) {
        slot = std::make_unique<Entry>();
        if (!discover(pid, *slot)) {  // vanished between readdir and open: normal
          close_fd(slot->stat_fd, fds_open_);
          entries_.erase(pid);
          continue;
        }
        // Started since the previous listing, or since the instant sonde counts from: its whole
        // life happened while sonde watched, and nothing of it is known yet.
        slot->count_full_life =
            !first_scan || (count_from_ticks_ > 0 && slot->starttime_ticks >= count_from_ticks_);
        mark_pss_stale(slot->ppid);  // a fork shares the parent's pages with the child
        if (slot->count_full_life) {
          slot->known_cpu_s = 0;
          slot->known_faults = 0;
          slot->io_known = true;  // zero
        }
      }
      slot->seen_generation = generation_;
    }

    // 3. Forget pids that are gone. A member, or any pid whose parent is a member, was reaped
    // into its parent's counters: it waits to be matched with that growth.
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = *it->second;
      if (e.seen_generation != generation_) {
        if (!e.reported_reaped) {
          bool parent_member = false;
          if (!e.level_mask) {
            auto parent = entries_.find(e.live_ppid);
            parent_member = parent != entries_.end() && parent->second->level_mask != 0;
          }
          if (e.level_mask || parent_member) pending_.push_back(pending_of(it->first, e));
        }
        mark_pss_stale(e.live_ppid);  // what it shared with its parent is the parent's alone
        close_files(e);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  snap_->total_pids = total_pids_;

  // 4. Level membership: the process level follows parent pids from the target (membership is
  // kept when a descendant is re-parented); user and slurm include the process level. Under
  // `sonde run`, sonde is the subreaper of its command: a pid whose parent is sonde (and that is
  // not one of sonde's plugin children) is an orphan of the tree.
  const auto bit = [](Level l) { return static_cast<std::uint8_t>(1u << level_index(l)); };
  auto resolve = [&](auto&& self, int pid, Entry& e) -> std::uint8_t {
    if (e.resolved) return e.level_mask;
    if (e.resolving) return 0;
    if ((target_.exclude_pid > 0 &&
         (pid == target_.exclude_pid || e.ppid == target_.exclude_pid)) ||
        (target_.exclude_single_pid > 0 && pid == target_.exclude_single_pid)) {
      e.level_mask = 0;  // sonde itself (an agent) and its helper children; the head
      e.resolved = true;
      return 0;
    }
    e.resolving = true;
    std::uint8_t mask = 0;
    bool in_tree = target_.pid > 0 && pid == target_.pid;
    if (!in_tree && target_.pid > 0 && e.ppid > 0) {
      if (adopter_ > 0 && e.ppid == adopter_) {
        in_tree = !(is_helper_ && is_helper_(pid));
      } else {
        auto parent = entries_.find(e.ppid);
        if (parent != entries_.end())
          in_tree = self(self, e.ppid, *parent->second) & bit(Level::process);
      }
    }
    if (in_tree && active_[level_index(Level::process)]) mask |= bit(Level::process);
    if (active_[level_index(Level::user)] && (in_tree || e.uid == target_.uid))
      mask |= bit(Level::user);
    if (active_[level_index(Level::slurm)] && (in_tree || e.slurm_job == target_.slurm_job))
      mask |= bit(Level::slurm);
    // A process that is in the tree stays there; keep the tree bit even when the process level is
    // not recorded, so that descendants resolve through it.
    if (in_tree) mask |= bit(Level::process);
    e.level_mask = mask;
    e.resolved = true;
    e.resolving = false;
    return mask;
  };
  for (auto& [pid, e] : entries_) resolve(resolve, pid, *e);

  // 5. Refresh members.
  snap_->target_alive = false;
  for (int pid : listing_) {
    auto it = entries_.find(pid);
    if (it == entries_.end()) continue;
    Entry& e = *it->second;
    std::uint8_t mask = e.level_mask;
    if (!active_[level_index(Level::process)])
      mask &= static_cast<std::uint8_t>(~bit(Level::process));
    if (mask == 0 || e.reported_reaped) continue;
    PidSample s;
    if (!refresh(pid, e, prev_boottime_s_, s)) continue;
    s.level_mask = mask;
    if (pid == target_.pid) snap_->target_alive = true;
    if (s.state == 'Z' && s.ppid == ::getpid() &&
        ((adopter_ > 0 && pid != target_.pid && !(is_helper_ && is_helper_(pid))) ||
         (reap_target_ && pid == target_.pid)))
      own_zombies_.push_back({pid, s.cpu_s + s.child_cpu_s, mask, e.last_cpus});
    const auto index = static_cast<std::uint32_t>(snap_->pids.size());
    for (Level l : {Level::process, Level::user, Level::slurm})
      if (s.in(l)) snap_->members[level_index(l)].push_back(index);
    snap_->pids.push_back(s);
  }
  match_vanished();
  place_reaped();
  read_cgroups();
  // After read_cgroups: a group found now gives its first delta at the next scan.
  find_job_cgroup();
  prev_boottime_s_ = boottime_s;
  return *snap_;
}

void ProcScanner::set_level_cgroup(Level level, cgroup::Group group, cgroup::Reading baseline) {
  cgroups_[level_index(level)] = {std::move(group), std::move(baseline)};
}

bool ProcScanner::left_group(int pid, const cgroup::Group& g) const {
  const std::string dir = roots_.proc + "/" + std::to_string(pid);
  auto text = read_file(dir + "/cgroup");
  if (!text) return false;  // gone
  auto entries = procfs::parse_pid_cgroup(*text);
  if (!entries) return false;
  bool inside = false, found = false;
  for (const auto& e : *entries) {
    const bool v2 = e.hierarchy_id == 0 && e.controllers.empty();
    const bool cpuacct =
        std::find(e.controllers.begin(), e.controllers.end(), "cpuacct") != e.controllers.end();
    if (g.version == 2 ? !v2 : !cpuacct) continue;
    found = true;
    inside = e.path == g.path || e.path.rfind(g.path + "/", 0) == 0;
  }
  if (!found || inside) return false;
  // Exiting since: its cgroup may already read as another's.
  auto stat = read_file(dir + "/stat");
  if (!stat) return false;
  const auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z' &&
         (*stat)[close + 2] != 'X';
}

void ProcScanner::find_job_cgroup() {
  const std::size_t si = level_index(Level::slurm);
  if (job_cgroup_done_ || !active_[si] || !target_.slurm_job) return;
  auto give_up = [&](std::string why) {
    job_cgroup_done_ = true;
    job_cgroup_why_not_ = std::move(why);
  };
  if (!job_cgroup_allowed_) return give_up("--no-cgroup");
  if (!slurm_cgroups_)
    return give_up("this node puts no Slurm job into a cgroup (jobs from SLURM_JOB_ID)");
  // The job's cgroup from the first member that is in it (a member of the process level may be
  // outside: `sonde run` of a command that is not a job's).
  JobCgroup job;
  for (std::uint32_t i : snap_->members[si]) {
    const PidSample& p = snap_->pids[i];
    // Only a member whose job came from its cgroup (the scan has it): one read, not one per
    // member per tick while none is in the job's cgroup.
    if (auto it = entries_.find(p.pid);
        it == entries_.end() || it->second->slurm_job != target_.slurm_job)
      continue;
    auto text = read_file(roots_.proc + "/" + std::to_string(p.pid) + "/cgroup");
    if (!text) continue;
    if (slurm_job_from_cgroup(*text) != target_.slurm_job) continue;
    const CgroupLayout layout = CgroupLayout::discover(roots_);
    job = job_cgroup_of(*text, layout);
    // A member in the job's cgroup of some hierarchies only (slurmstepd on a v1 node, in no
    // cpuacct cgroup of the job): the job's directories there by its path.
    complete_job_cgroup(job, layout);
    break;
  }
  if (job.path.empty()) return;  // no member in the job's cgroup yet: look again next scan
  cgroup::Group g;
  if (!job.cpuacct.empty()) {
    g = {1, job.path, job.cpuacct, job.memory};
  } else if (!job.v2.empty()) {
    g = {2, job.path, job.v2, job.v2};
  } else {
    return give_up(
        fmt::format("the job's cgroup {} is in no cpuacct or unified hierarchy mounted "
                    "here",
                    job.path));
  }
  // An agent leaves itself out of the job (target_.exclude_pid) but runs in the job's cgroup
  // when srun started it there: the group's account holds its time, which is taken off. Where
  // the agent has a cgroup of its own below the job's (its step's or task's, as srun makes one
  // per step) that holds no member of the level, that cgroup's account is taken off (exact, per
  // CPU on v1; sonde's helper children included); else sonde's own CPU time (getrusage of
  // itself and the helper children it reaped, µs), read with the group's account.
  LevelCgroup lc;
  lc.group = std::move(g);
  if (target_.exclude_pid > 0) {
    auto self = read_file(roots_.proc + "/self/cgroup");
    if (self && slurm_job_from_cgroup(*self) == target_.slurm_job) {
      std::string own;  // sonde's cgroup path in the hierarchy of the job's account
      if (auto entries = procfs::parse_pid_cgroup(*self)) {
        for (const auto& e : *entries) {
          const bool v2 = e.hierarchy_id == 0 && e.controllers.empty();
          const bool cpuacct = std::find(e.controllers.begin(), e.controllers.end(), "cpuacct") !=
                               e.controllers.end();
          if (lc.group.version == 2 ? v2 : cpuacct) own = e.path;
        }
      }
      const std::string& jp = lc.group.path;
      if (own.size() > jp.size() && own.starts_with(jp) && own[jp.size()] == '/') {
        const std::string dir = lc.group.cpu_dir + own.substr(jp.size());
        if (holds_no_member(dir)) {
          lc.minus = LevelCgroup::Minus::group;
          lc.minus_group = {lc.group.version, own, dir, {}};
          lc.minus_what = fmt::format(
              "sonde's own cgroup {} (it runs inside the job's cgroup; its cgroup holds no "
              "member of the level)",
              own);
        }
      }
      if (lc.minus == LevelCgroup::Minus::none) {
        lc.minus = LevelCgroup::Minus::self;
        lc.minus_what = fmt::format(
            "sonde's own CPU time (getrusage of itself and its reaped children, µs, read with "
            "the group's account: it runs inside the job's cgroup, {})",
            own.empty() || own == jp ? "in the job's cgroup itself"
                                     : own + " holds members of the level");
      }
    }
  }
  if (lc.minus != LevelCgroup::Minus::none) {
    // Other processes that are no members (a multi-node head and its srun, on the head's node)
    // are in the group's account too, and nothing takes their time off: /proc then.
    const int other = foreign_in_job(
        lc.group.cpu_dir, lc.minus == LevelCgroup::Minus::group ? lc.minus_group.cpu_dir : "");
    if (other > 0) {
      auto it = entries_.find(other);
      return give_up(fmt::format(
          "sonde itself runs in the job's cgroup {}, and so does process {} ({}), which is no "
          "member of the level and whose time could not be taken off",
          job.path, other, it != entries_.end() ? it->second->comm : std::string("?")));
    }
  }
  lc.last = cgroup::read(lc.group);
  if (!lc.last.cpu_s)
    return give_up(fmt::format("the CPU account of the job's cgroup {} is not readable in {}",
                               job.path, lc.group.cpu_dir));
  if (lc.minus == LevelCgroup::Minus::group) {
    lc.minus_last = cgroup::read(lc.minus_group);
    if (!lc.minus_last.cpu_s)
      return give_up(
          fmt::format("sonde runs inside the job's cgroup and the CPU account of its "
                      "own cgroup {} is not readable",
                      lc.minus_group.path));
  } else if (lc.minus == LevelCgroup::Minus::self) {
    lc.self_last_s = own_cpu_s();
  }
  job_cgroup_done_ = true;
  cgroups_[si] = std::move(lc);
}

bool ProcScanner::holds_no_member(const std::string& dir) const {
  const auto slurm_bit = static_cast<std::uint8_t>(1u << level_index(Level::slurm));
  const auto pids = cgroup::member_pids(dir);
  if (!pids) return false;
  for (const int pid : *pids) {
    if (pid == ::getpid()) continue;
    // A process the scan does not know yet may be a member: not sonde's alone.
    auto it = entries_.find(pid);
    if (it == entries_.end() || (it->second->level_mask & slurm_bit) != 0) return false;
  }
  // Groups below it (a step's task cgroups).
  auto names = list_dir(dir);
  if (!names) return false;
  for (const std::string& n : *names) {
    struct stat st {};
    const std::string sub = dir + "/" + n;
    if (::stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && !holds_no_member(sub)) return false;
  }
  return true;
}

int ProcScanner::foreign_in_job(const std::string& dir, const std::string& skip) const {
  if (!skip.empty() && dir == skip) return 0;
  const auto slurm_bit = static_cast<std::uint8_t>(1u << level_index(Level::slurm));
  if (const auto pids = cgroup::member_pids(dir)) {
    for (const int pid : *pids) {
      if (pid == ::getpid() || pid == target_.exclude_pid) continue;
      auto it = entries_.find(pid);
      // Born since the listing: a process of the job, most likely (the next scans see it).
      if (it == entries_.end()) continue;
      const Entry& e = *it->second;
      if (e.ppid == target_.exclude_pid || (e.level_mask & slurm_bit) != 0) continue;
      return pid;
    }
  }
  auto names = list_dir(dir);
  if (!names) return 0;
  for (const std::string& n : *names) {
    struct stat st {};
    const std::string sub = dir + "/" + n;
    if (::stat(sub.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      if (const int pid = foreign_in_job(sub, skip); pid > 0) return pid;
  }
  return 0;
}

bool ProcScanner::read_level_cgroup(LevelCgroup& c, CgroupDelta& d) const {
  cgroup::Reading now = cgroup::read(c.group);
  // sonde's own time right after the group's, so that what it runs between the two reads is
  // never counted twice (both are running totals).
  const double self_now = c.minus == LevelCgroup::Minus::self ? own_cpu_s() : 0.0;
  cgroup::Reading minus_now;
  if (c.minus == LevelCgroup::Minus::group) minus_now = cgroup::read(c.minus_group);
  d.memory_bytes = now.memory_bytes;
  if (!now.cpu_s || (c.minus == LevelCgroup::Minus::group && !minus_now.cpu_s)) return false;
  if (!c.last.cpu_s || (c.minus == LevelCgroup::Minus::group && !c.minus_last.cpu_s)) {
    c.last = std::move(now);  // no baseline yet: this reading is the baseline
    c.minus_last = std::move(minus_now);
    c.self_last_s = self_now;
    return false;
  }
  double minus_s = 0;
  std::vector<double> minus_by_id;
  if (c.minus == LevelCgroup::Minus::group) {
    minus_s = *minus_now.cpu_s - *c.minus_last.cpu_s;
    if (minus_now.cpu_s_by_id.size() == c.minus_last.cpu_s_by_id.size()) {
      minus_by_id.resize(minus_now.cpu_s_by_id.size());
      for (std::size_t i = 0; i < minus_by_id.size(); ++i)
        minus_by_id[i] = minus_now.cpu_s_by_id[i] - c.minus_last.cpu_s_by_id[i];
    }
  } else if (c.minus == LevelCgroup::Minus::self) {
    minus_s = self_now - c.self_last_s;
  }
  d.valid = true;
  d.cpu_s = std::max(0.0, *now.cpu_s - *c.last.cpu_s - std::max(0.0, minus_s));
  // Per CPU id where the kernel keeps it (v1), less the agent's own group's per CPU; sonde's own
  // time (getrusage) has no per-CPU split: the members' reads then split the total.
  const bool per_cpu =
      c.minus == LevelCgroup::Minus::none ||
      (c.minus == LevelCgroup::Minus::group && minus_by_id.size() == now.cpu_s_by_id.size());
  if (per_cpu && !now.cpu_s_by_id.empty() && now.cpu_s_by_id.size() == c.last.cpu_s_by_id.size()) {
    d.cpu_s_by_id.resize(now.cpu_s_by_id.size());
    for (std::size_t i = 0; i < now.cpu_s_by_id.size(); ++i)
      d.cpu_s_by_id[i] =
          std::max(0.0, now.cpu_s_by_id[i] - c.last.cpu_s_by_id[i] -
                            (minus_by_id.empty() ? 0.0 : std::max(0.0, minus_by_id[i])));
  }
  c.last = std::move(now);
  if (c.minus == LevelCgroup::Minus::group) c.minus_last = std::move(minus_now);
  if (c.minus == LevelCgroup::Minus::self) c.self_last_s = self_now;
  return true;
}

void ProcScanner::read_cgroup_tail() {
  for (LevelCgroup& c : cgroups_) {
    c.tail_s = 0;
    if (!c.group || !c.left.empty()) continue;
    CgroupDelta d;
    if (read_level_cgroup(c, d)) c.tail_s = d.cpu_s;
  }
}

void ProcScanner::read_cgroups() {
  for (std::size_t li = 0; li < kNumLevels; ++li) {
    CgroupDelta& d = snap_->cgroup[li];
    d = {};
    LevelCgroup& c = cgroups_[li];
    if (!c.group || !c.left.empty()) continue;
    // The group holds the level only while every member is in it: a member that moved itself to
    // another cgroup (systemd-run --scope, a job joining its own) takes its time elsewhere, and
    // the level's figures come from /proc from then on.
    if (li == level_index(Level::slurm)) {
      // The job's processes are in its step and task cgroups below it, so its cgroup.procs lists
      // none of them; a member whose job came from its cgroup is in the group by construction.
      // Only a member of the process level that is not the job's (a command `sonde run` started
      // outside it) can be outside.
      for (std::uint32_t i : snap_->members[li]) {
        const PidSample& p = snap_->pids[i];
        if (p.state == 'Z') continue;
        if (auto it = entries_.find(p.pid);
            it != entries_.end() && it->second->slurm_job == target_.slurm_job)
          continue;
        if (!left_group(p.pid, c.group)) continue;
        c.left = fmt::format("process {} ({}) of the {} level is outside the job's cgroup {}",
                             p.pid, p.comm(), level_name(Level::slurm), c.group.path);
        break;
      }
      if (!c.left.empty()) continue;
    } else if (auto procs = read_file(c.group.cpu_dir + "/cgroup.procs")) {
      std::vector<int> in;
      std::size_t pos = 0;
      while (pos < procs->size()) {
        std::size_t eol = procs->find('\n', pos);
        if (eol == std::string::npos) eol = procs->size();
        if (eol > pos) in.push_back(std::atoi(procs->c_str() + pos));
        pos = eol + 1;
      }
      std::sort(in.begin(), in.end());
      for (std::uint32_t i : snap_->members[li]) {
        const PidSample& p = snap_->pids[i];
        if (p.state == 'Z' || std::binary_search(in.begin(), in.end(), p.pid)) continue;
        // Not listed: in a cgroup the command made below the group (which the group's account
        // holds), or exiting since the scan read it (an exiting task leaves the listing first).
        if (!left_group(p.pid, c.group)) continue;
        c.left = fmt::format("process {} ({}) of the {} level left the cgroup {}", p.pid, p.comm(),
                             level_name(static_cast<Level>(li)), c.group.path);
        break;
      }
      if (!c.left.empty()) continue;
    }
    // A failed read keeps the last good baseline: the next good read covers both intervals.
    (void)read_level_cgroup(c, d);
  }
}

// A zombie whose parent is sonde (an orphan adopted as subreaper, or the command of `sonde run` at
// its end) is reaped after the tick that read its final counters, with wait4: its rusage is its
// life in µs (own and reaped children), where /proc/<pid>/stat truncated utime and stime to clock
// ticks, each losing up to a tick. The difference goes into the next interval (the rows already
// written stay), where the process ran last; after the last tick, the summary counts it.
void ProcScanner::reap_own_zombies() {
  const auto tv_s = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  for (const OwnZombie& z : own_zombies_) {
    int status = 0;
    rusage ru{};
    pid_t r = 0;
    while ((r = ::wait4(z.pid, &status, WNOHANG, &ru)) < 0 && errno == EINTR) {
    }
    if (r != z.pid) continue;
    if (z.pid == target_.pid)
      target_reaped_ = TargetExit{status, tv_s(ru.ru_utime), tv_s(ru.ru_stime),
                                  static_cast<double>(ru.ru_maxrss) * 1024.0};
    // Gone now: its parent (sonde) is no member, so nothing else counts it again.
    if (auto it = entries_.find(z.pid); it != entries_.end()) {
      mark_gone(*it->second);
    }
    const double tail = tv_s(ru.ru_utime) + tv_s(ru.ru_stime) - z.known_cpu_s;
    if (tail <= 0) continue;
    for (Level l : {Level::process, Level::user, Level::slurm}) {
      const auto li = level_index(l);
      if (!((z.level_mask >> li) & 1u)) continue;
      for (const CpuShare& w : z.last_cpus) late_[li].push_back({w.cpu, tail * w.seconds});
      late_s_[li] += tail;
    }
  }
  own_zombies_.clear();
}

void ProcScanner::mark_pss_stale(int pid) {
  auto it = entries_.find(pid);
  if (it != entries_.end()) it->second->pss.stale = true;
}

void ProcScanner::close_files(Entry& e) {
  close_fd(e.stat_fd, fds_open_);
  close_fd(e.statm_fd, fds_open_);
  close_fd(e.io_fd, fds_open_);
}

void ProcScanner::mark_gone(Entry& e) {
  e.reported_reaped = true;
  e.have_prev = false;
  e.level_mask = 0;
  close_files(e);
}

void ProcScanner::match_vanished() {
  matched_.clear();
  if (pending_.empty() && snap_->pids.empty()) return;
  // A parent's cminflt grows, when it reaps a child, by the child's minflt + cminflt: an exact
  // count, never zero for a process that ran, read under the same lock as cutime/cstime. Each
  // member's growth at this tick is a budget that the children it reaped consume, oldest first.
  // A child whose parent has not shown the growth yet waits a few ticks; one whose parent is gone
  // or not sampled is dropped (its time went to a process outside the levels). A child whose
  // parent vanished too (bash → timeout → sh) reached the nearest ancestor still alive through
  // the parent's final counters.
  std::unordered_map<int, int> parent_of;
  for (const Pending& p : pending_) parent_of.emplace(p.pid.pid, p.pid.ppid);
  for (Pending& p : pending_) {
    for (int hops = 0; hops < 64; ++hops) {
      auto up = parent_of.find(p.pid.ppid);
      if (up == parent_of.end()) break;
      p.pid.ppid = up->second;
    }
  }
  std::unordered_map<int, std::uint64_t> budget;  // pid → cminflt growth not yet explained
  for (const PidSample& p : snap_->pids)
    if (p.child_faults_delta > 0) budget.emplace(p.pid, p.child_faults_delta);
  std::size_t kept = 0;
  for (Pending& p : pending_) {
    auto b = budget.find(p.pid.ppid);
    if (b != budget.end() && p.pid.known_faults <= b->second) {
      b->second -= p.pid.known_faults;
      matched_[p.pid.ppid].push_back(p);
      snap_->vanished.push_back(p.pid);
      continue;
    }
    const bool parent_alive = entries_.count(p.pid.ppid) > 0;
    if (parent_alive && ++p.age <= 4) pending_[kept++] = std::move(p);
  }
  pending_.resize(kept);
  // Growth left over: a child read at this tick (alive or zombie) was reaped after its read and
  // before its parent's. It is gone now: report it at this tick, with what was just read of it,
  // so that nothing of it is counted twice.
  for (auto it = budget.begin(); it != budget.end();)
    it = it->second > 0 ? std::next(it) : budget.erase(it);
  if (!budget.empty()) {
    for (const PidSample& c : snap_->pids) {
      auto b = budget.find(c.ppid);
      if (b == budget.end()) continue;
      auto e = entries_.find(c.pid);
      if (e == entries_.end() || e->second->known_faults > b->second) continue;
      const std::string dir = roots_.proc + "/" + std::to_string(c.pid);
      if (::access(dir.c_str(), F_OK) == 0) continue;
      Pending p = pending_of(c.pid, *e->second);
      p.pid.ppid = c.ppid;
      b->second -= p.pid.known_faults;
      matched_[c.ppid].push_back(p);
      snap_->vanished.push_back(p.pid);
      e->second->reported_reaped = true;  // not again when the next listing misses it
      e->second->level_mask = 0;
    }
  }
}

void ProcScanner::place_reaped() {
  // Each member's new reaped CPU: its children's growth less what was known of the children it
  // reaped; placed where those children ran last (weighted by their last interval's CPU), or,
  // for children sonde never saw, where the parent ran.
  for (PidSample& p : snap_->pids) {
    double known = 0;
    auto m = matched_.find(p.pid);
    if (m != matched_.end()) {
      for (const Pending& c : m->second) {
        known += c.pid.known_cpu_s;
        if (c.pid.io_known) {
          p.io_reaped_known.rchar += c.pid.known_io.rchar;
          p.io_reaped_known.wchar += c.pid.known_io.wchar;
          p.io_reaped_known.syscr += c.pid.known_io.syscr;
          p.io_reaped_known.syscw += c.pid.known_io.syscw;
          p.io_reaped_known.read_bytes += c.pid.known_io.read_bytes;
          p.io_reaped_known.write_bytes += c.pid.known_io.write_bytes;
          p.io_reaped_known.cancelled_write_bytes += c.pid.known_io.cancelled_write_bytes;
        }
      }
    }
    p.reaped_cpu_s = std::max(0.0, p.child_cpu_delta_s - known);
    if (p.reaped_cpu_s <= 0) continue;
    if (!needs_.threads) continue;
    // Shares must stay contiguous per pid: own shares are the last ones only for the last pid,
    // so the reaped shares are appended and the pid's range is moved to a fresh copy.
    std::vector<CpuShare> placed;
    double weight = 0;
    if (m != matched_.end()) {
      for (const Pending& c : m->second)
        for (const CpuShare& sh : c.last_cpus)
          weight += sh.seconds * std::max(c.last_delta_s, 1e-9);
    }
    if (weight > 0) {
      for (const Pending& c : m->second)
        for (const CpuShare& sh : c.last_cpus)
          placed.push_back(
              {sh.cpu, p.reaped_cpu_s * sh.seconds * std::max(c.last_delta_s, 1e-9) / weight});
    } else {
      placed.push_back({p.processor, p.reaped_cpu_s});
    }
    const auto begin = static_cast<std::uint32_t>(snap_->shares.size());
    for (auto i = p.share_begin; i < p.share_end; ++i) {
      const CpuShare own = snap_->shares[i];
      snap_->shares.push_back(own);
    }
    snap_->shares.insert(snap_->shares.end(), placed.begin(), placed.end());
    p.share_begin = begin;
    p.share_end = static_cast<std::uint32_t>(snap_->shares.size());
  }
}

bool ProcScanner::refresh(int pid, Entry& e, double /*prev_boottime_s*/, PidSample& s) {
  const std::string dir = std::to_string(pid);
  auto gone = [&] {
    // Gone (ESRCH on a kept fd); the next readdir drops it. Report it as vanished now so that its
    // reaped time is matched with its parent's growth.
    if (!e.reported_reaped) pending_.push_back(pending_of(pid, e));
    if (!e.reported_reaped) mark_pss_stale(e.live_ppid);
    mark_gone(e);
    return false;
  };
  // /proc/<pid>/io first, then stat: a child reaped between the two reads shows in stat (where
  // its reap is matched) no earlier than in io, so its known I/O is never subtracted a tick late.
  std::optional<procfs::PidIo> io;
  if (needs_.io && !e.io_denied) {
    const bool keep_io = fds_open_ < fd_budget_;
    if (!e.io_fd && !keep_io) ++snap_->reopened_per_tick;
    const long m = read_proc(proc_dir_fd_.get(), dir + "/io", e.io_fd, keep_io, fds_open_, buf_);
    if (m == -EACCES || m == -EPERM) {
      e.io_denied = true;
    } else if (m > 0) {
      auto parsed =
          procfs::parse_pid_io(std::string_view(buf_.data(), static_cast<std::size_t>(m)));
      if (parsed) io = *parsed;
    }
  }

  const bool keep = fds_open_ < fd_budget_;
  if (!e.stat_fd && !keep) ++snap_->reopened_per_tick;
  long n = read_proc(proc_dir_fd_.get(), dir + "/stat", e.stat_fd, keep, fds_open_, buf_);
  if (n <= 0) return gone();
  auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
  if (!st) return false;

  const std::uint64_t cpu_ticks = st->utime_ticks + st->stime_ticks;
  const std::uint64_t child_ticks = st->cutime_ticks + st->cstime_ticks;
  s.pid = pid;
  s.ppid = st->ppid;
  e.live_ppid = st->ppid;
  s.uid = e.uid;
  s.starttime_ticks = e.starttime_ticks;
  s.set_comm(e.comm);
  s.state = st->state;
  s.cpu_s = static_cast<double>(cpu_ticks) / clk_tck_;
  s.child_cpu_s = static_cast<double>(child_ticks) / clk_tck_;
  s.processor = st->processor;
  s.num_threads = st->num_threads;

  // Memory: statm's resident field is exact; stat's rss is a per-CPU-batched approximation. A
  // process whose CPU time, page faults and approximate rss did not move since the last read has
  // not touched its memory itself: its last exact value stands, re-read every kStatmEvery scans
  // (what the kernel reclaims from an idle process shows within that).
  const std::uint64_t faults = st->minflt + st->majflt;
  const bool statm_due = !e.statm_valid || cpu_ticks != e.prev_cpu_ticks ||
                         faults != e.prev_faults || st->rss_pages != e.prev_rss_pages ||
                         generation_ - e.statm_generation >= kStatmEvery || !e.have_prev ||
                         e.read_generation + 1 != generation_;
  if (statm_due) {
    const bool keep_m = fds_open_ < fd_budget_;
    if (!e.statm_fd && !keep_m) ++snap_->reopened_per_tick;
    const long m =
        read_proc(proc_dir_fd_.get(), dir + "/statm", e.statm_fd, keep_m, fds_open_, buf_);
    auto statm =
        m > 0 ? procfs::parse_pid_statm(std::string_view(buf_.data(), static_cast<std::size_t>(m)))
              : Result<procfs::PidStatm>(make_error(Errc::io, "gone"));
    e.statm_valid = statm.ok();
    e.rss_bytes = (statm ? statm->resident_pages : st->rss_pages) * page_size_;
    // statm's shared field: resident file-backed and shmem pages; the rest is anonymous.
    e.anon_bytes =
        statm ? e.rss_bytes - std::min(e.rss_bytes, statm->shared_pages * page_size_) : e.rss_bytes;
    e.statm_generation = generation_;
  }
  s.rss_bytes = e.rss_bytes;
  // Pss walks the process's page tables (under its mmap lock): it costs in proportion to the
  // resident size (~15 ms for 500 MiB on a loaded 2-core VM), far more than statm. So reads are
  // spaced by the process's size, `unit` scans per pss::kUnitBytes resident (at least 1): re-read
  // when its memory moved since the last read (faults, exact resident size) and `unit` scans have
  // passed, when a child appeared or went (a fork shares its pages; unit / 8 scans apart), and
  // at least every max(kStatmEvery, 2 × unit) scans (what others map or unmap of the pages it
  // shares changes its share without it moving; pss::kFewSharedEvery when it maps little that is
  // file-backed or shmem: a fork, where anonymous pages are shared, marks the parent). In between,
  // its Pss follows its anonymous resident size (statm's resident less shared): anonymous pages it
  // gained or lost count as its own (a fork shows as a child); file-backed and shmem pages it
  // mapped, maybe shared with others, count from the next read. Not readable (another user's
  // process without CAP_SYS_PTRACE, a zombie): the resident size stands in, and the sample says so.
  if (needs_.pss) {
    const std::uint64_t unit = pss::unit(e.rss_bytes);
    const std::uint64_t every =
        pss::shares_much(e.rss_bytes, e.anon_bytes) ? kStatmEvery : pss::kFewSharedEvery;
    const bool pss_due = pss::due_for_change(e.pss, generation_, faults, e.rss_bytes) ||
                         generation_ - e.pss.at >= std::max(every, 2 * unit);
    if (pss_due && !e.pss_denied) {
      ++snap_->pss_reads;
      UniqueFd none;
      const long m =
          read_proc(proc_dir_fd_.get(), dir + "/smaps_rollup", none, false, fds_open_, buf_);
      if (m == -EACCES || m == -EPERM) e.pss_denied = true;
      auto rollup = m > 0 ? procfs::parse_pid_smaps_rollup(
                                std::string_view(buf_.data(), static_cast<std::size_t>(m)))
                          : Result<procfs::PidSmapsRollup>(make_error(Errc::io, "unreadable"));
      // The first read is dated back by pid % 8 scans: processes found together (all of them at
      // the first scan) do not all come due at the same later scan.
      const std::uint64_t spread =
          e.pss.valid ? 0 : std::min<std::uint64_t>(generation_, static_cast<unsigned>(pid) % 8);
      e.pss.valid = rollup.ok();
      if (rollup) e.pss.bytes = rollup->pss_bytes;
      e.pss.stale = false;
      e.pss.at = generation_ - spread;
      e.pss.faults = faults;
      e.pss.rss_bytes = e.rss_bytes;
      e.pss.anon_bytes = e.anon_bytes;
    }
    s.pss_from_rss = !e.pss.valid;
    s.pss_denied = e.pss_denied;
    s.pss_bytes = e.pss.valid ? pss::estimate(e.pss, e.rss_bytes, e.anon_bytes) : e.rss_bytes;
  } else {
    s.pss_bytes = e.rss_bytes;
  }
  e.prev_faults = faults;
  e.prev_rss_pages = st->rss_pages;

  // Deltas only against a read at the previous scan: a pid that was not read then (it was not a
  // member) takes this read as its baseline.
  if (e.have_prev && e.read_generation + 1 != generation_) e.have_prev = false;
  if (e.have_prev) {
    s.cpu_delta_s =
        static_cast<double>(cpu_ticks > e.prev_cpu_ticks ? cpu_ticks - e.prev_cpu_ticks : 0) /
        clk_tck_;
    s.child_cpu_delta_s =
        static_cast<double>(child_ticks > e.prev_child_ticks ? child_ticks - e.prev_child_ticks
                                                             : 0) /
        clk_tck_;
    s.child_faults_delta = st->cminflt > e.prev_cminflt ? st->cminflt - e.prev_cminflt : 0;
  } else if (e.count_full_life) {
    s.cpu_delta_s = s.cpu_s;
    s.child_cpu_delta_s = s.child_cpu_s;
    s.child_faults_delta = st->cminflt;
  }

  s.io_denied = e.io_denied;
  if (io) {
    s.io_valid = true;
    s.io = *io;
    if (e.have_prev && e.prev_io_valid)
      s.io_delta = io_delta(*io, e.prev_io);
    else if (!e.have_prev && e.count_full_life)
      s.io_delta = *io;
    e.prev_io = *io;
    e.prev_io_valid = true;
    e.known_io = *io;
    e.io_known = true;
  } else if (!e.have_prev && !e.count_full_life) {
    e.io_known = false;  // a baseline without its I/O: unknown
  }

  // CPU placement: single-threaded processes ran on `processor`; multi-threaded ones are split
  // over their threads' CPUs in proportion to each thread's CPU time since last read, and what
  // threads that exited used stays on the CPUs they last ran on.
  s.share_begin = static_cast<std::uint32_t>(snap_->shares.size());
  if (needs_.threads) {
    if (st->num_threads > 1 || e.threads.size() > 1) {
      if (s.cpu_delta_s > 0 || !e.threads_read) read_threads(pid, e, s, cpu_ticks);
    } else {
      if (s.cpu_delta_s > 0) snap_->shares.push_back({st->processor, s.cpu_delta_s});
      // The main thread is tracked so that threads started later are weighed against it.
      e.threads.assign(1, {pid, cpu_ticks, st->processor});
      e.threads_proc_ticks = cpu_ticks;
      e.threads_read = true;
    }
  }
  s.share_end = static_cast<std::uint32_t>(snap_->shares.size());
  if (s.cpu_delta_s > 0) {
    e.last_cpus.clear();
    for (auto i = s.share_begin; i < s.share_end; ++i)
      e.last_cpus.push_back({snap_->shares[i].cpu, snap_->shares[i].seconds / s.cpu_delta_s});
  } else if (e.last_cpus.empty()) {
    e.last_cpus.push_back({st->processor, 1.0});
  }
  e.last_delta_s = s.cpu_delta_s;

  e.prev_cpu_ticks = cpu_ticks;
  e.prev_child_ticks = child_ticks;
  e.prev_cminflt = st->cminflt;
  e.known_cpu_s = s.cpu_s + s.child_cpu_s;
  e.known_faults = st->minflt + st->cminflt;
  e.have_prev = true;
  e.read_generation = generation_;
  e.count_full_life = false;
  return true;
}

void ProcScanner::read_threads(int pid, Entry& e, PidSample& s, std::uint64_t cpu_ticks) {
  const std::string task_dir = roots_.proc + "/" + std::to_string(pid) + "/task";
  std::vector<Entry::Thread> now;
  std::vector<std::pair<int, double>> weights;  // cpu → ticks since the last thread read
  double live_weight = 0;
  if (DIR* d = ::opendir(task_dir.c_str())) {
    const int dfd = ::dirfd(d);
    while (dirent* de = ::readdir(d)) {
      int tid = 0;
      if (!parse_pid(de->d_name, tid)) continue;
      const std::string rel = std::string(de->d_name) + "/stat";
      const UniqueFd f(::openat(dfd, rel.c_str(), O_RDONLY | O_CLOEXEC));
      if (!f) continue;
      const long n = pread_all(f.get(), buf_);
      if (n <= 0) continue;
      auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
      if (!st) continue;
      const std::uint64_t ticks = st->utime_ticks + st->stime_ticks;
      now.push_back({tid, ticks, st->processor});
      auto prev = std::lower_bound(e.threads.begin(), e.threads.end(), tid,
                                   [](const Entry::Thread& t, int id) { return t.tid < id; });
      const bool known = prev != e.threads.end() && prev->tid == tid;
      // A thread born since the last read counts its whole life (it started after that read); at
      // the first read every thread's whole life is the weight (used only for a process whose
      // whole life counts).
      const std::uint64_t before = known ? prev->ticks : 0;
      const double w = static_cast<double>(ticks > before ? ticks - before : 0);
      if (w > 0) {
        weights.emplace_back(st->processor, w);
        live_weight += w;
      }
    }
    ::closedir(d);
  }
  std::sort(now.begin(), now.end(),
            [](const Entry::Thread& a, const Entry::Thread& b) { return a.tid < b.tid; });
  // Threads that exited since the last read: the process's total grew by what they used, which
  // no live thread shows. That remainder stays on the CPUs they ran on last.
  std::vector<int> exited_cpus;
  if (e.threads_read) {
    for (const Entry::Thread& t : e.threads) {
      auto it = std::lower_bound(now.begin(), now.end(), t.tid,
                                 [](const Entry::Thread& a, int id) { return a.tid < id; });
      if (it == now.end() || it->tid != t.tid) exited_cpus.push_back(t.cpu);
    }
  }
  const double span = e.threads_read ? static_cast<double>(cpu_ticks > e.threads_proc_ticks
                                                               ? cpu_ticks - e.threads_proc_ticks
                                                               : 0)
                                     : live_weight;
  const double exited_weight = exited_cpus.empty() ? 0.0 : std::max(0.0, span - live_weight);
  const double total_weight = live_weight + exited_weight;
  e.threads = std::move(now);
  e.threads_proc_ticks = cpu_ticks;
  e.threads_read = true;
  if (s.cpu_delta_s <= 0) return;
  if (total_weight <= 0) {
    snap_->shares.push_back({s.processor, s.cpu_delta_s});
    return;
  }
  for (auto [cpu, w] : weights) snap_->shares.push_back({cpu, s.cpu_delta_s * w / total_weight});
  if (exited_weight > 0) {
    const double each =
        s.cpu_delta_s * exited_weight / total_weight / static_cast<double>(exited_cpus.size());
    for (int cpu : exited_cpus) snap_->shares.push_back({cpu, each});
  }
}

}  // namespace sonde
