#pragma once
// A Slurm job's cgroup directories: where each cgroup hierarchy is mounted (from
// /proc/self/mountinfo) and, from a job process's /proc/<pid>/cgroup, the directory of its
// `job_<id>` cgroup in each. Used by the exporter's per-job series (sinks/prometheus_owners) and
// by the slurm level, whose figures come from the job's cgroup where the node has one
// (core/proc_scanner).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.hpp"

namespace sonde {

/// Where each cgroup controller's hierarchy is mounted (from /proc/self/mountinfo), to find a
/// job's cgroup directory from a /proc/<pid>/cgroup path.
struct CgroupLayout {
  struct Mount {
    std::vector<std::string> controllers;  ///< v1 only
    std::string dir;                       ///< where its files are (re-rooted)
    std::string root;                      ///< the cgroup path mounted there ("/" usually)
  };
  std::optional<Mount> v2;  ///< the unified hierarchy
  std::vector<Mount> v1;
  /// Reads `<proc>/self/mountinfo` (mounts under /sys re-rooted at `roots.sys`); without it,
  /// the usual places under `<sys>/fs/cgroup`.
  static CgroupLayout discover(const Roots& roots);
};

/// A job's cgroup directories (the `job_<id>` level), by hierarchy; empty when unknown.
struct JobCgroup {
  std::string path;    ///< the job's cgroup path (…/job_<id>), as /proc/<pid>/cgroup names it
  std::string v2;      ///< unified hierarchy
  std::string cpuset;  ///< v1 controllers
  std::string memory;
  std::string cpuacct;
  std::optional<std::uint32_t> uid;  ///< v1 path's uid_<u>
  bool empty() const { return v2.empty() && cpuset.empty() && memory.empty() && cpuacct.empty(); }
};
/// The job cgroup directories of a process from its /proc/<pid>/cgroup text.
JobCgroup job_cgroup_of(std::string_view cgroup_text, const CgroupLayout& layout);

/// Fills in the v1 directories `cg` (found from one process) lacks, by the job's path, where that
/// directory exists: Slurm makes the same `…/job_<id>` path in every hierarchy it uses, and a
/// process of the job can be in it in some only (on a v1 node, slurmstepd is in the step's freezer
/// and cpuset cgroups, while jobacct_gather/cgroup puts only the tasks into cpuacct and memory).
void complete_job_cgroup(JobCgroup& cg, const CgroupLayout& layout);

}  // namespace sonde
