#include "sinks/prometheus_owners.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <functional>

#include "core/pid_reads.hpp"
#include "core/procfs.hpp"

namespace sonde::prom {

namespace {
constexpr const char* kOther = "other";
}

namespace {

/// "<digits>" followed by '/' or the end, at the front of `s`: the id.
std::optional<std::string> job_id_at(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == 0 || end > 20 || (end < s.size() && s[end] != '/')) return std::nullopt;
  return std::string(s.substr(0, end));
}

/// The job of one cgroup path (the third field of a /proc/<pid>/cgroup line).
std::optional<std::string> job_of_cgroup_path(std::string_view path) {
  // v1: slurmstepd's hierarchy at the top of a controller's tree.
  if (path.starts_with("/slurm")) {
    std::size_t a = path.find('/', 1);
    if (a != std::string_view::npos && path.substr(a).starts_with("/uid_")) {
      std::size_t b = path.find('/', a + 1);
      if (b != std::string_view::npos && path.substr(b).starts_with("/job_"))
        if (auto id = job_id_at(path.substr(b + 5))) return id;
    }
  }
  // v2: slurmstepd.scope (where slurmd's cgroup/v2 plugin puts jobs), not in a user's subtree.
  constexpr std::string_view kScope = "/slurmstepd.scope/job_";
  const std::size_t at = path.find(kScope);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view prefix = path.substr(0, at);
  if (prefix.find("/user.slice") != std::string_view::npos ||
      prefix.find("/user@") != std::string_view::npos)
    return std::nullopt;
  return job_id_at(path.substr(at + kScope.size()));
}

}  // namespace

std::optional<std::string> slurm_job_from_cgroup(std::string_view text) {
  // Lines "hierarchy-id:controllers:path"; v1 ("4:memory:/slurm/uid_1000/job_1234/step_0") and
  // v2 ("0::/system.slice/slurmstepd.scope/job_1234/step_batch/user/task_0").
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    if (auto job = job_of_cgroup_path(line.substr(c2 + 1))) return job;
  }
  return std::nullopt;
}

