#pragma once
// Per-user and per-Slurm-job usage for `sonde serve --per-user/--per-job`. The engine's levels
// are relative to one target, so these come from a scan of every pid on the node: CPU seconds
// and I/O bytes (counters accumulated from per-pid deltas), resident memory and process counts
// per uid and per job; per job also what its cgroup says (allocated CPUs, memory limit, per-CPU
// time) and the GPUs its processes hold, with a cap on the number of label values.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/fs.hpp"
#include "core/job_cgroup.hpp"
#include "core/slurm_job.hpp"

namespace sonde::prom {

/// One pid as seen by one scan.
struct PidRecord {
  int pid = 0;
  std::uint64_t starttime_ticks = 0;  ///< tells a reused pid from the old one
  std::uint32_t uid = 0;              ///< real uid
  int ppid = 0;                       ///< parent when first seen (a reaped child's reaper)
  std::uint64_t cminflt = 0;          ///< grows when the process reaps a child
  std::optional<std::string> job;     ///< Slurm job id, when known
  /// Where the job came from: a job cgroup (slurmstepd's, no user can forge it) or a
  /// SLURM_JOB_ID its owner may have set to anything (ranked after, budgeted per user).
  JobSource job_source = JobSource::none;
  double cpu_s = 0;  ///< utime + stime, seconds
  std::uint64_t rss_bytes = 0;
  /// /proc/<pid>/io read_bytes and write_bytes; nullopt when unreadable (then not counted).
  std::optional<std::uint64_t> io_read_bytes, io_write_bytes;
};

/// One GPU held by one job's processes in one scan (from gpu::process_use, src/cli/serve_gpus).
struct JobGpuUse {
  std::string job;
  int gpu = 0;                     ///< the device's index, as the `gpu` label of sonde_gpu_*
  double utilization_ratio = 0;    ///< 0..1; NaN when unknown
  double memory_bytes = 0;         ///< NaN when the driver does not say per process
  double power_watts = 0;          ///< the job's share of the device's power; NaN when unknown
  double energy_joules_delta = 0;  ///< its share of the device's energy since the last scan
};

/// What a job's cgroup (read once per job per scan) and its processes' environment say.
struct JobFacts {
  std::optional<double> cpus;                ///< allocated CPUs on this node
  std::optional<double> memory_limit_bytes;  ///< nullopt: unlimited or unknown
  /// Per-CPU time of the job's cgroup (cgroup v1 cpuacct.usage_percpu): CPU id → seconds since
  /// the cgroup was made. Empty where the cgroup does not give it.
  std::vector<std::pair<int, double>> core_seconds;
  std::optional<std::uint32_t> uid;  ///< from the cgroup path (v1 uid_<u>)
};

struct GpuSeries {
  int gpu = 0;
  double utilization_ratio = 0, memory_bytes = 0, power_watts = 0;
  double energy_joules_total = 0;
};

/// One label value (a user name or job id, or "other") and its figures.
struct OwnerSeries {
  std::string key;
  std::string user;              ///< jobs: the job's user name ("" for "other")
  double cpu_seconds_total = 0;  ///< CPU time of its processes since sonde first saw them
  double rss_bytes = 0;          ///< resident memory now
  double processes = 0;          ///< processes now
  // Jobs only:
  double io_read_bytes_total = 0, io_written_bytes_total = 0;
  std::optional<double> cpus, memory_limit_bytes;
  std::vector<std::pair<int, double>> core_seconds_total;  ///< by CPU id
  std::vector<GpuSeries> gpus;                             ///< by device index
};

struct OwnerUsage {
  std::vector<OwnerSeries> users;  ///< sorted by key, "other" last when present
  std::vector<OwnerSeries> jobs;
  std::size_t users_folded = 0;  ///< users that exist now but are counted under "other"
  std::size_t jobs_folded = 0;
};

/// Pure aggregation over scans. A key gets its own series on first sight while fewer than
/// `max_series` are held; later keys are folded into "other" until they have no process left
/// (a folded key never gets its own series back, so every counter stays monotonic).
/// Jobs: those of a job cgroup are admitted before SLURM_JOB_ID claims; claims are budgeted per
/// owner (a fair share of the series left by the cgroup jobs), and when the series are full a
/// cgroup job or an owner under their share takes the slot of the newest claim of the owner
/// with the most (that series ends; its later figures go to "other"). A job's owner (its `user`
/// label) is its cgroup's uid_<u>, else the uid of its oldest process that is not root's, kept
/// once known: running more processes in another user's job does not change it.
class OwnerAggregator {
 public:
  OwnerAggregator(bool users, bool jobs, std::size_t max_series);
  /// `user_name` maps a uid to its label value; `facts` and `gpus`: per job, where known.
  const OwnerUsage& update(const std::vector<PidRecord>& pids,
                           const std::function<std::string(std::uint32_t)>& user_name,
                           const std::map<std::string, JobFacts>& facts = {},
                           const std::vector<JobGpuUse>& gpus = {});
  const OwnerUsage& usage() const { return usage_; }

