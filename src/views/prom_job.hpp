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

}  // namespace sonde::promq
