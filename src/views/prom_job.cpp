// Finding a Slurm job in Prometheus (views/prom_job.hpp): its time range, instances, node names
// and allocations.
#include "views/prom_job.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/nan.hpp"
#include "core/time_text.hpp"
#include "views/prom_job_common.hpp"

namespace sonde::promq {
namespace {

/// Bucketed sample counts: (first, last) evaluation times with samples of `sel` in
/// (t − s, t], over (lo, hi]. nullopt: no sample.
Result<std::optional<std::pair<double, double>>> sample_buckets(Api& api, const std::string& sel,
                                                                double lo, double hi, double s) {
  const double start = lo + s;
  const double end = std::max(hi, start);
  auto r = api.query_range(fmt::format("sum(count_over_time({}[{}]))", sel, duration(s)), start,
                           end + s * 0.999, s);
  if (!r) return r.error();
  std::optional<std::pair<double, double>> out;
  for (const auto& series : *r)
    for (const auto& p : series.samples) {
      if (!(p.v > 0)) continue;
      if (!out)
        out = std::make_pair(p.t, p.t);
      else
        out->first = std::min(out->first, p.t), out->second = std::max(out->second, p.t);
    }
  return out;
}

/// The exact first or last sample time of `sel` in (lo, hi] (raw samples of that short window).
Result<std::optional<double>> edge_sample(Api& api, const std::string& sel, double lo, double hi,
                                          bool first) {
  auto r = api.query(fmt::format("{}[{}]", sel, duration(hi - lo)), hi);
  if (!r) return r.error();
  std::optional<double> out;
  for (const auto& s : *r)
    for (const auto& p : s.samples)
      if (!out || (first ? p.t < *out : p.t > *out)) out = p.t;
  return out;
}

}  // namespace

Result<JobWindow> find_job(Api& api, const JobQuery& q) {
  JobWindow w;
  w.job = q.job;
  if (q.job.empty()) return make_error(Errc::config, "jobstats: expected a job id");
  const std::string sel = "sonde_job_processes" + job_selector(q.job);
  double to = q.to.value_or(q.now);
  double from = q.from.value_or(to - q.lookback_s);
  if (!(to > from))
    return make_error(Errc::config,
                      fmt::format("--from {} is not before --to {}", api_time(from), api_time(to)));
  w.window_given = q.from && q.to;
  w.from_given = q.from.has_value();
  auto not_found = [&](double a, double b) {
    return make_error(
        Errc::unavailable,
        fmt::format("job {}: no series {} in Prometheus at {} between {} and {} UTC "
                    "(is `sonde serve --per-job` scraped on the job's nodes? give "
                    "--from/--to for an older job)",
                    q.job, sel, api.url(), calendar_time(a, true), calendar_time(b, true)));
  };
  if (!w.window_given) {
    // Coarse to fine: buckets of s seconds with samples, then the first and last buckets in
    // finer buckets, then the exact first and last samples of the job.
    double s = std::max(std::ceil((to - from) / 1000), 1.0);
    auto b = sample_buckets(api, sel, from, to, s);
    if (!b) return b.error();
    if (!*b) return not_found(from, to);
    double first_hi = (*b)->first, last_hi = (*b)->second;
    while (s > 1) {
      const double s2 = std::max(std::ceil(s / 1000), 1.0);
      auto f = sample_buckets(api, sel, first_hi - s, first_hi, s2);
      if (!f) return f.error();
      auto l = sample_buckets(api, sel, last_hi - s, last_hi, s2);
      if (!l) return l.error();
      if (!*f || !*l) return not_found(from, to);  // gone meanwhile (retention)
      first_hi = (*f)->first;
      last_hi = (*l)->second;
      s = s2;
    }
    auto f = edge_sample(api, sel, first_hi - s, first_hi, true);
    if (!f) return f.error();
    auto l = edge_sample(api, sel, last_hi - s, last_hi, false);
    if (!l) return l.error();
    if (!*f || !*l) return not_found(from, to);
    if (!q.from) from = **f;
    if (!q.to) to = **l;
    if (to < from) to = from;
  }
  w.from = from;
  w.to = to;
  const double range = to - from + 0.001;
  const std::string R = duration(range);
  const double at = to;

  // The instances (and the user) from the job's series; the scrape interval from their counts.
  auto counts = api.query(fmt::format("count_over_time({}[{}])", sel, R), at);
  if (!counts) return counts.error();
  if (counts->empty()) return not_found(from, to);
  std::map<std::string, double> per_instance;
  for (const auto& s : *counts) {
    const std::string inst = s.label("instance");
    if (s.samples.empty()) continue;
    per_instance[inst] = std::max(per_instance[inst], s.samples.front().v);
    if (w.user.empty()) w.user = s.label("user");
  }
  // An instance's n samples lie within the job's window, so (to − from) / (n − 1) is at most
  // its scrape interval: exact for an instance that lasted the whole job, larger for one where
  // the job started late or ended early (a median over instances took those: a job that ended
  // on two of three nodes at half time got twice the interval). The smallest bound is the
  // estimate.
  w.scrape_s = 0;
  for (const auto& [inst, n] : per_instance)
    if (n > 1) {
      const double bound = (to - from) / (n - 1);
      if (w.scrape_s == 0 || bound < w.scrape_s) w.scrape_s = bound;
    }
  if (!(w.scrape_s > 0)) w.scrape_s = 15;  // one sample each: Prometheus' default interval
  for (const auto& [inst, n] : per_instance) w.nodes.push_back(JobNode{inst, inst});

  const std::string J = job_selector(q.job);
  const std::string N = instance_selector(w);
  struct Fill {
    std::string query;
    double JobNode::*field;
  };
  const Fill fills[] = {
      {fmt::format("max by (instance) (max_over_time(sonde_job_cpus{}[{}]))", J, R),
       &JobNode::cpus},
      {fmt::format("max by (instance) (max_over_time(sonde_job_memory_limit_bytes{}[{}]))", J, R),
       &JobNode::memory_limit},
      {fmt::format("count by (instance) (last_over_time(sonde_cpu_utilization_ratio{}[{}]))", N, R),
       &JobNode::node_cpus},
      {fmt::format("max by (instance) (max_over_time(sonde_memory_total_bytes{}[{}]))", N, R),
       &JobNode::node_memory},
  };
  for (const auto& f : fills) {
    auto r = api.query(f.query, at);
    if (!r) return r.error();
    const auto m = by_instance(*r);
    for (auto& n : w.nodes)
      if (auto it = m.find(n.instance); it != m.end()) n.*(f.field) = it->second;
  }
  auto info = api.query(fmt::format("last_over_time(sonde_node_info{}[{}])", N, R), at);
  if (!info) return info.error();
  std::map<std::string, std::string> names;
  for (const auto& s : *info)
    if (!s.label("nodename").empty()) names[s.label("instance")] = s.label("nodename");
  std::set<std::string> used;
  for (auto& n : w.nodes) {
    if (auto it = names.find(n.instance); it != names.end()) n.name = it->second;
    n.name = safe_name(n.name);
    // Two instances with one hostname (containers): told apart by their instance.
    if (!used.insert(n.name).second) {
      n.name = safe_name(n.name + "_" + n.instance);
      used.insert(n.name);
    }
  }
  std::sort(w.nodes.begin(), w.nodes.end(),
            [](const JobNode& a, const JobNode& b) { return a.name < b.name; });
  return w;
}

}  // namespace sonde::promq
