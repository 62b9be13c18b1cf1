#pragma once
// `sonde report --prometheus`: a Slurm job's time series from Prometheus written as a
// multi-node run directory, which the report then reads like any other run.
#include <string>

#include "core/result.hpp"
#include "http/prometheus_api.hpp"
#include "views/prom_job.hpp"

namespace sonde::promq {

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
