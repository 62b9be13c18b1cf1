#include "views/prom_job.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/base64.hpp"
#include "core/gzip.hpp"
#include "core/json_text.hpp"
#include "core/nan.hpp"
#include "core/summary.hpp"
#include "sinks/format.hpp"
#include "sinks/run_csv.hpp"

namespace sonde::promq {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
/// Samples one range query may return (nodes × points), about 30 MB of JSON.
constexpr double kMaxSamplesPerQuery = 1e6;

std::string job_selector(const std::string& job) {
  return "{jobid=" + quote(job) + "}";
}

std::string instance_selector(const JobWindow& w) {
  std::vector<std::string> inst;
  for (const auto& n : w.nodes) inst.push_back(n.instance);
  return "{instance=~" + quote(exact_regex(inst)) + "}";
}

/// The first value of each series by instance (instant queries).
std::map<std::string, double> by_instance(const std::vector<Series>& v) {
  std::map<std::string, double> out;
  for (const auto& s : v)
    if (!s.samples.empty()) out[s.label("instance")] = s.samples.front().v;
  return out;
}

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

/// node_dir_name, never empty.
std::string safe_name(const std::string& s) {
  std::string out = node_dir_name(s);
  return out.empty() ? "node" : out;
}
std::string iso_time(double t) {
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  ::gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

double ratio(double a, double b) {
  return b > 0 && std::isfinite(a) ? a / b : kNaN;
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
    return make_error(Errc::unavailable,
                      fmt::format("job {}: no series {} in Prometheus at {} between {} and {} UTC "
                                  "(is `sonde serve --per-job` scraped on the job's nodes? give "
                                  "--from/--to for an older job)",
                                  q.job, sel, api.url(), iso_time(a), iso_time(b)));
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

Result<nlohmann::json> job_stats(Api& api, const JobWindow& w) {
  const std::string J = job_selector(w.job);
  const std::string R = duration(w.to - w.from + 0.001);
  const double at = w.to;
  const double elapsed = w.elapsed_s();
  auto instant = [&](const std::string& q) -> Result<std::map<std::string, double>> {
    auto r = api.query(q, at);
    if (!r) return r.error();
    return by_instance(*r);
  };
  auto cpu = instant(
      fmt::format("max by (instance) (max_over_time(sonde_job_cpu_seconds_total{}[{}]))", J, R));
  if (!cpu) return cpu.error();
  auto mem = instant(
      fmt::format("max by (instance) (max_over_time(sonde_job_memory_used_bytes{}[{}]))", J, R));
  if (!mem) return mem.error();
  auto rd = instant(
      fmt::format("max by (instance) (max_over_time(sonde_job_io_read_bytes_total{}[{}]))", J, R));
  if (!rd) return rd.error();
  auto wr = instant(fmt::format(
      "max by (instance) (max_over_time(sonde_job_io_written_bytes_total{}[{}]))", J, R));
  if (!wr) return wr.error();
  // GPUs: per (instance, gpu).
  struct Gpu {
    double util = kNaN, mem = kNaN;
  };
  std::map<std::string, std::map<std::string, Gpu>> gpus;
  auto per_gpu = [&](const std::string& q, double Gpu::*field) -> Result<void> {
    auto r = api.query(q, at);
    if (!r) return r.error();
    for (const auto& s : *r)
      if (!s.samples.empty()) gpus[s.label("instance")][s.label("gpu")].*field = s.samples[0].v;
    return {};
  };
  if (auto ok = per_gpu(
          fmt::format(
              "max by (instance, gpu) (avg_over_time(sonde_job_gpu_utilization_ratio{}[{}]))", J,
              R),
          &Gpu::util);
      !ok)
    return ok.error();
  if (auto ok = per_gpu(
          fmt::format(
              "max by (instance, gpu) (max_over_time(sonde_job_gpu_memory_used_bytes{}[{}]))", J,
              R),
          &Gpu::mem);
      !ok)
    return ok.error();

  auto get = [](const std::map<std::string, double>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? kNaN : it->second;
  };
  nlohmann::json nodes = nlohmann::json::array();
  double all_cpus = 0, all_cpu_s = 0, all_mem = 0, all_limit = 0, all_rd = 0, all_wr = 0;
  bool limits_known = true, cpus_known = true;
  double gpu_util_sum = 0, gpu_mem_peak = kNaN;
  int gpu_count = 0;
  for (const auto& n : w.nodes) {
    nlohmann::json j;
    j["name"] = n.name;
    j["instance"] = n.instance;
    const double cpu_s = get(*cpu, n.instance);
    const double peak = get(*mem, n.instance);
    j["cpus"] = num(n.cpus);
    j["cpu_seconds"] = num(cpu_s);
    const double eff = ratio(cpu_s, n.cpus * elapsed);
    j["cpu_efficiency"] = num(eff);
    j["memory_peak_bytes"] = num(peak);
    j["memory_limit_bytes"] = num(n.memory_limit);
    j["memory_efficiency"] = num(ratio(peak, n.memory_limit));
    j["read_bytes"] = num(get(*rd, n.instance));
    j["written_bytes"] = num(get(*wr, n.instance));
    nlohmann::json gl = nlohmann::json::array();
    double node_util_sum = 0, node_mem_peak = kNaN;
    int node_gpus = 0;
    if (auto it = gpus.find(n.instance); it != gpus.end())
      for (const auto& [id, g] : it->second) {
        gl.push_back(
            {{"gpu", id}, {"utilization_mean", num(g.util)}, {"memory_peak_bytes", num(g.mem)}});
        if (std::isfinite(g.util)) node_util_sum += g.util, ++node_gpus;
        if (std::isfinite(g.mem) && !(g.mem <= node_mem_peak)) node_mem_peak = g.mem;
      }
    j["gpus"] = gl;
    TagInputs in;
    if (std::isfinite(eff)) in.cpu_mean_pct = eff * 100;
    if (std::isfinite(peak)) in.memory_peak_gib = peak / kGiB;
    if (std::isfinite(n.memory_limit)) in.memory_limit_gib = n.memory_limit / kGiB;
    if (node_gpus) in.gpu_util_mean_pct = node_util_sum / node_gpus * 100;
    if (std::isfinite(node_mem_peak)) in.gpu_mem_peak_gib = node_mem_peak / kGiB;
    j["tags"] = bottleneck_tags(in);
    nodes.push_back(j);

    if (std::isfinite(n.cpus))
      all_cpus += n.cpus;
    else
      cpus_known = false;
    if (std::isfinite(cpu_s)) all_cpu_s += cpu_s;
    if (std::isfinite(peak)) all_mem += peak;
    if (std::isfinite(n.memory_limit))
      all_limit += n.memory_limit;
    else
      limits_known = false;
    if (std::isfinite(get(*rd, n.instance))) all_rd += get(*rd, n.instance);
    if (std::isfinite(get(*wr, n.instance))) all_wr += get(*wr, n.instance);
    gpu_util_sum += node_util_sum;
    gpu_count += node_gpus;
    if (std::isfinite(node_mem_peak) && !(node_mem_peak <= gpu_mem_peak))
      gpu_mem_peak = node_mem_peak;
  }
  nlohmann::json o;
  o["nodes"] = w.nodes.size();
  o["cpus"] = cpus_known ? num(all_cpus) : nlohmann::json();
  o["cpu_seconds"] = all_cpu_s;
  const double eff = cpus_known ? ratio(all_cpu_s, all_cpus * elapsed) : kNaN;
  o["cpu_efficiency"] = num(eff);
  o["memory_peak_bytes"] = all_mem;  // the sum of the nodes' peaks
  o["memory_limit_bytes"] = limits_known ? num(all_limit) : nlohmann::json();
  o["memory_efficiency"] = limits_known ? num(ratio(all_mem, all_limit)) : nlohmann::json();
  o["read_bytes"] = all_rd;
  o["written_bytes"] = all_wr;
  o["gpus"] = gpu_count;
  o["gpu_utilization_mean"] = gpu_count ? num(gpu_util_sum / gpu_count) : nlohmann::json();
  o["gpu_memory_peak_bytes"] = num(gpu_mem_peak);
  TagInputs in;
  if (std::isfinite(eff)) in.cpu_mean_pct = eff * 100;
  // Memory: the node closest to its limit decides (a job is memory-bound where any node is).
  double worst = kNaN;
  for (const auto& n : nodes) {
    const auto& me = n["memory_efficiency"];
    if (me.is_number() && !(me.get<double>() <= worst)) {
      worst = me.get<double>();
      in.memory_peak_gib = n["memory_peak_bytes"].get<double>() / kGiB;
      in.memory_limit_gib = n["memory_limit_bytes"].get<double>() / kGiB;
    }
  }
  if (gpu_count) in.gpu_util_mean_pct = gpu_util_sum / gpu_count * 100;
  if (std::isfinite(gpu_mem_peak)) in.gpu_mem_peak_gib = gpu_mem_peak / kGiB;
  o["tags"] = bottleneck_tags(in);

  nlohmann::json out;
  out["job"] = w.job;
  out["user"] = w.user;
  out["prometheus"] = api.url();
  out["from"] = w.from;
  out["to"] = w.to;
  out["elapsed_s"] = elapsed;
  out["scrape_interval_s"] = w.scrape_s;
  out["overall"] = o;
  out["nodes"] = nodes;
  out["sonde_version"] = SONDE_VERSION;
  return out;
}

std::string job_stats_text(const nlohmann::json& s) {
  auto d = [](const nlohmann::json& v) { return v.is_number() ? v.get<double>() : kNaN; };
  auto pct = [&](const nlohmann::json& v) {
    const double x = d(v);
    return std::isfinite(x) ? fmt::format("{:.1f}%", x * 100) : std::string("-");
  };
  auto gib = [&](const nlohmann::json& v) {
    const double x = d(v);
    return std::isfinite(x) ? fmt::format("{:.2f}", x / kGiB) : std::string("-");
  };
  auto tags = [](const nlohmann::json& t) {
    std::string out;
    for (const auto& x : t) out += (out.empty() ? "" : ",") + x.get<std::string>();
    return out.empty() ? std::string("-") : out;
  };
  auto row = [&](const std::string& name, const nlohmann::json& n, const std::string& gpu_util,
                 const std::string& gpu_mem) {
    const double cpus = d(n["cpus"]);
    return fmt::format(
        "{:<14} {:>6} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>9}  {}\n", name,
        std::isfinite(cpus) ? fmt::format("{:g}", cpus) : "-",
        std::isfinite(d(n["cpu_seconds"])) ? fmt::format("{:.1f}", d(n["cpu_seconds"])) : "-",
        pct(n["cpu_efficiency"]), gib(n["memory_peak_bytes"]), gib(n["memory_limit_bytes"]),
        pct(n["memory_efficiency"]), gpu_util, gpu_mem, tags(n["tags"]));
  };
  std::string out = fmt::format(
      "Job {}{}: {} node(s), {} → {} UTC ({:.0f} s), from {}\n", s.value("job", std::string()),
      s.value("user", std::string()).empty() ? "" : " (" + s.value("user", std::string()) + ")",
      s["nodes"].size(), iso_time(d(s["from"])), iso_time(d(s["to"])), d(s["elapsed_s"]),
      s.value("prometheus", std::string()));
  out += fmt::format("{:<14} {:>6} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>9}  {}\n", "node", "cpus",
                     "cpu-s", "cpu eff", "mem GiB", "limit", "mem %", "gpus", "gpu util", "tags");
  for (const auto& n : s["nodes"]) {
    double u = 0, m = kNaN;
    int k = 0;
    for (const auto& g : n["gpus"]) {
      if (g["utilization_mean"].is_number()) u += g["utilization_mean"].get<double>(), ++k;
      if (g["memory_peak_bytes"].is_number() && !(g["memory_peak_bytes"].get<double>() <= m))
        m = g["memory_peak_bytes"].get<double>();
    }
    (void)m;
    out += row(n.value("name", std::string()), n, k ? std::to_string(n["gpus"].size()) : "-",
               k ? fmt::format("{:.1f}%", u / k * 100) : "-");
  }
  const auto& o = s["overall"];
  const int g = o.value("gpus", 0);
  out += row("overall", o, g ? std::to_string(g) : "-", pct(o["gpu_utilization_mean"]));
  for (const auto& n : s["nodes"])
    for (const auto& gp : n["gpus"])
      out += fmt::format("  {} gpu {}: utilisation {}, memory peak {} GiB\n",
                         n.value("name", std::string()), gp.value("gpu", std::string()),
                         pct(gp["utilization_mean"]), gib(gp["memory_peak_bytes"]));
  return out;
}

namespace {
std::string pack(const nlohmann::json& j) {
  return "SONDE1:" + base64_encode(gzip(json_text(j), 9));
}
}  // namespace

std::string admin_comment(const nlohmann::json& stats, std::size_t max_bytes) {
  std::string s = pack(stats);
  if (s.size() <= max_bytes) return s;
  nlohmann::json j = stats;
  for (auto& n : j["nodes"]) n.erase("gpus");
  s = pack(j);
  if (s.size() <= max_bytes) return s;
  j["nodes_omitted"] = j["nodes"].size();
  j["nodes"] = nlohmann::json::array();
  s = pack(j);
  return s.size() <= max_bytes ? s : std::string();
}

// ---- The run directory -------------------------------------------------------------------------
namespace {

/// Values of a range query on the grid start + k·step, k < n, per key.
using Grid = std::map<std::string, std::vector<double>>;

struct Axis {
  double start = 0, step = 1;
  std::size_t n = 0;
};

Grid to_grid(const std::vector<Series>& v, const Axis& a, const std::string& key2) {
  Grid g;
  for (const auto& s : v) {
    std::string key = s.label("instance");
    if (!key2.empty()) key += '\x1f' + s.label(key2);
    auto& col = g[key];
    if (col.empty()) col.assign(a.n, kNaN);
    for (const auto& p : s.samples) {
      const double k = std::round((p.t - a.start) / a.step);
      if (k >= 0 && k < static_cast<double>(a.n)) col[static_cast<std::size_t>(k)] = p.v;
    }
  }
  return g;
}

struct Column {
  std::string name;
  std::vector<double> v;
};

/// One node's table at one level.
struct NodeTable {
  std::vector<Column> cols;
  std::vector<double>* find(const std::string& name) {
    for (auto& c : cols)
      if (c.name == name) return &c.v;
    return nullptr;
  }
};

Result<void> write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f)
    return make_error(Errc::io,
                      fmt::format("cannot write {}: {}", p.string(), std::strerror(errno)));
  return {};
}

/// perf_<level>.csv text of `cols` on the axis; rows where every column is NaN are left out.
std::string csv_text(const std::vector<Column>& cols, const Axis& a, double t0, std::size_t& rows,
                     double& first_wc, double& last_wc) {
  std::vector<std::string> names;
  for (const auto& c : cols) names.push_back(c.name);
  std::string out;
  append_run_header(out, names);
  rows = 0;
  std::vector<double> values(cols.size());
  for (std::size_t k = 0; k < a.n; ++k) {
    bool any = false;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      values[i] = cols[i].v[k];
      any = any || std::isfinite(values[i]);
    }
    if (!any) continue;
    const double wc = a.start + static_cast<double>(k) * a.step;
    if (!rows) first_wc = wc;
    last_wc = wc;
    ++rows;
    append_run_row(out, wc - t0, wc, values);
  }
  return out;
}

}  // namespace

