#include "sinks/prometheus_owners.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <unordered_set>

#include "core/clock.hpp"
#include "core/nan.hpp"
#include "core/pid_reads.hpp"
#include "core/procfs.hpp"
#include "core/units.hpp"
#include "sinks/prometheus.hpp"

namespace sonde::prom {

namespace {

constexpr const char* kOther = "other";

template <typename T>
std::optional<T> to_num(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

// ---- Job cgroups and environments -----------------------------------------------------------

JobFacts read_job_cgroup(const JobCgroup& cg) {
  JobFacts f;
  f.uid = cg.uid;
  auto cpus_from = [&](const std::string& dir, std::initializer_list<const char*> files) {
    for (const char* file : files) {
      auto text = read_file(dir + "/" + file);
      if (!text) continue;
      auto list = procfs::parse_cpu_list(*text);
      if (list && !list->empty()) {
        f.cpus = static_cast<double>(list->size());
        return;
      }
    }
  };
  if (!cg.v2.empty()) cpus_from(cg.v2, {"cpuset.cpus.effective"});
  if (!f.cpus && !cg.cpuset.empty()) cpus_from(cg.cpuset, {"cpuset.effective_cpus", "cpuset.cpus"});
  auto limit_from = [&](const std::string& dir, const char* file) {
    auto text = read_file(dir + "/" + file);
    if (!text) return false;
    auto limit = procfs::parse_memory_limit(*text);
    if (!limit) return false;
    if (limit->has_value()) f.memory_limit_bytes = static_cast<double>(**limit);
    return true;  // read: unlimited stays nullopt
  };
  if (cg.v2.empty() || !limit_from(cg.v2, "memory.max"))
    if (!cg.memory.empty()) limit_from(cg.memory, "memory.limit_in_bytes");
  if (!cg.cpuacct.empty()) {
    if (auto text = read_file(cg.cpuacct + "/cpuacct.usage_percpu")) {
      // Nanoseconds per possible CPU, in CPU order: "123 456 …".
      std::string_view rest = *text;
      int cpu = 0;
      bool ok = true;
      std::vector<std::pair<int, double>> out;
      while (true) {
        while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front())))
          rest.remove_prefix(1);
        if (rest.empty()) break;
        std::size_t end = 0;
        while (end < rest.size() && !std::isspace(static_cast<unsigned char>(rest[end]))) ++end;
        auto ns = to_num<std::uint64_t>(rest.substr(0, end));
        if (!ns) {
          ok = false;
          break;
        }
        out.emplace_back(cpu++, static_cast<double>(*ns) * 1e-9);
        rest.remove_prefix(end);
      }
      if (ok) f.core_seconds = std::move(out);
    }
  }
  return f;
}

JobEnvironment job_environment(std::string_view environ_text) {
  JobEnvironment e;
  auto number = [&](std::string_view key) -> std::optional<double> {
    auto v = procfs::environ_value(environ_text, key);
    if (!v) return std::nullopt;
    // SLURM_CPUS_ON_NODE is a count; the memory values are MiB, possibly with a unit suffix
    // in old releases ("4096M").
    std::string_view t = *v;
    if (!t.empty() && (t.back() == 'M' || t.back() == 'm')) t.remove_suffix(1);
    auto n = to_num<std::uint64_t>(t);
    if (!n || *n == 0) return std::nullopt;
    return static_cast<double>(*n);
  };
  e.cpus = number("SLURM_CPUS_ON_NODE");
  if (auto m = number("SLURM_MEM_PER_NODE")) e.mem_per_node_bytes = *m * kMiB;
  if (auto m = number("SLURM_MEM_PER_CPU")) e.mem_per_cpu_bytes = *m * kMiB;
  return e;
}

// ---- Aggregation ----------------------------------------------------------------------------

struct OwnerAggregator::Now {
  OwnerSeries series;
  Accum delta;
  bool cgroup = false;  ///< one of its processes is in its job cgroup
  /// Its oldest process that is not root's (slurmstepd is root's, and in the job's cgroup).
  std::uint64_t oldest_start = std::numeric_limits<std::uint64_t>::max();
  std::optional<std::uint32_t> owner;
  const JobFacts* facts = nullptr;
  std::vector<const JobGpuUse*> gpus;
};

OwnerAggregator::OwnerAggregator(bool users, bool jobs, std::size_t max_series)
    : users_(users), jobs_(jobs), max_series_(max_series) {}

