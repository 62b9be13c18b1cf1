// `sonde report --prometheus` (views/prom_job_run.hpp): a job's range queries on one grid,
// written as a multi-node run directory.
#include "views/prom_job_run.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "core/nan.hpp"
#include "sinks/run_csv.hpp"
#include "views/prom_job_common.hpp"

namespace sonde::promq {
namespace {

/// Samples one range query may return (nodes × points), about 30 MB of JSON.
constexpr double kMaxSamplesPerQuery = 1e6;

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

/// One range query of the run: its column (a prefix when per GPU: `key2` is then the label that
/// names the device) at a level, and the factor to the column's unit.
struct Query {
  std::string level, column, query, key2;
  double scale;
};

/// The query texts: `agg` by instance of the metric `metric` under the selector `sel` (a gauge),
/// of its rate over `window` (a counter), or by instance and GPU (a per-GPU gauge).
std::string gauge(const char* agg, const char* metric, const std::string& sel) {
  return fmt::format("{} by (instance) ({}{})", agg, metric, sel);
}
std::string rate(const char* agg, const char* metric, const std::string& sel,
                 const std::string& window) {
  return fmt::format("{} by (instance) (rate({}{}[{}]))", agg, metric, sel, window);
}
std::string per_gpu(const char* agg, const char* metric, const std::string& sel) {
  return fmt::format("{} by (instance, gpu) ({}{})", agg, metric, sel);
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

  const std::vector<Query> queries = {
      {"slurm", "cores", rate("sum", "sonde_job_cpu_seconds_total", J, W), "", 1},
      {"slurm", "memory", gauge("sum", "sonde_job_memory_used_bytes", J), "", 1 / kGiB},
      {"slurm", "io_read", rate("sum", "sonde_job_io_read_bytes_total", J, W), "", 1},
      {"slurm", "io_write", rate("sum", "sonde_job_io_written_bytes_total", J, W), "", 1},
      {"slurm", "num_procs", gauge("sum", "sonde_job_processes", J), "", 1},
      {"slurm", "gpu_util_", per_gpu("sum", "sonde_job_gpu_utilization_ratio", J), "gpu", 100},
      {"slurm", "gpu_mem_", per_gpu("sum", "sonde_job_gpu_memory_used_bytes", J), "gpu", 1 / kGiB},
      {"slurm", "gpu_power_", per_gpu("sum", "sonde_job_gpu_power_watts", J), "gpu", 1},
      {"system", "cpu_util_avg", gauge("max", "sonde_cpu_utilization_average_ratio", N), "", 100},
      {"system", "cpu_util_min", gauge("min", "sonde_cpu_utilization_ratio", N), "", 100},
      {"system", "cpu_util_max", gauge("max", "sonde_cpu_utilization_ratio", N), "", 100},
      {"system", "memory", gauge("max", "sonde_memory_used_bytes", N), "", 1 / kGiB},
      {"system", "io_read", rate("sum", "sonde_disk_read_bytes_total", N, W), "", 1},
      {"system", "io_write", rate("sum", "sonde_disk_written_bytes_total", N, W), "", 1},
      {"system", "net_bytes_recv", rate("sum", "sonde_network_receive_bytes_total", N, W), "", 1},
      {"system", "net_bytes_sent", rate("sum", "sonde_network_transmit_bytes_total", N, W), "", 1},
      {"system", "num_procs", gauge("max", "sonde_processes", N), "", 1},
      {"system", "gpu_util_", per_gpu("max", "sonde_gpu_utilization_ratio", N), "gpu", 100},
      {"system", "gpu_mem_", per_gpu("max", "sonde_gpu_memory_used_bytes", N), "gpu", 1 / kGiB},
      {"system", "gpu_power_", per_gpu("max", "sonde_gpu_power_watts", N), "gpu", 1},
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