 private:
  struct Accum {
    double cpu = 0, io_read = 0, io_write = 0;
    std::map<int, double> core;        ///< CPU id → seconds
    std::map<int, double> gpu_energy;  ///< device → joules
  };
  struct KeyState {
    bool own = false;                    ///< its own series, else folded into "other"
    bool claim = false;                  ///< a job known only from SLURM_JOB_ID
    std::uint64_t seq = 0;               ///< order of first sight
    std::optional<std::uint32_t> owner;  ///< jobs: the uid of its oldest non-root process
    Accum total;
    std::map<int, double> core_prev;  ///< the cgroup's per-CPU seconds at the last scan
  };
  struct Table {
    std::map<std::string, KeyState> keys;
    Accum other;
    bool other_used = false;
    std::size_t own = 0;
    std::uint64_t next_seq = 0;
  };
  struct Now;  // one scan's figures of one key
  void admit(Table& t, std::map<std::string, Now>& now, bool jobs);
  void fold(Table& t, std::map<std::string, Now>& now, std::vector<OwnerSeries>& out,
            std::size_t& folded, bool jobs,
            const std::function<std::string(std::uint32_t)>& user_name);

  bool users_, jobs_;
  std::size_t max_series_;
  struct PidPrev {
    std::uint64_t start = 0;
    double cpu = 0;
    std::optional<std::uint64_t> io_read, io_write;
    int ppid = 0;
    std::uint64_t cminflt = 0;
  };
  std::unordered_map<int, PidPrev> prev_;
  struct Credit {  ///< I/O of a parent's children that are gone, already counted
    double read = 0, write = 0;
    int age = 0;  ///< scans since the last child went
  };
  std::unordered_map<int, Credit> credits_;  ///< by parent pid
  Table user_table_, job_table_;
  OwnerUsage usage_;
};

/// Reads the job's cgroup files: cpuset.cpus.effective (v2; v1 cpuset.effective_cpus or
/// cpuset.cpus), memory.max / memory.limit_in_bytes, cpuacct.usage_percpu (v1).
JobFacts read_job_cgroup(const JobCgroup& cg);

/// Figures a job's processes carry in their environment (the fallback where the cgroup has
/// none): SLURM_CPUS_ON_NODE, SLURM_MEM_PER_NODE (MiB), SLURM_MEM_PER_CPU (MiB).
struct JobEnvironment {
  std::optional<double> cpus;
  std::optional<double> mem_per_node_bytes, mem_per_cpu_bytes;
};
JobEnvironment job_environment(std::string_view environ_text);

/// Reads every pid under `roots.proc` each scan (list_pids/read_pid): stat, statm and status
/// (the uid) each time (and io for processes in a job); the Slurm job (slurm_job_of_process)
/// when a pid is new, execs (comm or stat's startstack changes) or changes uid; each job's
/// cgroup files once per job.
class OwnerScanner {
 public:
  OwnerScanner(Roots roots, bool users, bool jobs, std::size_t max_series);
  /// GPUs held by each job's processes (pids by job); called once per scan when set, also
  /// with no job (to follow the devices' energy counters).
  using GpuAttributor =
      std::function<std::vector<JobGpuUse>(const std::map<std::string, std::vector<int>>&)>;
  void set_gpu_attributor(GpuAttributor g) { gpus_ = std::move(g); }
  const OwnerUsage& scan();

 private:
  struct Known {
    std::uint64_t starttime_ticks = 0;
    std::uint32_t uid = 0;
    int ppid = 0;
    std::optional<std::string> job;
    JobSource job_source = JobSource::none;
    std::string comm;  ///< with exec_mark: changes when the process execs
    std::uint64_t exec_mark = 0;
  };
  struct JobInfo {  ///< what the scanner learnt of a job from its processes
    JobCgroup cgroup;
    JobEnvironment env;
    bool env_read = false;
  };
  std::string user_name(std::uint32_t uid);
  void learn_job(int pid, const std::string& job, const std::string& cgroup_text);

  Roots roots_;
  bool jobs_;
  bool slurm_cgroups_ = false;  ///< node_has_slurm_cgroups, refreshed every 5 s
  double slurm_cgroups_checked_ = -1e300;
  CgroupLayout layout_;
  OwnerAggregator aggregator_;
  GpuAttributor gpus_;
  std::unordered_map<int, Known> known_;
  std::unordered_map<std::uint32_t, std::string> names_;
  std::map<std::string, JobInfo> job_info_;
  std::vector<int> listing_;
  std::vector<PidRecord> records_;
  double clk_tck_;
};

// Which job a process belongs to: one rule for the slurm level, the agents and the exporter.
using sonde::JobAttribution;
using sonde::JobSource;
using sonde::node_has_slurm_cgroups;
using sonde::slurm_job_from_cgroup;
using sonde::slurm_job_of_process;

}  // namespace sonde::prom
