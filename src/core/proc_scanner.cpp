#include "core/proc_scanner.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace sonde {

struct ProcScanner::Entry {
  std::uint64_t seen_generation = 0;
  // Fixed at discovery.
  int ppid = 0;
  int live_ppid =
      0;  ///< the parent at the last read (an orphan's is its reaper: init, a subreaper)
  std::uint32_t uid = 0;
  std::uint64_t starttime_ticks = 0;
  std::optional<std::string> slurm_job;
  std::string comm;
  bool resolved = false;   // level_mask is computed
  bool resolving = false;  // cycle guard while resolving through parents
  std::uint8_t level_mask = 0;
  // Kept open across ticks while the fd budget allows.
  int stat_fd = -1;
  int io_fd = -1;
  bool io_denied = false;
  // Previous tick.
  bool have_prev = false;
  bool count_full_life = false;  // first seen after the first scan: nothing counted it yet
  std::uint64_t prev_cpu_ticks = 0;
  std::uint64_t prev_child_ticks = 0;
  bool prev_io_valid = false;
  procfs::PidIo prev_io;
  double last_total_cpu_s = 0;  // counted CPU: total now minus the baseline
  double base_total_cpu_s = 0;  // total when first seen, if that was a baseline
  std::vector<std::pair<int, std::uint64_t>> thread_ticks;  // tid → utime+stime, sorted by tid
};

namespace {

bool parse_pid(const char* name, int& pid) {
  const char* end = name + std::strlen(name);
  auto [p, ec] = std::from_chars(name, end, pid);
  return ec == std::errc() && p == end && pid > 0;
}

void close_fd(int& fd, std::size_t& counter) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
    --counter;
  }
}