namespace {

/// Adds a gauge where NaN means unknown: NaN + x = x, NaN + NaN = NaN.
void add_known(double& to, double v) {
  if (std::isnan(v)) return;
  to = std::isnan(to) ? v : to + v;
}

}  // namespace

void OwnerAggregator::admit(Table& t, std::map<std::string, Now>& now, bool jobs) {
  std::vector<KeyState*> fresh;
  for (auto& [key, n] : now) {
    auto [it, inserted] = t.keys.try_emplace(key);
    KeyState& k = it->second;
    // The owner, once known, stays: more processes of another uid do not change it.
    if (jobs && !k.owner) k.owner = n.owner;
    if (!inserted || key == kOther) continue;
    k.seq = t.next_seq++;
    k.claim = jobs && !n.cgroup;
    fresh.push_back(&k);
  }
  if (fresh.empty()) return;
  // Jobs of a job cgroup first (no user can make one), then claims.
  std::stable_sort(fresh.begin(), fresh.end(),
                   [](const KeyState* a, const KeyState* b) { return !a->claim && b->claim; });
  std::map<std::uint32_t, std::size_t> held;  ///< claims with their own series, per owner
  std::set<std::uint32_t> claimants;          ///< owners of the claims now
  std::size_t cgroup_own = 0;
  for (const auto& [key, k] : t.keys) {
    if (k.claim) {
      claimants.insert(k.owner.value_or(0));
      if (k.own) ++held[k.owner.value_or(0)];
    } else if (k.own) {
      ++cgroup_own;
    }
  }
  // Frees a series: the newest claim of the owner holding the most, when they hold more than
  // `above`. That series ends; the key's later figures go to "other" (monotonic).
  auto demote = [&](std::size_t above) {
    auto most = std::max_element(held.begin(), held.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (most == held.end() || most->second <= above) return false;
    KeyState* newest = nullptr;
    for (auto& [key, k] : t.keys)
      if (k.own && k.claim && k.owner.value_or(0) == most->first &&
          (!newest || k.seq > newest->seq))
        newest = &k;
    if (!newest) return false;
    newest->own = false;
    --t.own;
    --most->second;
    return true;
  };
  for (KeyState* k : fresh) {
    if (!k->claim) {
      if (t.own < max_series_ || demote(0)) {
        k->own = true;
        ++t.own;
        ++cgroup_own;
      }
      continue;
    }
    // A free series goes to any claim; when none is free, an owner under their fair share of
    // what the cgroup jobs leave takes one from the owner holding the most.
    const std::size_t left = max_series_ > cgroup_own ? max_series_ - cgroup_own : 0;
    const std::size_t share = std::max<std::size_t>(1, left / claimants.size());
    std::size_t& mine = held[k->owner.value_or(0)];
    if (t.own < max_series_ || (mine < share && demote(share))) {
      k->own = true;
      ++t.own;
      ++mine;
    }
  }
}

void OwnerAggregator::fold(Table& t, std::map<std::string, Now>& now, std::vector<OwnerSeries>& out,
                           std::size_t& folded, bool jobs,
                           const std::function<std::string(std::uint32_t)>& user_name) {
  // Keys without a process left are released (their series end); new keys get a series while
  // there is room.
  for (auto it = t.keys.begin(); it != t.keys.end();) {
    if (now.count(it->first) == 0) {
      if (it->second.own) --t.own;
      it = t.keys.erase(it);
    } else {
      ++it;
    }
  }
  admit(t, now, jobs);
  out.clear();
  folded = 0;
  OwnerSeries other;
  other.key = kOther;
  std::map<int, GpuSeries> other_gpus;
  bool other_now = false;
  for (auto& [key, n] : now) {
    KeyState& k = t.keys[key];
    // The cgroup's per-CPU time: whole when first seen, then its growth.
    if (jobs) {
      std::map<int, double> seen;
      if (n.facts)
        for (const auto& [cpu, s] : n.facts->core_seconds) {
          auto p = k.core_prev.find(cpu);
          n.delta.core[cpu] += p == k.core_prev.end() ? s : std::max(0.0, s - p->second);
          seen[cpu] = s;
        }
      k.core_prev = std::move(seen);
      for (const JobGpuUse* g : n.gpus)
        if (std::isfinite(g->energy_joules_delta) && g->energy_joules_delta > 0)
          n.delta.gpu_energy[g->gpu] += g->energy_joules_delta;
    }
    Accum& acc = k.own ? k.total : t.other;
    acc.cpu += n.delta.cpu;
    acc.io_read += n.delta.io_read;
    acc.io_write += n.delta.io_write;
    for (const auto& [cpu, s] : n.delta.core) acc.core[cpu] += s;
    for (const auto& [gpu, j] : n.delta.gpu_energy) acc.gpu_energy[gpu] += j;
    if (k.own) {
      OwnerSeries s = std::move(n.series);
      s.cpu_seconds_total = acc.cpu;
      if (jobs) {
        // The job's user: its cgroup's uid_<u>, else its owner (root's when every process of
        // it is: slurmstepd before the job's first task).
        s.user = user_name(n.facts && n.facts->uid ? *n.facts->uid : k.owner.value_or(0));
        s.io_read_bytes_total = acc.io_read;
        s.io_written_bytes_total = acc.io_write;
        if (n.facts) {
          s.cpus = n.facts->cpus;
          s.memory_limit_bytes = n.facts->memory_limit_bytes;
          if (!n.facts->core_seconds.empty())
            s.core_seconds_total.assign(acc.core.begin(), acc.core.end());
        }
        for (const JobGpuUse* g : n.gpus)
          s.gpus.push_back(GpuSeries{g->gpu, g->utilization_ratio, g->memory_bytes, g->power_watts,
                                     acc.gpu_energy[g->gpu]});
      }
      out.push_back(std::move(s));
    } else {
      other.rss_bytes += n.series.rss_bytes;
      other.processes += n.series.processes;
      if (jobs && n.facts) {
        if (n.facts->cpus) other.cpus = other.cpus.value_or(0) + *n.facts->cpus;
        if (n.facts->memory_limit_bytes)
          other.memory_limit_bytes =
              other.memory_limit_bytes.value_or(0) + *n.facts->memory_limit_bytes;
      }
      for (const JobGpuUse* g : n.gpus) {
        auto [git, fresh] = other_gpus.try_emplace(g->gpu);
        GpuSeries& gs = git->second;
        if (fresh) gs = GpuSeries{g->gpu, kNaN, kNaN, kNaN, 0};
        add_known(gs.utilization_ratio, g->utilization_ratio);
        add_known(gs.memory_bytes, g->memory_bytes);
        add_known(gs.power_watts, g->power_watts);
      }
      other_now = true;
      ++folded;
    }
  }
  if (other_now || t.other_used) {
    t.other_used = true;
    other.cpu_seconds_total = t.other.cpu;
    if (jobs) {
      other.io_read_bytes_total = t.other.io_read;
      other.io_written_bytes_total = t.other.io_write;
      other.core_seconds_total.assign(t.other.core.begin(), t.other.core.end());
      for (auto& [gpu, gs] : other_gpus) {
        gs.utilization_ratio = std::min(gs.utilization_ratio, 1.0);
        gs.energy_joules_total = t.other.gpu_energy[gpu];
        other.gpus.push_back(gs);
      }
    }
    out.push_back(std::move(other));
  }
}

const OwnerUsage& OwnerAggregator::update(
    const std::vector<PidRecord>& pids, const std::function<std::string(std::uint32_t)>& user_name,
    const std::map<std::string, JobFacts>& facts, const std::vector<JobGpuUse>& gpus) {
  std::unordered_map<int, const PidRecord*> current;
  current.reserve(pids.size());
  for (const PidRecord& p : pids) current.emplace(p.pid, &p);

  // Reaped children: the kernel adds a child's I/O to its parent's counters when the parent
  // waits for it (the same step adds its page faults to the parent's cminflt). What sonde
  // already counted of a child that is gone is taken off its parent's growth when the parent's
  // cminflt shows the reap (now or within the next two scans), so each byte counts once.
  for (auto it = credits_.begin(); it != credits_.end();) {
    if (++it->second.age > 2 || !current.count(it->first))
      it = credits_.erase(it);
    else
      ++it;
  }
  for (const auto& [pid, prev] : prev_) {
    auto c = current.find(pid);
    if (c != current.end() && c->second->starttime_ticks == prev.start) continue;
    if (!prev.io_read && !prev.io_write) continue;
    if (!current.count(prev.ppid)) continue;
    Credit& cr = credits_[prev.ppid];
    cr.age = 0;
    cr.read += static_cast<double>(prev.io_read.value_or(0));
    cr.write += static_cast<double>(prev.io_write.value_or(0));
  }

  std::map<std::string, Now> users_now, jobs_now;
  std::unordered_map<int, PidPrev> next;
  next.reserve(pids.size());
  for (const PidRecord& p : pids) {
    // A pid seen for the first time counts its whole life; after that, its growth.
    auto it = prev_.find(p.pid);
    const PidPrev* prev =
        it != prev_.end() && it->second.start == p.starttime_ticks ? &it->second : nullptr;
    const double cpu = prev ? std::max(0.0, p.cpu_s - prev->cpu) : p.cpu_s;
    auto growth = [](std::optional<std::uint64_t> cur, std::optional<std::uint64_t> before) {
      if (!cur) return 0.0;
      if (!before) return static_cast<double>(*cur);
      return *cur > *before ? static_cast<double>(*cur - *before) : 0.0;
    };
    double io_r = growth(p.io_read_bytes, prev ? prev->io_read : std::nullopt);
    double io_w = growth(p.io_write_bytes, prev ? prev->io_write : std::nullopt);
    if (auto c = credits_.find(p.pid); c != credits_.end() && prev && p.cminflt > prev->cminflt) {
      const double r = std::min(io_r, c->second.read), w = std::min(io_w, c->second.write);
      io_r -= r;
      io_w -= w;
      credits_.erase(c);
    }
    PidPrev& n = next[p.pid];
    n.start = p.starttime_ticks;
    n.cpu = p.cpu_s;
    n.io_read = p.io_read_bytes;
    n.io_write = p.io_write_bytes;
    n.ppid = p.ppid;
    n.cminflt = p.cminflt;
    auto add = [&](std::map<std::string, Now>& now, const std::string& key) -> Now& {
      Now& s = now[key];
      s.series.key = key;
      s.series.rss_bytes += static_cast<double>(p.rss_bytes);
      s.series.processes += 1;
      s.delta.cpu += cpu;
      return s;
    };
    if (users_) add(users_now, user_name(p.uid));
    if (jobs_ && p.job) {
      Now& j = add(jobs_now, *p.job);
      j.delta.io_read += io_r;
      j.delta.io_write += io_w;
      if (p.job_source == JobSource::cgroup) j.cgroup = true;
      if (p.uid != 0 && p.starttime_ticks < j.oldest_start) {
        j.oldest_start = p.starttime_ticks;
        j.owner = p.uid;
      }
    }
  }
  prev_ = std::move(next);
  if (users_) fold(user_table_, users_now, usage_.users, usage_.users_folded, false, user_name);
  if (jobs_) {
    for (auto& [job, n] : jobs_now) {
      auto f = facts.find(job);
      if (f != facts.end()) n.facts = &f->second;
    }
    for (const JobGpuUse& g : gpus)
      if (auto it = jobs_now.find(g.job); it != jobs_now.end()) it->second.gpus.push_back(&g);
    fold(job_table_, jobs_now, usage_.jobs, usage_.jobs_folded, true, user_name);
  }
  return usage_;
}

// ---- Scanner --------------------------------------------------------------------------------

OwnerScanner::OwnerScanner(Roots roots, bool users, bool jobs, std::size_t max_series)
    : roots_(std::move(roots)), jobs_(jobs), aggregator_(users, jobs, max_series) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
  if (jobs_) layout_ = CgroupLayout::discover(roots_);
}