Result<void> write_job_run(Api& api, const JobWindow& w, const std::string& dir,
                           const RunOptions& options) {
  namespace fs = std::filesystem;
  const double range = std::max(w.to - w.from, 0.0);
  Axis a;
  a.start = w.from;
  // Never finer than the scrape interval; at most max_points per series, and at most about
  // kMaxSamplesPerQuery samples per query (a 1,000-node job gets 1,000 points per series).
  const int points = static_cast<int>(std::clamp<double>(
      kMaxSamplesPerQuery / std::max<double>(static_cast<double>(w.nodes.size()), 1), 100,
      options.max_points));
  a.step =
      options.step > 0 ? options.step : choose_step(range, std::max(w.scrape_s, 0.001), points);
  a.n = static_cast<std::size_t>(std::floor(range / a.step + 1e-9)) + 1;
  const double end = a.start + static_cast<double>(a.n - 1) * a.step;
  // Counters: a window of at least four scrapes, so that rate() has samples in each.
  const std::string W = duration(std::max(a.step, 4 * w.scrape_s));
  const std::string J = job_selector(w.job);
  const std::string N = instance_selector(w);

  struct Q {
    std::string level, column, query, key2;
    double scale;
  };
  const std::vector<Q> queries = {
      {"slurm", "cores",
       fmt::format("sum by (instance) (rate(sonde_job_cpu_seconds_total{}[{}]))", J, W), "", 1},
      {"slurm", "memory", fmt::format("sum by (instance) (sonde_job_memory_used_bytes{})", J), "",
       1 / kGiB},
      {"slurm", "io_read",
       fmt::format("sum by (instance) (rate(sonde_job_io_read_bytes_total{}[{}]))", J, W), "", 1},
      {"slurm", "io_write",
       fmt::format("sum by (instance) (rate(sonde_job_io_written_bytes_total{}[{}]))", J, W), "",
       1},
      {"slurm", "num_procs", fmt::format("sum by (instance) (sonde_job_processes{})", J), "", 1},
      {"slurm", "gpu_util_",
       fmt::format("sum by (instance, gpu) (sonde_job_gpu_utilization_ratio{})", J), "gpu", 100},
      {"slurm", "gpu_mem_",
       fmt::format("sum by (instance, gpu) (sonde_job_gpu_memory_used_bytes{})", J), "gpu",
       1 / kGiB},
      {"slurm", "gpu_power_",
       fmt::format("sum by (instance, gpu) (sonde_job_gpu_power_watts{})", J), "gpu", 1},
      {"system", "cpu_util_avg",
       fmt::format("max by (instance) (sonde_cpu_utilization_average_ratio{})", N), "", 100},
      {"system", "cpu_util_min",
       fmt::format("min by (instance) (sonde_cpu_utilization_ratio{})", N), "", 100},
      {"system", "cpu_util_max",
       fmt::format("max by (instance) (sonde_cpu_utilization_ratio{})", N), "", 100},
      {"system", "memory", fmt::format("max by (instance) (sonde_memory_used_bytes{})", N), "",
       1 / kGiB},
      {"system", "io_read",
       fmt::format("sum by (instance) (rate(sonde_disk_read_bytes_total{}[{}]))", N, W), "", 1},
      {"system", "io_write",
       fmt::format("sum by (instance) (rate(sonde_disk_written_bytes_total{}[{}]))", N, W), "", 1},
      {"system", "net_bytes_recv",
       fmt::format("sum by (instance) (rate(sonde_network_receive_bytes_total{}[{}]))", N, W), "",
       1},
      {"system", "net_bytes_sent",
       fmt::format("sum by (instance) (rate(sonde_network_transmit_bytes_total{}[{}]))", N, W), "",
       1},
      {"system", "num_procs", fmt::format("max by (instance) (sonde_processes{})", N), "", 1},
      {"system", "gpu_util_",
       fmt::format("max by (instance, gpu) (sonde_gpu_utilization_ratio{})", N), "gpu", 100},
      {"system", "gpu_mem_",
       fmt::format("max by (instance, gpu) (sonde_gpu_memory_used_bytes{})", N), "gpu", 1 / kGiB},
      {"system", "gpu_power_", fmt::format("max by (instance, gpu) (sonde_gpu_power_watts{})", N),
       "gpu", 1},
  };
  // tables[level][instance]
  std::map<std::string, std::map<std::string, NodeTable>> tables;
  std::map<std::string, std::map<std::string, int>> gpu_counts;  // level, instance
  nlohmann::json query_log = nlohmann::json::array();
  for (const auto& q : queries) {
    auto r = api.query_range(q.query, a.start, end, a.step);
    if (!r) return r.error();
    query_log.push_back(q.query);
    Grid g = to_grid(*r, a, q.key2);
    for (auto& [key, values] : g) {
      for (auto& v : values) v *= q.scale;
      const auto sep = key.find('\x1f');
      const std::string inst = key.substr(0, sep);
      std::string col = q.column;
      if (sep != std::string::npos) {
        std::string id = key.substr(sep + 1);
        if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
          id = safe_name(id);
        col += id;
      }
      tables[q.level][inst].cols.push_back({col, std::move(values)});
    }
  }
  // Derived columns: the job's cores → cpu_util_avg (% of its CPUs); GPU avg/min/max per node.
  for (const auto& n : w.nodes) {
    auto& t = tables["slurm"][n.instance];
    if (auto* cores = t.find("cores")) {
      std::vector<double> util(a.n, kNaN);
      for (std::size_t k = 0; k < a.n; ++k) util[k] = 100 * ratio((*cores)[k], n.cpus);
      std::erase_if(t.cols, [](const Column& c) { return c.name == "cores"; });
      t.cols.insert(t.cols.begin(), Column{"cpu_util_avg", std::move(util)});
    }
    for (const char* level : {"slurm", "system"}) {
      auto& lt = tables[level][n.instance];
      std::vector<const std::vector<double>*> utils;
      for (const auto& c : lt.cols)
        if (c.name.rfind("gpu_util_", 0) == 0) utils.push_back(&c.v);
      gpu_counts[level][n.instance] = static_cast<int>(utils.size());
      if (utils.empty()) continue;
      std::vector<double> avg(a.n, kNaN), mn(a.n, kNaN), mx(a.n, kNaN);
      for (std::size_t k = 0; k < a.n; ++k) {
        double sum = 0;
        int cnt = 0;
        for (const auto* u : utils)
          if (std::isfinite((*u)[k])) {
            sum += (*u)[k], ++cnt;
            mn[k] = std::isfinite(mn[k]) ? std::min(mn[k], (*u)[k]) : (*u)[k];
            mx[k] = std::isfinite(mx[k]) ? std::max(mx[k], (*u)[k]) : (*u)[k];
          }
        if (cnt) avg[k] = sum / cnt;
      }
      lt.cols.push_back({"gpu_util_avg", std::move(avg)});
      lt.cols.push_back({"gpu_util_min", std::move(mn)});
      lt.cols.push_back({"gpu_util_max", std::move(mx)});
    }
  }

  // The directory.
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec))
    return make_error(Errc::config, fmt::format("{}: exists and is not empty", dir));
  fs::create_directories(fs::path(dir) / "nodes", ec);
  if (ec) return make_error(Errc::io, fmt::format("cannot create {}: {}", dir, ec.message()));

  const std::vector<std::string> levels = {"slurm", "system"};
  nlohmann::json nodes_json = nlohmann::json::array();
  double sum_job_cpus = 0, sum_node_cpus = 0, sum_limit = 0, sum_mem = 0;
  bool limit_known = true;
  int total_gpus = 0;
  for (std::size_t i = 0; i < w.nodes.size(); ++i) {
    const auto& n = w.nodes[i];
    const fs::path nd = fs::path(dir) / "nodes" / n.name;
    fs::create_directories(nd, ec);
    if (ec)
      return make_error(Errc::io, fmt::format("cannot create {}: {}", nd.string(), ec.message()));
    nlohmann::json cbl = nlohmann::json::object();
    double first = kNaN, last = kNaN;
    std::size_t rows_max = 0;
    for (const auto& level : levels) {
      auto& t = tables[level][n.instance];
      std::size_t rows = 0;
      double f = kNaN, l = kNaN;
      if (auto ok =
              write_text(nd / ("perf_" + level + ".csv"), csv_text(t.cols, a, w.from, rows, f, l));
          !ok)
        return ok;
      nlohmann::json names = nlohmann::json::array();
      for (const auto& c : t.cols) names.push_back(c.name);
      cbl[level] = names;
      if (rows) {
        first = std::isfinite(first) ? std::min(first, f) : f;
        last = std::isfinite(last) ? std::max(last, l) : l;
      }
      rows_max = std::max(rows_max, rows);
    }
    const int node_gpus = gpu_counts["system"][n.instance];
    nlohmann::json ni;
    ni["host"] = n.name;
    ni["num_cpus"] = num(n.cpus);
    ni["num_system_cpus"] = num(n.node_cpus);
    ni["cpus_per_level"] = {{"slurm", {{"num_cpus", num(n.cpus)}}},
                            {"system", {{"num_cpus", num(n.node_cpus)}}}};
    ni["memory_limits"] = {{"slurm", num(n.memory_limit)}, {"system", num(n.node_memory)}};
    ni["num_gpus"] = node_gpus;
    nodes_json.push_back({{"name", n.name},
                          {"instance", n.instance},
                          {"head", i == 0},
                          {"node_info", ni},
                          {"clock_offset_s", 0.0},
                          {"status", "complete"},
                          {"reason", ""},
                          {"first_wallclock", num(first)},
                          {"last_wallclock", num(last)},
                          {"rows", rows_max},
                          {"columns_by_level", cbl}});
    if (std::isfinite(n.cpus)) sum_job_cpus += n.cpus;
    if (std::isfinite(n.node_cpus)) sum_node_cpus += n.node_cpus;
    if (std::isfinite(n.memory_limit))
      sum_limit += n.memory_limit;
    else
      limit_known = false;
    if (std::isfinite(n.node_memory)) sum_mem += n.node_memory;
    total_gpus += node_gpus;
  }

  // The aggregate levels on the common grid (Prometheus evaluates every series at the same
  // times): amounts summed, cpu_util_avg weighted by CPUs, gpu_util_avg by GPUs, min/max over
  // the nodes, cpu_util_node_min/max, nodes.
  std::size_t agg_rows = 0;
  for (const auto& level : levels) {
    std::vector<std::string> names;  // non-per-device columns in first-seen order
    for (const auto& n : w.nodes)
      for (const auto& c : tables[level][n.instance].cols) {
        const bool per_device = c.name.find_first_of("0123456789") != std::string::npos;
        if (!per_device && std::find(names.begin(), names.end(), c.name) == names.end())
          names.push_back(c.name);
      }
    // The nodes' tables of this level, looked up once (not per row).
    std::vector<NodeTable*> node_tables;
    for (const auto& n : w.nodes) node_tables.push_back(&tables[level][n.instance]);
    std::vector<Column> cols;
    for (const auto& name : names) {
      std::vector<double> v(a.n, kNaN);
      const bool weighted = name == "cpu_util_avg" || name == "gpu_util_avg";
      const bool is_min = name.ends_with("_min"), is_max = name.ends_with("_max");
      std::vector<const std::vector<double>*> node_cols;
      std::vector<double> weights;
      for (std::size_t i = 0; i < w.nodes.size(); ++i) {
        node_cols.push_back(node_tables[i]->find(name));
        const auto& n = w.nodes[i];
        double wt = name == "gpu_util_avg" ? gpu_counts[level][n.instance]
                    : level == "slurm"     ? n.cpus
                                           : n.node_cpus;
        weights.push_back(wt > 0 ? wt : 1);
      }
      for (std::size_t k = 0; k < a.n; ++k) {
        double acc = 0, wsum = 0;
        bool any = false;
        for (std::size_t i = 0; i < node_cols.size(); ++i) {
          const auto* c = node_cols[i];
          if (!c || !std::isfinite((*c)[k])) continue;
          const double x = (*c)[k];
          if (weighted) {
            acc += x * weights[i], wsum += weights[i];
          } else if (is_min) {
            acc = any ? std::min(acc, x) : x;
          } else if (is_max) {
            acc = any ? std::max(acc, x) : x;
          } else {
            acc += x;
          }
          any = true;
        }
        if (any) v[k] = weighted ? acc / wsum : acc;
      }
      cols.push_back({name, std::move(v)});
    }
    std::vector<double> nmin(a.n, kNaN), nmax(a.n, kNaN), count(a.n, kNaN);
    for (std::size_t k = 0; k < a.n; ++k) {
      int c = 0;
      for (auto* tp : node_tables) {
        auto& t = *tp;
        bool any = false;
        for (const auto& col : t.cols) any = any || std::isfinite(col.v[k]);
        if (any) ++c;
        if (auto* u = t.find("cpu_util_avg"); u && std::isfinite((*u)[k])) {
          nmin[k] = std::isfinite(nmin[k]) ? std::min(nmin[k], (*u)[k]) : (*u)[k];
          nmax[k] = std::isfinite(nmax[k]) ? std::max(nmax[k], (*u)[k]) : (*u)[k];
        }
      }
      if (c) count[k] = c;
    }
    cols.push_back({"cpu_util_node_min", std::move(nmin)});
    cols.push_back({"cpu_util_node_max", std::move(nmax)});
    cols.push_back({"nodes", std::move(count)});
    std::size_t rows = 0;
    double f = kNaN, l = kNaN;
    if (auto ok = write_text(fs::path(dir) / ("perf_" + level + ".csv"),
                             csv_text(cols, a, w.from, rows, f, l));
        !ok)
      return ok;
    agg_rows = std::max(agg_rows, rows);
  }

  nlohmann::json m;
  m["command"] = nlohmann::json::array({fmt::format("Slurm job {}", w.job)});
  m["mode"] = "prometheus";
  m["host"] = w.nodes.empty() ? std::string() : w.nodes.front().name;
  m["start_wallclock"] = w.from;
  m["end_wallclock"] = w.to;
  m["complete"] = true;
  m["interval"] = a.step;
  m["levels"] = levels;
  m["files"] = {{"slurm", "perf_slurm.csv"}, {"system", "perf_system.csv"}};
  m["ticks"] = agg_rows;
  m["sonde_version"] = SONDE_VERSION;
  nlohmann::json ni;
  ni["host"] = m["host"];
  ni["num_cpus"] = sum_job_cpus > 0 ? nlohmann::json(sum_job_cpus) : nlohmann::json();
  ni["num_system_cpus"] = sum_node_cpus > 0 ? nlohmann::json(sum_node_cpus) : nlohmann::json();
  ni["cpus_per_level"] = {{"slurm", {{"num_cpus", ni["num_cpus"]}}},
                          {"system", {{"num_cpus", ni["num_system_cpus"]}}}};
  ni["memory_limits"] = {
      {"slurm", limit_known && sum_limit > 0 ? nlohmann::json(sum_limit) : nlohmann::json()},
      {"system", sum_mem > 0 ? nlohmann::json(sum_mem) : nlohmann::json()}};
  ni["num_gpus"] = total_gpus;
  m["node_info"] = ni;
  m["multinode"] = {{"job", w.job},
                    {"launcher", nlohmann::json::array()},
                    {"aggregate_levels", levels},
                    {"grid", "prometheus"}};
  m["nodes"] = nodes_json;
  m["prometheus"] = {{"url", api.url()},
                     {"job", w.job},
                     {"user", w.user},
                     {"step_s", a.step},
                     {"scrape_interval_s", w.scrape_s},
                     {"rate_window", W},
                     {"queries", query_log}};
  return write_text(fs::path(dir) / "manifest.json", json_text(m, 1) + "\n");
}

}  // namespace sonde::promq
