#pragma once
// Which Slurm job a process belongs to: its job cgroup (made by slurmstepd, which no user can
// join or forge) where the node puts jobs into cgroups, else SLURM_JOB_ID in its environment.
// Used by the slurm level (core/proc_scanner.cpp) and by `sonde agent` (docs/multinode.md).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/fs.hpp"

namespace sonde {

/// The environment variable that marks sonde's own multi-node machinery (the launcher and the
/// agents it starts): a process whose environment has it is never a member of the slurm level.
inline constexpr const char* kAgentMarkerEnv = "SONDE_AGENT_OF_JOB";

/// The Slurm job id in /proc/<pid>/cgroup text when the process is in a job cgroup that
/// slurmstepd made: cgroup v1 "/slurm[…]/uid_<u>/job_<id>/…" at the top of a hierarchy, v2
/// "…/slurmstepd.scope/job_<id>/…" outside the user slices (systemd delegates cgroups to users
/// only under /user.slice, where a "job_<id>" could be anyone's).
std::optional<std::string> slurm_job_from_cgroup(std::string_view cgroup_text);

/// A job cgroup in one cgroup path (the third field of a /proc/<pid>/cgroup line), by the rule
/// above: the one place that decides which cgroup paths are a job's (slurm_job_from_cgroup and
/// the exporter's job directories, sinks/prometheus_owners.cpp, both use it).
struct JobCgroupPath {
  std::string id;                    ///< the job id (1 to 20 digits)
  std::size_t prefix = 0;            ///< length of the path up to and including "job_<id>"
  std::optional<std::uint32_t> uid;  ///< v1: the <u> of "uid_<u>", when it is a number
};
std::optional<JobCgroupPath> slurm_job_of_cgroup_path(std::string_view path);

/// Calls `f(controllers, path)` for each "hierarchy-id:controllers:path" line of
/// /proc/<pid>/cgroup text (v2's line has empty controllers), until `f` returns false.
void for_each_cgroup_line(std::string_view cgroup_text,
                          const std::function<bool(std::string_view, std::string_view)>& f);

/// Whether this node puts Slurm jobs into cgroups (then every process of a job is in its job's
/// cgroup): v2 `<sys>/fs/cgroup/system.slice/slurmstepd.scope`, or v1
/// `<sys>/fs/cgroup/<controller>/slurm*`.
bool node_has_slurm_cgroups(const Roots& roots);

/// Where a process' job came from.
enum class JobSource { none, cgroup, environment };

struct JobAttribution {
  std::optional<std::string> job;
  JobSource source = JobSource::none;
};

/// The Slurm job of the process at `pid_dir` (/proc/<pid>): its job cgroup when it has one;
/// else, only on a node without Slurm cgroups (`slurm_cgroups` false), SLURM_JOB_ID from its
/// environment — which its owner can set to anything, so that fallback is claimable — when it
/// is a plain job id (digits, at most 20). `environ_text`, when given, is the process'
/// environment already read (it is then not read again); `cgroup_text`, when given, receives
/// its cgroup file (the exporter reads the job's cgroup directories from it).
JobAttribution slurm_job_of_process(const std::string& pid_dir, bool slurm_cgroups,
                                    const std::string* environ_text = nullptr,
                                    std::string* cgroup_text = nullptr);

/// Whether `id` is a plain Slurm job id: 1 to 20 digits.
bool is_plain_job_id(std::string_view id);

}  // namespace sonde