std::string OwnerScanner::user_name(std::uint32_t uid) {
  auto it = names_.find(uid);
  if (it != names_.end()) return it->second;
  std::string name = std::to_string(uid);
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found && pw.pw_name)
    name = pw.pw_name;
  // "other" is the overflow series; a name that is not UTF-8 (user databases allow any bytes)
  // would be replaced in the page, and two such names could then collide: the uid instead.
  if (name == kOther || !is_utf8(name)) name = std::to_string(uid);
  names_.emplace(uid, name);
  return name;
}

void OwnerScanner::learn_job(int pid, const std::string& job, const std::string& cgroup_text) {
  JobInfo& info = job_info_[job];
  if (info.cgroup.empty()) {
    info.cgroup = job_cgroup_of(cgroup_text, layout_);
    // Its first process may be in the job's cgroup of some hierarchies only (slurmstepd, v1).
    complete_job_cgroup(info.cgroup, layout_);
  }
  if (info.env_read) return;
  // The first of the job's processes whose environment is Slurm's (not slurmstepd's own).
  auto env = read_file(roots_.proc + "/" + std::to_string(pid) + "/environ");
  if (!env || !procfs::environ_value(*env, "SLURM_JOB_ID")) return;
  info.env = job_environment(*env);
  info.env_read = true;
}

