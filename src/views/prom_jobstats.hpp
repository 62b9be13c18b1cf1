#pragma once
// `sonde jobstats` (docs/prometheus.md, "sonde jobstats"): a Slurm job's efficiency from
// Prometheus, as JSON and as a table for a terminal.
#include <string>

#include <nlohmann/json.hpp>

#include "core/result.hpp"
#include "http/prometheus_api.hpp"
#include "views/prom_job.hpp"

namespace sonde::promq {

/// The job's efficiency (docs/prometheus.md, "sonde jobstats"), as JSON.
Result<nlohmann::json> job_stats(Api& api, const JobWindow& w);
/// The same as a compact table for a terminal.
std::string job_stats_text(const nlohmann::json& stats);

}  // namespace sonde::promq
