#include "core/job_cgroup.hpp"

#include <sys/stat.h>

#include <algorithm>

#include "core/procfs.hpp"
#include "core/slurm_job.hpp"

namespace sonde {
namespace {

/// The directory of cgroup `path` (a job's) in `m`, "" when the mount does not show it.
std::string dir_in(const CgroupLayout::Mount& m, std::string_view path) {
  if (m.root == "/" || m.root.empty()) return m.dir + std::string(path);
  if (path == m.root) return m.dir;
  if (path.starts_with(m.root) && path.size() > m.root.size() && path[m.root.size()] == '/')
    return m.dir + std::string(path.substr(m.root.size()));
  return {};
}

bool has(const std::vector<std::string>& list, std::string_view v) {
  return std::find(list.begin(), list.end(), v) != list.end();
}

}  // namespace

CgroupLayout CgroupLayout::discover(const Roots& roots) {
  CgroupLayout l;
  const std::string base = roots.sys + "/fs/cgroup";
  if (auto text = read_file(roots.proc + "/self/mountinfo")) {
    if (auto mounts = procfs::parse_cgroup_mounts(*text)) {
      for (const auto& m : *mounts) {
        Mount out{m.controllers, roots.mount_dir(m.mount_point), m.root};
        if (m.v2) {
          if (!l.v2) l.v2 = std::move(out);
        } else if (!m.controllers.empty()) {
          // A later mount on the same mount point covers the earlier one (a subtree bind-mounted
          // over the hierarchy, as in a container or a node of tests/slurm/cluster --cgroup):
          // only the later one's files are there.
          std::erase_if(l.v1, [&](const Mount& e) { return e.dir == out.dir; });
          l.v1.push_back(std::move(out));
        }
      }
      return l;
    }
  }
  // No mount table: the usual layout (unified at <sys>/fs/cgroup, or one directory per v1
  // controller).
  struct stat st {};
  if (::stat((base + "/cgroup.controllers").c_str(), &st) == 0) {
    l.v2 = Mount{{}, base, "/"};
  } else {
    for (const char* c : {"cpuset", "memory", "cpuacct"})
      l.v1.push_back(Mount{{c}, base + "/" + c, "/"});
    if (::stat((base + "/unified/cgroup.controllers").c_str(), &st) == 0)
      l.v2 = Mount{{}, base + "/unified", "/"};
  }
  return l;
}

JobCgroup job_cgroup_of(std::string_view cgroup_text, const CgroupLayout& layout) {
  JobCgroup cg;
  for_each_cgroup_line(cgroup_text, [&](std::string_view controllers, std::string_view path) {
    auto j = slurm_job_of_cgroup_path(path);
    if (!j) return true;
    const std::string_view job_path = path.substr(0, j->prefix);
    if (j->uid) cg.uid = j->uid;
    if (cg.path.empty()) cg.path = std::string(job_path);
    if (controllers.empty()) {
      if (layout.v2) cg.v2 = dir_in(*layout.v2, job_path);
      return true;
    }
    for (const auto& m : layout.v1) {
      // The line names the hierarchy by its controllers ("cpuacct,cpu"): match any of them.
      bool same = false;
      std::string_view rest = controllers;
      while (!rest.empty() && !same) {
        const std::size_t comma = rest.find(',');
        same = has(m.controllers, rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      if (!same) continue;
      const std::string dir = dir_in(m, job_path);
      if (dir.empty()) continue;
      if (has(m.controllers, "cpuset")) cg.cpuset = dir;
      if (has(m.controllers, "memory")) cg.memory = dir;
      if (has(m.controllers, "cpuacct")) cg.cpuacct = dir;
    }
    return true;
  });
  return cg;
}

void complete_job_cgroup(JobCgroup& cg, const CgroupLayout& layout) {
  if (cg.path.empty()) return;
  for (const auto& m : layout.v1) {
    const bool cpuset = cg.cpuset.empty() && has(m.controllers, "cpuset");
    const bool memory = cg.memory.empty() && has(m.controllers, "memory");
    const bool cpuacct = cg.cpuacct.empty() && has(m.controllers, "cpuacct");
    if (!cpuset && !memory && !cpuacct) continue;
    const std::string dir = dir_in(m, cg.path);
    struct stat st {};
    if (dir.empty() || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (cpuset) cg.cpuset = dir;
    if (memory) cg.memory = dir;
    if (cpuacct) cg.cpuacct = dir;
  }
}

}  // namespace sonde