// Reads a /proc file through an fd kept open, or opens it for this read only.
long read_proc(int dir_fd, const std::string& rel, int& fd, bool keep, std::size_t& fds_open,
               std::string& buf) {
  if (fd >= 0) return pread_all(fd, buf);
  const int f = ::openat(dir_fd, rel.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) return -errno;
  const long n = pread_all(f, buf);
  if (keep && n >= 0) {
    fd = f;
    ++fds_open;
  } else {
    ::close(f);
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

}  // namespace

ProcScanner::ProcScanner(Roots roots, TargetInfo target, std::array<bool, kNumLevels> active,
                         ScanNeeds needs)
    : roots_(std::move(roots)), target_(std::move(target)), active_(active), needs_(needs) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
  page_size_ = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc_dir_fd_ = ::open(roots_.proc.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  buf_.resize(4096);
  if (!target_.slurm_job) active_[level_index(Level::slurm)] = false;
}

ProcScanner::~ProcScanner() {
  for (auto& [pid, e] : entries_) {
    close_fd(e->stat_fd, fds_open_);
    close_fd(e->io_fd, fds_open_);
  }
  if (proc_dir_fd_ >= 0) ::close(proc_dir_fd_);
}

void ProcScanner::set_target_pid(int pid) {
  target_.pid = pid;
  for (auto& [p, e] : entries_) e->resolved = false;
  // Membership changes: what was seen before this point is a baseline, not new life.
  for (auto& [p, e] : entries_) e->have_prev = false;
}

bool ProcScanner::discover(int pid, Entry& e) {
  const std::string dir = std::to_string(pid);
  const bool keep = fds_open_ < fd_budget_;
  const long n = read_proc(proc_dir_fd_, dir + "/stat", e.stat_fd, keep, fds_open_, buf_);
  if (n < 0) return false;
  auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
  if (!st) return false;
  e.ppid = st->ppid;
  e.live_ppid = st->ppid;
  e.starttime_ticks = st->starttime_ticks;
  e.comm = std::move(st->comm);
  if (active_[level_index(Level::user)]) {
    auto status = read_file(roots_.proc + "/" + dir + "/status");
    if (!status) return false;
    auto parsed = procfs::parse_pid_status(*status);
    if (!parsed) return false;
    e.uid = parsed->uid_real;
  }
  if (active_[level_index(Level::slurm)]) {
    auto env = read_file(roots_.proc + "/" + dir + "/environ");
    if (env) e.slurm_job = procfs::environ_value(*env, "SLURM_JOB_ID");
  }
  return true;
}

const ProcSnapshot& ProcScanner::scan(double boottime_s) {
  ++generation_;
  const bool first_scan = prev_boottime_s_ < 0;
  if (snap_.use_count() > 1) snap_ = std::make_shared<ProcSnapshot>();
  snap_->pids.clear();
  for (auto& m : snap_->members) m.clear();
  snap_->vanished.clear();
  snap_->shares.clear();
  snap_->reopened_per_tick = 0;

  const bool discover_now = first_scan || generation_ % discover_every_ == 0;
  snap_->discovered = discover_now;
  if (discover_now) {
    // 1. List the pids. The directory is reopened each tick: procfs directory offsets are pid-based
    // and rewinding works, but a fresh open is as cheap and robust to a remounted root.
    listing_.clear();
    if (DIR* d = ::opendir(roots_.proc.c_str())) {
      while (dirent* de = ::readdir(d)) {
        int pid = 0;
        if (de->d_name[0] >= '1' && de->d_name[0] <= '9' && parse_pid(de->d_name, pid))
          listing_.push_back(pid);
      }
      ::closedir(d);
    }
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
        slot->count_full_life = !first_scan;
      }
      slot->seen_generation = generation_;
    }

    // 3. Forget pids that are gone; members seen at the previous tick are reported as vanished.
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = *it->second;
      if (e.seen_generation != generation_) {
        if (e.have_prev && e.level_mask)
          pending_.push_back({{it->first, e.live_ppid, e.last_total_cpu_s, e.level_mask}, 0});
        close_fd(e.stat_fd, fds_open_);
        close_fd(e.io_fd, fds_open_);
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  snap_->total_pids = total_pids_;

  // 4. Level membership: the process level follows parent pids from the target (membership is
  // kept when a descendant is re-parented); user and slurm include the process level.
  const auto bit = [](Level l) { return static_cast<std::uint8_t>(1u << level_index(l)); };
  auto resolve = [&](auto&& self, int pid, Entry& e) -> std::uint8_t {
    if (e.resolved) return e.level_mask;
    if (e.resolving) return 0;
    e.resolving = true;
    std::uint8_t mask = 0;
    bool in_tree = target_.pid > 0 && pid == target_.pid;
    if (!in_tree && target_.pid > 0 && e.ppid > 0) {
      auto parent = entries_.find(e.ppid);
      if (parent != entries_.end())
        in_tree = self(self, e.ppid, *parent->second) & bit(Level::process);
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
    if (mask == 0) continue;
    PidSample s;
    if (!refresh(pid, e, prev_boottime_s_, s)) continue;
    s.level_mask = mask;
    if (pid == target_.pid) snap_->target_alive = true;
    const auto index = static_cast<std::uint32_t>(snap_->pids.size());
    for (Level l : {Level::process, Level::user, Level::slurm})
      if (s.in(l)) snap_->members[level_index(l)].push_back(index);
    snap_->pids.push_back(s);
  }
  match_vanished();
  prev_boottime_s_ = boottime_s;
  return *snap_;
}

void ProcScanner::match_vanished() {
  if (pending_.empty()) return;
  // Each member's cutime growth at this tick is a budget that the children it reaped consume,
  // oldest first. A child whose parent has not shown the growth yet waits a few ticks; one whose
  // parent is gone or not sampled is dropped (its time went to a process outside the levels).
  // A child whose parent vanished too (bash → timeout → sh): its time reaches the nearest
  // ancestor still alive, through the parent's final cutime.
  std::unordered_map<int, int> parent_of;
  for (const Pending& p : pending_) parent_of.emplace(p.pid.pid, p.pid.ppid);
  for (Pending& p : pending_) {
    for (int hops = 0; hops < 64; ++hops) {
      auto up = parent_of.find(p.pid.ppid);
      if (up == parent_of.end()) break;
      p.pid.ppid = up->second;
    }
  }
  std::unordered_map<int, double> budget;
  for (const PidSample& p : snap_->pids)
    if (p.child_cpu_delta_s > 0) budget.emplace(p.pid, p.child_cpu_delta_s);
  const double slack = 1.5 / clk_tck_;  // the child may have run up to a tick after last seen
  std::size_t kept = 0;
  for (Pending& p : pending_) {
    auto b = budget.find(p.pid.ppid);
    if (b != budget.end() && p.pid.last_total_cpu_s <= b->second + slack) {
      b->second = std::max(0.0, b->second - p.pid.last_total_cpu_s);
      snap_->vanished.push_back(p.pid);
      continue;
    }
    const bool parent_alive = entries_.count(p.pid.ppid) > 0;
    if (parent_alive && ++p.age <= 4) pending_[kept++] = p;
  }
  pending_.resize(kept);
  // Growth left over: a child read at this tick (alive or zombie) was reaped after its read and
  // before its parent's. It is gone now: report it at this tick, with what was just read of it,
  // so that its time is not counted twice.
  for (auto it = budget.begin(); it != budget.end();)
    it = it->second > slack ? std::next(it) : budget.erase(it);
  if (budget.empty()) return;
  for (const PidSample& c : snap_->pids) {
    auto b = budget.find(c.ppid);
    if (b == budget.end() || b->second <= slack) continue;
    const std::string dir = roots_.proc + "/" + std::to_string(c.pid);
    if (::access(dir.c_str(), F_OK) == 0) continue;
    auto e = entries_.find(c.pid);
    if (e == entries_.end()) continue;
    const double total = c.cpu_s + c.child_cpu_s;
    snap_->vanished.push_back({c.pid, c.ppid, total, e->second->level_mask});
    b->second = std::max(0.0, b->second - total);
    e->second->have_prev = false;  // reported: not again when the next listing misses it
    e->second->level_mask = 0;
  }
}

bool ProcScanner::refresh(int pid, Entry& e, double /*prev_boottime_s*/, PidSample& s) {
  const std::string dir = std::to_string(pid);
  const bool keep = fds_open_ < fd_budget_;
  if (e.stat_fd < 0 && !keep) ++snap_->reopened_per_tick;
  long n = read_proc(proc_dir_fd_, dir + "/stat", e.stat_fd, keep, fds_open_, buf_);
  if (n <= 0) {
    // Gone (ESRCH on a kept fd); the next readdir drops it. Report it as vanished now so its
    // reaped time is not double counted by its parent.
    if (e.have_prev && e.level_mask)
      pending_.push_back({{pid, e.live_ppid, e.last_total_cpu_s, e.level_mask}, 0});
    e.have_prev = false;
    e.level_mask = 0;
    close_fd(e.stat_fd, fds_open_);
    close_fd(e.io_fd, fds_open_);
    return false;
  }
  auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
  if (!st) return false;

  const std::uint64_t cpu_ticks = st->utime_ticks + st->stime_ticks;
  const std::uint64_t child_ticks = st->cutime_ticks + st->cstime_ticks;
  s.pid = pid;
  s.ppid = st->ppid;
  e.live_ppid = st->ppid;
  s.uid = e.uid;
  s.starttime_ticks = e.starttime_ticks;
  s.comm = &e.comm;
  s.cpu_s = static_cast<double>(cpu_ticks) / clk_tck_;
  s.child_cpu_s = static_cast<double>(child_ticks) / clk_tck_;
  s.rss_bytes = st->rss_pages * page_size_;
  s.processor = st->processor;
  s.num_threads = st->num_threads;
  if (e.have_prev) {
    s.cpu_delta_s =
        static_cast<double>(cpu_ticks > e.prev_cpu_ticks ? cpu_ticks - e.prev_cpu_ticks : 0) /
        clk_tck_;
    s.child_cpu_delta_s =
        static_cast<double>(child_ticks > e.prev_child_ticks ? child_ticks - e.prev_child_ticks
                                                             : 0) /
        clk_tck_;
  } else if (e.count_full_life) {
    s.cpu_delta_s = s.cpu_s;
    s.child_cpu_delta_s = s.child_cpu_s;
  } else {
    e.base_total_cpu_s = s.cpu_s + s.child_cpu_s;
  }

  if (needs_.io && !e.io_denied) {
    const bool keep_io = fds_open_ < fd_budget_;
    if (e.io_fd < 0 && !keep_io) ++snap_->reopened_per_tick;
    const long m = read_proc(proc_dir_fd_, dir + "/io", e.io_fd, keep_io, fds_open_, buf_);
    if (m == -EACCES || m == -EPERM) {
      e.io_denied = true;
    } else if (m > 0) {
      auto io = procfs::parse_pid_io(std::string_view(buf_.data(), static_cast<std::size_t>(m)));
      if (io) {
        s.io_valid = true;
        s.io = *io;
        if (e.have_prev && e.prev_io_valid)
          s.io_delta = io_delta(*io, e.prev_io);
        else if (!e.have_prev && e.count_full_life)
          s.io_delta = *io;
        e.prev_io = *io;
        e.prev_io_valid = true;
      }
    }
  }

  // CPU placement: single-threaded processes ran on `processor`; busy multi-threaded ones are
  // split over their threads' CPUs in proportion to each thread's CPU time since last read.
  s.share_begin = static_cast<std::uint32_t>(snap_->shares.size());
  if (needs_.threads && s.cpu_delta_s > 0) {
    if (st->num_threads > 1)
      read_threads(pid, e, s);
    else
      snap_->shares.push_back({st->processor, s.cpu_delta_s});
  }
  s.share_end = static_cast<std::uint32_t>(snap_->shares.size());

  e.prev_cpu_ticks = cpu_ticks;
  e.prev_child_ticks = child_ticks;
  e.last_total_cpu_s = s.cpu_s + s.child_cpu_s - e.base_total_cpu_s;
  e.have_prev = true;
  e.count_full_life = false;
  return true;
}

void ProcScanner::read_threads(int pid, Entry& e, PidSample& s) {
  const std::string task_dir = roots_.proc + "/" + std::to_string(pid) + "/task";
  std::vector<std::pair<int, std::uint64_t>> now;
  std::vector<std::pair<int, double>> weights;  // cpu → weight
  double total_weight = 0;
  if (DIR* d = ::opendir(task_dir.c_str())) {
    const int dfd = ::dirfd(d);
    while (dirent* de = ::readdir(d)) {
      int tid = 0;
      if (!parse_pid(de->d_name, tid)) continue;
      const std::string rel = std::string(de->d_name) + "/stat";
      const int f = ::openat(dfd, rel.c_str(), O_RDONLY | O_CLOEXEC);
      if (f < 0) continue;
      const long n = pread_all(f, buf_);
      ::close(f);
      if (n <= 0) continue;
      auto st = procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)));
      if (!st) continue;
      const std::uint64_t ticks = st->utime_ticks + st->stime_ticks;
      now.emplace_back(tid, ticks);
      auto prev = std::lower_bound(e.thread_ticks.begin(), e.thread_ticks.end(),
                                   std::make_pair(tid, std::uint64_t{0}));
      const std::uint64_t before =
          (prev != e.thread_ticks.end() && prev->first == tid) ? prev->second : 0;
      const double w = static_cast<double>(ticks > before ? ticks - before : 0);
      if (w > 0) {
        weights.emplace_back(st->processor, w);
        total_weight += w;
      }
    }
    ::closedir(d);
  }
  std::sort(now.begin(), now.end());
  e.thread_ticks = std::move(now);
  if (total_weight <= 0) {
    snap_->shares.push_back({s.processor, s.cpu_delta_s});
    return;
  }
  for (auto [cpu, w] : weights) snap_->shares.push_back({cpu, s.cpu_delta_s * w / total_weight});
}

}  // namespace sonde