const OwnerUsage& OwnerScanner::scan() {
  // Whether Slurm uses cgroups here changes only when slurmd is reconfigured: looked at again
  // every 5 s (on cgroup v1 it lists every controller's directory).
  if (jobs_) {
    const double now = monotonic_now();
    if (now - slurm_cgroups_checked_ >= 5) {
      slurm_cgroups_ = node_has_slurm_cgroups(roots_);
      slurm_cgroups_checked_ = now;
    }
  }
  list_pids(roots_.proc, listing_);
  records_.clear();
  std::unordered_map<int, Known> seen;
  seen.reserve(listing_.size());
  std::string cgroup_text;
  for (const int pid : listing_) {
    auto st = read_pid(roots_.proc, pid);
    if (!st) continue;
    Known k;
    auto it = known_.find(pid);
    const std::string dir = roots_.proc + "/" + std::to_string(pid);
    const bool same = it != known_.end() && it->second.starttime_ticks == st->starttime_ticks;
    if (same) k = it->second;
    // The uid is read every scan: a process that drops to a user (setuid) keeps its pid and
    // start time. The job is read again when it execs (a new environment; slurmstepd's child
    // execs the task) or changes uid.
    auto uid = read_pid_uid(roots_.proc, pid);
    if (!uid) continue;
    // A zombie (or a process exiting) shows a start_stack of 0 and an empty environment: not an
    // exec. It keeps its job, so that its last seconds (a zombie's CPU time is still in /proc
    // until it is reaped) are counted in it.
    const bool exiting = st->start_stack == 0;
    const bool changed = !same || *uid != k.uid ||
                         (!exiting && (st->comm != k.comm || st->start_stack != k.exec_mark));
    k.starttime_ticks = st->starttime_ticks;
    k.uid = *uid;
    if (changed) {
      k.comm = st->comm;
      k.exec_mark = st->start_stack;
      if (jobs_) {
        cgroup_text.clear();
        const JobAttribution a = slurm_job_of_process(dir, slurm_cgroups_, nullptr, &cgroup_text);
        k.job = a.job;
        k.job_source = a.source;
        if (k.job) learn_job(pid, *k.job, cgroup_text);
      }
    }
    PidRecord r;
    r.pid = pid;
    r.starttime_ticks = k.starttime_ticks;
    r.uid = k.uid;
    r.ppid = st->ppid;
    r.cminflt = st->cminflt;
    r.job = k.job;
    r.job_source = k.job_source;
    r.cpu_s = static_cast<double>(st->cpu_ticks) / clk_tck_;
    r.rss_bytes = st->rss_bytes;
    if (k.job) {
      if (auto io_text = read_file(dir + "/io")) {
        if (auto io = procfs::parse_pid_io(*io_text)) {
          r.io_read_bytes = io->read_bytes;
          r.io_write_bytes = io->write_bytes;
        }
      }
    }
    records_.push_back(std::move(r));
    seen.emplace(pid, std::move(k));
  }
  known_ = std::move(seen);

  std::map<std::string, JobFacts> facts;
  std::vector<JobGpuUse> gpu_use;
  if (jobs_) {
    std::map<std::string, std::vector<int>> pids_by_job;
    for (const PidRecord& r : records_)
      if (r.job) pids_by_job[*r.job].push_back(r.pid);
    // Jobs gone: forget what was learnt of them.
    for (auto it = job_info_.begin(); it != job_info_.end();)
      it = pids_by_job.count(it->first) ? std::next(it) : job_info_.erase(it);
    for (const auto& [job, pids] : pids_by_job) {
      auto info = job_info_.find(job);
      JobFacts f = info != job_info_.end() ? read_job_cgroup(info->second.cgroup) : JobFacts{};
      if (info != job_info_.end()) {
        const JobEnvironment& env = info->second.env;
        if (!f.cpus) f.cpus = env.cpus;
        if (!f.memory_limit_bytes) {
          if (env.mem_per_node_bytes)
            f.memory_limit_bytes = env.mem_per_node_bytes;
          else if (env.mem_per_cpu_bytes && f.cpus)
            f.memory_limit_bytes = *env.mem_per_cpu_bytes * *f.cpus;
        }
      }
      facts.emplace(job, std::move(f));
    }
    // Also without jobs: the devices' energy counters must be followed, so that a job that
    // starts gets only its own share of the energy from then on.
    if (gpus_) gpu_use = gpus_(pids_by_job);
  }
  return aggregator_.update(
      records_, [this](std::uint32_t uid) { return user_name(uid); }, facts, gpu_use);
}

}  // namespace sonde::prom
