// `sonde jobstats` (views/prom_jobstats.hpp): the job's efficiency from instant queries, and its
// table for a terminal.
#include "views/prom_jobstats.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/nan.hpp"
#include "core/summary.hpp"
#include "core/time_text.hpp"
#include "views/prom_job_common.hpp"

namespace sonde::promq {

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
      s["nodes"].size(), calendar_time(d(s["from"]), true), calendar_time(d(s["to"]), true),
      d(s["elapsed_s"]), s.value("prometheus", std::string()));
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

}  // namespace sonde::promq
