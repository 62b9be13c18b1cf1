#pragma once
// What the Prometheus views of a job (views/prom_job.hpp, prom_jobstats.hpp, prom_job_run.hpp)
// share: the job's and its nodes' selectors, values by instance, node names and numbers as JSON.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/units.hpp"
#include "http/prometheus_api.hpp"
#include "views/prom_job.hpp"

namespace sonde::promq {

/// `{jobid="<job>"}`.
std::string job_selector(const std::string& job);
/// `{instance=~"<the job's instances>"}`.
std::string instance_selector(const JobWindow& w);
/// The first value of each series by instance (instant queries).
std::map<std::string, double> by_instance(const std::vector<Series>& v);
/// node_dir_name, never empty.
std::string safe_name(const std::string& s);
/// A number as JSON, null when it is not finite.
nlohmann::json num(double v);
/// a / b, NaN unless b > 0 and a is finite.
double ratio(double a, double b);

}  // namespace sonde::promq
