#pragma once
// A Slurm job as Prometheus holds it (the per-job series of `sonde serve --per-job` and the
// node-level series, docs/prometheus.md): where and when it ran, its efficiency (`sonde
// jobstats`) and its time series as a multi-node run directory (`sonde report --prometheus`).
// Every query covers all of the job's nodes at once (`by (instance)`), so the number of
// requests does not grow with the nodes.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/nan.hpp"
#include "core/result.hpp"
#include "http/prometheus_api.hpp"

namespace sonde::promq {

struct JobQuery {
  std::string job;                 ///< Slurm job id (the `jobid` label)
  std::optional<double> from, to;  ///< epoch seconds; absent: found from the job's series
  double now = 0;                  ///< epoch seconds: the default `to`
  double lookback_s = 30 * 86400;  ///< how far back from `to` the job is searched for
};

struct JobNode {
  std::string instance;        ///< Prometheus' instance label
  std::string name;            ///< sonde_node_info's nodename, else the instance
  double cpus = kNaN;          ///< sonde_job_cpus
  double memory_limit = kNaN;  ///< bytes; NaN: none
  double node_cpus = kNaN;     ///< the node's CPUs
  double node_memory = kNaN;   ///< MemTotal, bytes
};

struct JobWindow {
  std::string job, user;
  double from = 0, to = 0;     ///< the job's first and last sample (or --from/--to)
  bool window_given = false;   ///< from and to came from the command line
  bool from_given = false;     ///< from came from the command line (the job's start)
  double scrape_s = 0;         ///< the scrape interval, estimated from the samples
  std::vector<JobNode> nodes;  ///< sorted by name
  /// The time the job's figures cover: to − from, plus one scrape interval when the start was
  /// found from the samples (the first sample counts the time before it).
  double elapsed_s() const { return to - from + (from_given ? 0 : scrape_s); }
};

/// Finds the job: its time range (coarse-to-fine count_over_time range queries when --from/--to
/// are not both given), its instances, their node names (sonde_node_info) and allocations.
/// An error names the query and Prometheus' URL; a job without series is Errc::unavailable.
Result<JobWindow> find_job(Api& api, const JobQuery& q);

/// The job's efficiency (docs/prometheus.md, "sonde jobstats"), as JSON.
Result<nlohmann::json> job_stats(Api& api, const JobWindow& w);
/// The same as a compact table for a terminal.
std::string job_stats_text(const nlohmann::json& stats);
/// The stats packed for Slurm's AdminComment (share/sonde/slurm/epilog-jobstats.sh):
/// `SONDE1:` + base64(gzip(compact JSON)), at most `max_bytes` long. When longer, the per-GPU
/// lists are left out, then the nodes (`nodes_omitted` says how many); the overall figures stay.
/// "" when even those do not fit.
std::string admin_comment(const nlohmann::json& stats, std::size_t max_bytes);

/// Writes the job as a multi-node run directory into `dir` (created; must not exist or be
/// empty): manifest.json with `multinode` and `nodes`, the aggregate perf_slurm.csv and
/// perf_system.csv, and nodes/<node>/perf_<level>.csv. `step`: the query step (0: chosen: never
/// finer than the scrape interval, at most `max_points` points per series and about 1,000,000
/// samples per query, i.e. 1,000 points per series for a 1,000-node job).
struct RunOptions {
  double step = 0;
  int max_points = 11000;
};
Result<void> write_job_run(Api& api, const JobWindow& w, const std::string& dir,
                           const RunOptions& options);

}  // namespace sonde::promq
