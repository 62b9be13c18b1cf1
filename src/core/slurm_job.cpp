#include "core/slurm_job.hpp"

#include <sys/stat.h>

#include <cctype>
#include <charconv>

#include "core/procfs.hpp"

namespace sonde {
namespace {

/// "<digits>" followed by '/' or the end, at the front of `s`: the id.
std::optional<std::string> job_id_at(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  if (end == 0 || end > 20 || (end < s.size() && s[end] != '/')) return std::nullopt;
  return std::string(s.substr(0, end));
}

}  // namespace

bool is_plain_job_id(std::string_view id) {
  auto j = job_id_at(id);
  return j && j->size() == id.size();
}

std::optional<JobCgroupPath> slurm_job_of_cgroup_path(std::string_view path) {
  // v1: slurmstepd's hierarchy at the top of a controller's tree.
  if (path.starts_with("/slurm")) {
    const std::size_t a = path.find('/', 1);
    if (a != std::string_view::npos && path.substr(a).starts_with("/uid_")) {
      const std::size_t b = path.find('/', a + 1);
      if (b != std::string_view::npos && path.substr(b).starts_with("/job_")) {
        if (auto id = job_id_at(path.substr(b + 5))) {
          JobCgroupPath j{*id, b + 5 + id->size(), std::nullopt};
          const std::string_view u = path.substr(a + 5, b - a - 5);
          std::uint32_t uid = 0;
          auto [p, ec] = std::from_chars(u.data(), u.data() + u.size(), uid);
          if (ec == std::errc() && p == u.data() + u.size() && !u.empty()) j.uid = uid;
          return j;
        }
      }
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
  auto id = job_id_at(path.substr(at + kScope.size()));
  if (!id) return std::nullopt;
  return JobCgroupPath{*id, at + kScope.size() + id->size(), std::nullopt};
}

void for_each_cgroup_line(std::string_view text,
                          const std::function<bool(std::string_view, std::string_view)>& f) {
  // Lines "hierarchy-id:controllers:path"; v1 ("4:memory:/slurm/uid_1000/job_1234/step_0") and
  // v2 ("0::/system.slice/slurmstepd.scope/job_1234/step_batch/user/task_0").
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const std::size_t c1 = line.find(':');
    const std::size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    if (!f(line.substr(c1 + 1, c2 - c1 - 1), line.substr(c2 + 1))) return;
  }
}

std::optional<std::string> slurm_job_from_cgroup(std::string_view text) {
  std::optional<std::string> job;
  for_each_cgroup_line(text, [&](std::string_view, std::string_view path) {
    if (auto j = slurm_job_of_cgroup_path(path)) job = std::move(j->id);
    return !job;
  });
  return job;
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

JobAttribution slurm_job_of_process(const std::string& pid_dir, bool slurm_cgroups,
                                    const std::string* environ_text, std::string* cgroup_text) {
  JobAttribution a;
  if (auto cg = read_file(pid_dir + "/cgroup")) {
    if ((a.job = slurm_job_from_cgroup(*cg))) a.source = JobSource::cgroup;
    if (cgroup_text) *cgroup_text = std::move(*cg);
    if (a.job) return a;
  }
  // Where Slurm uses cgroups, a process outside a job cgroup is in no job, whatever its
  // environment says; elsewhere the environment is all there is.
  if (slurm_cgroups) return a;
  std::optional<std::string> read;
  if (!environ_text) {
    if (auto env = read_file(pid_dir + "/environ")) read = std::move(*env);
    environ_text = read ? &*read : nullptr;
  }
  if (environ_text) {
    if (auto v = procfs::environ_value(*environ_text, "SLURM_JOB_ID"); v && is_plain_job_id(*v)) {
      a.job = std::move(v);
      a.source = JobSource::environment;
    }
  }
  return a;
}

}  // namespace sonde
