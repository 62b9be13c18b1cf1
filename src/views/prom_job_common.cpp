// What the Prometheus views of a job share (views/prom_job_common.hpp).
#include "views/prom_job_common.hpp"

#include <cmath>

#include "core/fs.hpp"
#include "core/nan.hpp"

namespace sonde::promq {

std::string job_selector(const std::string& job) {
  return "{jobid=" + quote(job) + "}";
}

std::string instance_selector(const JobWindow& w) {
  std::vector<std::string> inst;
  for (const auto& n : w.nodes) inst.push_back(n.instance);
  return "{instance=~" + quote(exact_regex(inst)) + "}";
}

std::map<std::string, double> by_instance(const std::vector<Series>& v) {
  std::map<std::string, double> out;
  for (const auto& s : v)
    if (!s.samples.empty()) out[s.label("instance")] = s.samples.front().v;
  return out;
}

std::string safe_name(const std::string& s) {
  std::string out = node_dir_name(s);
  return out.empty() ? "node" : out;
}

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

double ratio(double a, double b) {
  return b > 0 && std::isfinite(a) ? a / b : kNaN;
}

}  // namespace sonde::promq