bool node_has_slurm_cgroups(const Roots& roots) {
  const std::string base = roots.sys + "/fs/cgroup";
  struct stat st {};
  if (::stat((base + "/system.slice/slurmstepd.scope").c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return true;
  if (::stat((base + "/cgroup.controllers").c_str(), &st) == 0) return false;  // v2 only
  auto controllers = list_dir(base);
  if (!controllers) return false;
  for (const std::string& c : *controllers) {
    auto entries = list_dir(base + "/" + c);
    if (!entries) continue;
    for (const std::string& e : *entries)
      if (e.starts_with("slurm") && ::stat((base + "/" + c + "/" + e).c_str(), &st) == 0 &&
          S_ISDIR(st.st_mode))
        return true;
  }
  return false;
}

JobAttribution slurm_job_of_process(const std::string& pid_dir, bool slurm_cgroups) {
  JobAttribution a;
  if (auto cg = read_file(pid_dir + "/cgroup")) {
    if ((a.job = slurm_job_from_cgroup(*cg))) {
      a.source = JobSource::cgroup;
      return a;
    }
  }
  // Where Slurm uses cgroups, a process outside a job cgroup is in no job, whatever its
  // environment says; elsewhere the environment is all there is.
  if (slurm_cgroups) return a;
  if (auto env = read_file(pid_dir + "/environ")) {
    if (auto v = procfs::environ_value(*env, "SLURM_JOB_ID")) {
      if (auto id = job_id_at(*v); id && id->size() == v->size()) {
        a.job = std::move(id);
        a.source = JobSource::environment;
      }
    }
  }
  return a;
}

OwnerAggregator::OwnerAggregator(bool users, bool jobs, std::size_t max_series)
    : users_(users), jobs_(jobs), max_series_(max_series) {}

void OwnerAggregator::fold(Table& t, const std::map<std::string, OwnerSeries>& now,
                           const std::map<std::string, double>& cpu_delta,
                           std::vector<OwnerSeries>& out, std::size_t& folded) {
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
  out.clear();
  folded = 0;
  OwnerSeries other{kOther, 0, 0, 0};
  bool other_now = false;
  for (const auto& [key, series] : now) {
    auto [it, inserted] = t.keys.try_emplace(key);
    KeyState& k = it->second;
    if (inserted && key != kOther && t.own < max_series_) {
      k.own = true;
      ++t.own;
    }
    const double delta = cpu_delta.at(key);
    if (k.own) {
      k.cpu_total += delta;
      OwnerSeries s = series;
      s.cpu_seconds_total = k.cpu_total;
      out.push_back(std::move(s));
    } else {
      t.other_cpu_total += delta;
      other.rss_bytes += series.rss_bytes;
      other.processes += series.processes;
      other_now = true;
      ++folded;
    }
  }
  if (other_now || t.other_used) {
    t.other_used = true;
    other.cpu_seconds_total = t.other_cpu_total;
    out.push_back(std::move(other));
  }
}

const OwnerUsage& OwnerAggregator::update(
    const std::vector<PidRecord>& pids,
    const std::function<std::string(std::uint32_t)>& user_name) {
  std::map<std::string, OwnerSeries> users_now, jobs_now;
  std::map<std::string, double> user_delta, job_delta;
  std::unordered_map<int, std::pair<std::uint64_t, double>> cpu_now;
  cpu_now.reserve(pids.size());
  for (const PidRecord& p : pids) {
    // A pid seen for the first time counts its whole life; after that, its growth.
    double delta = p.cpu_s;
    if (auto it = prev_cpu_.find(p.pid);
        it != prev_cpu_.end() && it->second.first == p.starttime_ticks)
      delta = p.cpu_s > it->second.second ? p.cpu_s - it->second.second : 0.0;
    cpu_now[p.pid] = {p.starttime_ticks, p.cpu_s};
    auto add = [&](std::map<std::string, OwnerSeries>& now, std::map<std::string, double>& d,
                   const std::string& key) {
      OwnerSeries& s = now[key];
      s.key = key;
      s.rss_bytes += static_cast<double>(p.rss_bytes);
      s.processes += 1;
      d[key] += delta;
    };
    if (users_) add(users_now, user_delta, user_name(p.uid));
    if (jobs_ && p.job) add(jobs_now, job_delta, *p.job);
  }
  prev_cpu_ = std::move(cpu_now);
  if (users_) fold(user_table_, users_now, user_delta, usage_.users, usage_.users_folded);
  if (jobs_) fold(job_table_, jobs_now, job_delta, usage_.jobs, usage_.jobs_folded);
  return usage_;
}

OwnerScanner::OwnerScanner(Roots roots, bool users, bool jobs, std::size_t max_series)
    : roots_(std::move(roots)), jobs_(jobs), aggregator_(users, jobs, max_series) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::string OwnerScanner::user_name(std::uint32_t uid) {
  auto it = names_.find(uid);
  if (it != names_.end()) return it->second;
  std::string name = std::to_string(uid);
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found && pw.pw_name)
    name = pw.pw_name;
  if (name == kOther) name = std::to_string(uid);  // "other" is the overflow series
  names_.emplace(uid, name);
  return name;
}

const OwnerUsage& OwnerScanner::scan() {
  if (jobs_) slurm_cgroups_ = node_has_slurm_cgroups(roots_);
  list_pids(roots_.proc, listing_);
  records_.clear();
  std::unordered_map<int, Known> seen;
  seen.reserve(listing_.size());
  for (const int pid : listing_) {
    auto st = read_pid(roots_.proc, pid);
    if (!st) continue;
    Known k;
    auto it = known_.find(pid);
    if (it != known_.end() && it->second.starttime_ticks == st->starttime_ticks) {
      k = it->second;
    } else {
      auto uid = read_pid_uid(roots_.proc, pid);
      if (!uid) continue;
      k.starttime_ticks = st->starttime_ticks;
      k.uid = *uid;
      if (jobs_)
        k.job = slurm_job_of_process(roots_.proc + "/" + std::to_string(pid), slurm_cgroups_).job;
    }
    PidRecord r;
    r.pid = pid;
    r.starttime_ticks = k.starttime_ticks;
    r.uid = k.uid;
    r.job = k.job;
    r.cpu_s = static_cast<double>(st->cpu_ticks) / clk_tck_;
    r.rss_bytes = st->rss_bytes;
    records_.push_back(std::move(r));
    seen.emplace(pid, std::move(k));
  }
  known_ = std::move(seen);
  return aggregator_.update(records_, [this](std::uint32_t uid) { return user_name(uid); });
}

}  // namespace sonde::prom
