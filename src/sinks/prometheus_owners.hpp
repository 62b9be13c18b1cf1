#pragma once
// Per-user and per-Slurm-job usage for `sonde serve --per-user/--per-job`. The engine's levels
// are relative to one target, so these come from a scan of every pid on the node: CPU
// seconds (a counter accumulated from per-pid deltas), resident memory and process counts per
// uid and per job, with a cap on the number of label values.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/fs.hpp"

namespace sonde::prom {

/// One pid as seen by one scan.
struct PidRecord {
  int pid = 0;
  std::uint64_t starttime_ticks = 0;  ///< tells a reused pid from the old one
  std::uint32_t uid = 0;              ///< real uid
  std::optional<std::string> job;     ///< Slurm job id, when known
  double cpu_s = 0;                   ///< utime + stime, seconds
  std::uint64_t rss_bytes = 0;
};

/// One label value (a user name or job id, or "other") and its figures.
struct OwnerSeries {
  std::string key;
  double cpu_seconds_total = 0;  ///< CPU time of its processes since sonde first saw them
  double rss_bytes = 0;          ///< resident memory now
  double processes = 0;          ///< processes now
};

struct OwnerUsage {
  std::vector<OwnerSeries> users;  ///< sorted by key, "other" last when present
  std::vector<OwnerSeries> jobs;
  std::size_t users_folded = 0;  ///< users that exist now but are counted under "other"
  std::size_t jobs_folded = 0;
};

/// Pure aggregation over scans. A key gets its own series on first sight while fewer than
/// `max_series` are held; later keys are folded into "other" until they have no process left
/// (keys never move between their own series and "other", so every counter stays monotonic).
class OwnerAggregator {
 public:
  OwnerAggregator(bool users, bool jobs, std::size_t max_series);
  /// `user_name` maps a uid to its label value.
  const OwnerUsage& update(const std::vector<PidRecord>& pids,
                           const std::function<std::string(std::uint32_t)>& user_name);
  const OwnerUsage& usage() const { return usage_; }

 private:
  struct KeyState {
    bool own = false;  ///< its own series, else folded into "other"
    double cpu_total = 0;
  };
  struct Table {
    std::map<std::string, KeyState> keys;
    double other_cpu_total = 0;
    bool other_used = false;
    std::size_t own = 0;
  };
  void fold(Table& t, const std::map<std::string, OwnerSeries>& now,
            const std::map<std::string, double>& cpu_delta, std::vector<OwnerSeries>& out,
            std::size_t& folded);

  bool users_, jobs_;
  std::size_t max_series_;
  std::unordered_map<int, std::pair<std::uint64_t, double>> prev_cpu_;  ///< pid → (start, cpu)
  Table user_table_, job_table_;
  OwnerUsage usage_;
};

/// Reads every pid under `roots.proc` each scan (list_pids/read_pid): stat and statm
/// each time, status (uid) and the Slurm job (slurm_job_of_process) once per pid.
class OwnerScanner {
 public:
  OwnerScanner(Roots roots, bool users, bool jobs, std::size_t max_series);
  const OwnerUsage& scan();

 private:
  struct Known {
    std::uint64_t starttime_ticks = 0;
    std::uint32_t uid = 0;
    std::optional<std::string> job;
  };
  std::string user_name(std::uint32_t uid);

  Roots roots_;
  bool jobs_;
  bool slurm_cgroups_ = false;  ///< node_has_slurm_cgroups, refreshed every scan
  OwnerAggregator aggregator_;
  std::unordered_map<int, Known> known_;
  std::unordered_map<std::uint32_t, std::string> names_;
  std::vector<int> listing_;
  std::vector<PidRecord> records_;
  double clk_tck_;
};

/// The Slurm job id in /proc/<pid>/cgroup text when the process is in a job cgroup that
/// slurmstepd made, which no user can join or forge: cgroup v1 "/slurm[…]/uid_<u>/job_<id>/…" at
/// the top of a hierarchy, v2 "…/slurmstepd.scope/job_<id>/…" outside the user slices (systemd
/// delegates cgroups to users only under /user.slice, where a "job_<id>" could be anyone's).
std::optional<std::string> slurm_job_from_cgroup(std::string_view cgroup_text);

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
/// is a plain job id (digits, at most 20).
JobAttribution slurm_job_of_process(const std::string& pid_dir, bool slurm_cgroups);

}  // namespace sonde::prom
