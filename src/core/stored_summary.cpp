// The summary of a stored run (core/stored_summary.hpp), its text for multi-node runs' nodes.
#include "core/stored_summary.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/nan.hpp"
#include "core/units.hpp"

namespace sonde {

namespace {

/// One node of a multi-node run (summarize_run's `nodes` entry), one line.
std::string node_line(const nlohmann::json& n) {
  auto num = [&](const char* k) -> std::optional<double> {
    return n.contains(k) && n[k].is_number() ? std::optional<double>(n[k].get<double>())
                                             : std::nullopt;
  };
  std::string out = fmt::format(
      "  {:<12} {:<9}", n.value("name", std::string()) + (n.value("head", false) ? " (head)" : ""),
      n.value("status", std::string("complete")));
  out += fmt::format("  {:>5} rows", n.value("rows", 0));
  if (auto c = num("cpu_mean_cores"))
    out += fmt::format("  CPU mean {:.2f} peak {:.2f} of {:g} cores", *c,
                       num("cpu_peak_cores").value_or(0), num("num_cpus").value_or(0));
  if (auto m = num("memory_peak_gib"))
    out += num("memory_limit_gib")
               ? fmt::format("  memory peak {:.3f} of {:.1f} GiB", *m, *num("memory_limit_gib"))
               : fmt::format("  memory peak {:.3f} GiB", *m);
  if (auto o = num("clock_offset_s")) out += fmt::format("  clock {:+.1f} ms", *o * 1000);
  const std::string reason = n.value("reason", std::string());
  if (!reason.empty()) out += "  (" + reason + ")";
  return out + "\n";
}

}  // namespace

std::string summary_nodes_text(const nlohmann::json& summary) {
  if (!summary.contains("nodes") || !summary["nodes"].is_array() || summary["nodes"].empty())
    return {};
  std::string out = fmt::format("nodes ({}, figures of their {} level):\n", summary["nodes"].size(),
                                summary.value("node_level", std::string("slurm")));
  for (const auto& n : summary["nodes"]) out += node_line(n);
  return out;
}

// ---- the summary of a stored run ----------------------------------------------------------------

namespace {
nlohmann::json num_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();
}

double json_number(const nlohmann::json& j, const char* key, double fallback) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return fallback;
}
}  // namespace

double level_num_cpus(const nlohmann::json& node, Level level) {
  const std::string name(level_name(level));
  if (node.is_object() && node.contains("cpus_per_level") && node["cpus_per_level"].is_object() &&
      node["cpus_per_level"].contains(name)) {
    const double n = json_number(node["cpus_per_level"][name], "num_cpus", kNaN);
    if (std::isfinite(n) && n > 0) return n;
  }
  return json_number(node, level == Level::system ? "num_system_cpus" : "num_cpus", kNaN);
}

nlohmann::json run_node_info(const RunData& run) {
  const nlohmann::json& m = run.manifest;
  nlohmann::json node =
      m.contains("node_info") && m["node_info"].is_object() ? m["node_info"] : nlohmann::json();
  if (run.nodes.empty()) return node;
  if (!node.is_object()) node = nlohmann::json::object();
  std::vector<Level> levels = {Level::slurm, Level::system};
  if (m.contains("multinode") && m["multinode"].is_object() &&
      m["multinode"].contains("aggregate_levels") &&
      m["multinode"]["aggregate_levels"].is_array()) {
    levels.clear();
    for (const auto& l : m["multinode"]["aggregate_levels"])
      if (l.is_string())
        if (auto lv = parse_level(l.get<std::string>())) levels.push_back(*lv);
  }
  double gpus = 0;
  for (const RunData& n : run.nodes) gpus += json_number(n.manifest["node_info"], "num_gpus", 0);
  node["num_gpus"] = gpus;
  for (Level l : levels) {
    const std::string name(level_name(l));
    double cpus = 0, mem = 0;
    bool all_cpus = true, all_mem = true;
    for (const RunData& n : run.nodes) {
      const nlohmann::json& ni = n.manifest["node_info"];
      const double c = level_num_cpus(ni, l);
      if (std::isfinite(c) && c > 0)
        cpus += c;
      else
        all_cpus = false;
      const double b = ni.contains("memory_limits") && ni["memory_limits"].is_object()
                           ? json_number(ni["memory_limits"], name.c_str(), kNaN)
                           : kNaN;
      if (std::isfinite(b) && b > 0)
        mem += b;
      else
        all_mem = false;
    }
    if (!node.contains("cpus_per_level") || !node["cpus_per_level"].is_object())
      node["cpus_per_level"] = nlohmann::json::object();
    if (!node.contains("memory_limits") || !node["memory_limits"].is_object())
      node["memory_limits"] = nlohmann::json::object();
    if (all_cpus)
      node["cpus_per_level"][name] = {{"num_cpus", cpus}};
    else
      node["cpus_per_level"].erase(name);
    if (all_mem)
      node["memory_limits"][name] = mem;
    else
      node["memory_limits"].erase(name);
    if (l == Level::system && all_cpus) node["num_system_cpus"] = cpus;
  }
  return node;
}

namespace {

/// Row range [first, last) of the table inside the wallclock window.
std::pair<std::size_t, std::size_t> window_rows(const LevelTable& t,
                                                std::optional<std::pair<double, double>> w) {
  if (!w) return {0, t.rows.size()};
  std::size_t first = t.rows.size(), last = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const double wc = t.rows[i][1];
    if (wc >= w->first && wc <= w->second) {
      first = std::min(first, i);
      last = i + 1;
    }
  }
  if (first >= last) return {0, 0};
  return {first, last};
}

/// Statistics of one column over rows [first, last), each value weighted by the time since the
/// previous row (the first row of the run by the interval).
ColumnStats column_stat(const LevelTable& t, std::size_t col, std::size_t first, std::size_t last,
                        double interval) {
  ColumnStats s;
  for (std::size_t i = first; i < last; ++i) {
    const double dt = i == 0 ? interval : t.rows[i][0] - t.rows[i - 1][0];
    s.add(t.rows[i][col], dt);
  }
  return s;
}

/// The GPUs a level used in rows [first, last): those where it held memory; at the system level
/// every GPU. The one definition of "the GPUs used" for the summaries, the report and Jupyter.
std::vector<int> used_devices(const LevelTable& t, std::size_t first, std::size_t last,
                              double interval) {
  std::vector<int> out;
  for (int d = 0;; ++d) {
    const auto mem = t.find("gpu_mem_" + std::to_string(d));
    if (!mem && !t.find("gpu_util_" + std::to_string(d))) break;
    if (t.level == Level::system) {
      out.push_back(d);
      continue;
    }
    if (!mem) continue;
    const ColumnStats m = column_stat(t, *mem, first, last, interval);
    if (m.count && m.max > 0) out.push_back(d);
  }
  return out;
}

/// Per row, over the GPUs `devices` of `prefix<N>` columns: their mean (utilisation,
/// bandwidth: the mean over the GPUs used) or their largest (memory: the peak on one GPU). Runs
/// with only a `prefix avg` column (no per-device ones) fall back to it; nullopt without either.
std::optional<ColumnStats> devices_stat(const LevelTable& t, const std::string& prefix,
                                        const std::vector<int>& devices, bool largest,
                                        std::size_t first, std::size_t last, double interval) {
  std::vector<std::size_t> cols;
  for (int d : devices)
    if (auto c = t.find(prefix + std::to_string(d))) cols.push_back(*c);
  if (cols.empty()) {
    if (!t.find(prefix + "0"))
      if (auto c = t.find(prefix + "avg")) return column_stat(t, *c, first, last, interval);
    return std::nullopt;
  }
  ColumnStats s;
  for (std::size_t i = first; i < last; ++i) {
    double acc = largest ? -1.0 : 0.0;
    int n = 0;
    for (auto c : cols) {
      const double v = t.rows[i][c];
      if (!std::isfinite(v)) continue;
      acc = largest ? std::max(acc, v) : acc + v;
      ++n;
    }
    const double dt = i == 0 ? interval : t.rows[i][0] - t.rows[i - 1][0];
    s.add(n ? (largest ? acc : acc / n) : kNaN, dt);
  }
  return s;
}

std::optional<double> opt_number(const nlohmann::json& v) {
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

// The inputs of bottleneck_tags for one level, as summary_json computes them from a live run:
// the GPUs a non-system level used are those where it held memory; utilisation is the mean of
// their per-device means, memory the peak on one device.
TagInputs level_tag_inputs(const LevelTable& t, const nlohmann::json& groups,
                           const nlohmann::json& node, std::size_t first, std::size_t last,
                           double interval) {
  TagInputs in;
  auto g = [&](const char* name, const char* stat) -> std::optional<double> {
    if (!groups.contains(name)) return std::nullopt;
    return opt_number(groups[name][stat]);
  };
  in.cpu_mean_pct = g("cpu", "mean");
  in.memory_peak_gib = g("memory", "max");
  in.memory_limit_gib = g("memory", "limit");
  in.gpu_memory_gib =
      opt_number(node.contains("gpu_memory_gib") ? node["gpu_memory_gib"] : nlohmann::json());
  double util = 0, mem_peak = 0;
  int util_n = 0, used = 0;
  for (int d = 0;; ++d) {
    auto mc = t.find("gpu_mem_" + std::to_string(d));
    if (!mc) break;
    const ColumnStats m = column_stat(t, *mc, first, last, interval);
    const bool held = m.count && m.max > 0;
    if (t.level != Level::system && !held) continue;
    ++used;
    if (m.count) mem_peak = std::max(mem_peak, m.max);
    if (auto uc = t.find("gpu_util_" + std::to_string(d))) {
      const ColumnStats u = column_stat(t, *uc, first, last, interval);
      if (u.mean()) util += *u.mean(), ++util_n;
    }
  }
  if (used) in.gpu_mem_peak_gib = mem_peak;
  if (util_n) in.gpu_util_mean_pct = util / util_n;
  return in;
}

std::string manifest_string(const nlohmann::json& m, const char* key) {
  return m.is_object() && m.contains(key) && m[key].is_string() ? m[key].get<std::string>()
                                                                : std::string();
}

nlohmann::json group_json(const ColumnStats& s, double scale, std::optional<double> limit,
                          const char* unit) {
  nlohmann::json g;
  g["mean"] = num_or_null(s.mean() ? std::optional<double>(*s.mean() * scale) : std::nullopt);
  g["min"] = s.count ? num_or_null(s.min * scale) : nlohmann::json();
  g["max"] = s.count ? num_or_null(s.max * scale) : nlohmann::json();
  g["limit"] = num_or_null(limit);
  g["unit"] = unit;
  return g;
}
}  // namespace

nlohmann::json summarize_run(const RunData& run, std::optional<std::pair<double, double>> window);

namespace {
// The per-node part of a multi-node run's summary (summarize_run's `nodes`) and the
// node-imbalance tag. A node's figures come from its slurm level (the job's processes on the
// node), else its system level; a window (a notebook cell, head clock) is moved onto each node's
// clock by its offset.
void add_nodes_summary(nlohmann::json& j, const RunData& run,
                       std::optional<std::pair<double, double>> window) {
  Level level = Level::system;
  for (const RunData& n : run.nodes)
    if (n.find(Level::slurm)) level = Level::slurm;
  const std::string lname(level_name(level));
  nlohmann::json nodes = nlohmann::json::array();
  std::vector<TagInputs::NodeCpu> cpu;
  for (const RunData& n : run.nodes) {
    const nlohmann::json& entry =
        n.manifest.contains("node") ? n.manifest["node"] : nlohmann::json::object();
    const double offset = json_number(entry, "clock_offset_s", 0);
    std::optional<std::pair<double, double>> w;
    if (window) w = std::make_pair(window->first + offset, window->second + offset);
    const nlohmann::json s = summarize_run(n, w);
    nlohmann::json N;
    N["name"] = n.node;
    N["head"] = entry.value("head", false);
    N["status"] = entry.contains("status") ? entry["status"] : nlohmann::json("complete");
    N["reason"] = manifest_string(entry, "reason");
    N["clock_offset_s"] =
        entry.contains("clock_offset_s") ? entry["clock_offset_s"] : nlohmann::json();
    N["first_wallclock"] =
        entry.contains("first_wallclock") ? entry["first_wallclock"] : nlohmann::json();
    N["last_wallclock"] =
        entry.contains("last_wallclock") ? entry["last_wallclock"] : nlohmann::json();
    const LevelTable* t = n.find(level);
    N["level"] = lname;
    N["rows"] = t ? t->rows.size() : 0;
    const nlohmann::json L = s["levels"].contains(lname) ? s["levels"][lname] : nlohmann::json();
    auto group = [&](const char* g, const char* stat) -> nlohmann::json {
      if (L.is_object() && L["groups"].contains(g)) return L["groups"][g][stat];
      return nullptr;
    };
    auto total = [&](const char* key) -> nlohmann::json {
      if (L.is_object() && L["totals"].contains(key)) return L["totals"][key];
      return nullptr;
    };
    N["num_cpus"] = L.is_object() ? L["num_cpus"] : nlohmann::json();
    N["cpu_mean_pct"] = group("cpu", "mean");
    N["cpu_peak_pct"] = group("cpu", "max");
    N["cpu_mean_cores"] = group("cpu_cores", "mean");
    N["cpu_peak_cores"] = group("cpu_cores", "max");
    N["memory_peak_gib"] = group("memory", "max");
    N["memory_limit_gib"] = group("memory", "limit");
    N["read_bytes"] = total("read_bytes");
    N["written_bytes"] = total("written_bytes");
    const nlohmann::json& ni = n.manifest["node_info"];
    N["num_gpus"] = ni.contains("num_gpus") ? ni["num_gpus"] : nlohmann::json(0);
    N["gpu_util_mean"] = group("gpu_util", "mean");
    N["tags"] = L.is_object() ? L["tags"] : nlohmann::json::array();
    nodes.push_back(N);
    // The imbalance rule's inputs: the node's mean and how often it was busy.
    if (t && N["cpu_mean_pct"].is_number()) {
      const auto c = t->find("cpu_util_avg");
      const auto [first, last] = window_rows(*t, w);
      std::size_t busy = 0, measured = 0;
      for (std::size_t i = first; c && i < last; ++i) {
        const double v = t->rows[i][*c];
        if (!std::isfinite(v)) continue;
        ++measured;
        if (v > kNodeBusyPct) ++busy;
      }
      cpu.push_back({N["cpu_mean_pct"].get<double>(),
                     measured ? static_cast<double>(busy) / static_cast<double>(measured) : 0.0});
    }
  }
  j["nodes"] = nodes;
  j["node_level"] = lname;
  TagInputs in;
  in.node_cpu = cpu;
  if (node_imbalance(in.node_cpu)) {
    j["tags"].push_back("node-imbalance");
    if (j["levels"].contains(lname)) j["levels"][lname]["tags"].push_back("node-imbalance");
  }
}
}  // namespace

nlohmann::json summarize_run(const RunData& run, std::optional<std::pair<double, double>> window) {
  const nlohmann::json& m = run.manifest;
  const nlohmann::json node = run_node_info(run);
  const double interval = json_number(m, "interval", kNaN);
  const nlohmann::json stored =
      m.contains("summary") && m["summary"].is_object() ? m["summary"] : nlohmann::json();

  nlohmann::json j;
  j["command"] = m.contains("command") ? m["command"] : nlohmann::json::array();
  j["exit_status"] = m.contains("exit_status") ? m["exit_status"] : nlohmann::json();
  j["host"] = m.value("host", std::string());
  j["run_dir"] = run.source;
  j["start_wallclock"] = m.contains("start_wallclock") ? m["start_wallclock"] : nlohmann::json();
  j["end_wallclock"] = m.contains("end_wallclock") ? m["end_wallclock"] : nlohmann::json();
  j["window"] = window ? nlohmann::json::array({window->first, window->second}) : nlohmann::json();
  if (m.contains("summary") && stored.contains("user_cpu_s") && !window) {
    j["user_cpu_s"] = stored["user_cpu_s"];
    j["system_cpu_s"] = stored.value("system_cpu_s", nlohmann::json());
  } else {
    j["user_cpu_s"] = nullptr;
    j["system_cpu_s"] = nullptr;
  }
  // The kernel's memory peaks of the whole run (not of a window).
  for (const char* key : {"max_rss_gib", "memory_peak_cgroup_gib"})
    j[key] =
        !window && stored.contains(key) && stored[key].is_number() ? stored[key] : nlohmann::json();

  nlohmann::json levels = nlohmann::json::object();
  for (const LevelTable& t : run.levels) {
    const auto [first, last] = window_rows(t, window);
    const std::string lname(level_name(t.level));
    const double cpus = level_num_cpus(node, t.level);
    // The first row covers the time since the run's baseline tick when the manifest has it (`sonde
    // run`; the live summary weighs it so), else one interval.
    double first_dt = interval;
    if (const double base = json_number(m, "baseline_time", kNaN);
        std::isfinite(base) && !t.rows.empty() && t.rows[0][0] > base)
      first_dt = t.rows[0][0] - base;
    double limit_bytes = kNaN;
    if (node.contains("memory_limits") && node["memory_limits"].is_object())
      limit_bytes = json_number(node["memory_limits"], lname.c_str(), kNaN);
    nlohmann::json L;
    L["ticks"] = last - first;
    L["duration_s"] = last > first ? nlohmann::json(t.rows[last - 1][1] - t.rows[first][1] +
                                                    (std::isfinite(interval) ? interval : 0))
                                   : nlohmann::json(0.0);
    L["num_cpus"] = num_or_null(cpus);
    nlohmann::json groups = nlohmann::json::object();
    if (auto c = t.find("cpu_util_avg")) {
      const ColumnStats s = column_stat(t, *c, first, last, first_dt);
      groups["cpu"] = group_json(s, 1, 100.0, "%");
      groups["cpu_cores"] = group_json(s, cpus / 100, cpus, "cores");
      L["cpu_seconds"] = s.count ? num_or_null(s.integral / 100 * cpus) : nlohmann::json();
    }
    if (auto c = t.find("memory")) {
      const ColumnStats s = column_stat(t, *c, first, last, first_dt);
      groups["memory"] = group_json(
          s, 1, limit_bytes > 0 ? std::optional<double>(limit_bytes / kGiB) : std::nullopt, "GiB");
    }
    // GPUs: over the GPUs the level used, utilisation and bandwidth their mean, memory the peak
    // on one GPU (what the live summary and the tags say).
    const std::vector<int> used = used_devices(t, first, last, first_dt);
    if (t.find("gpu_mem_0") || t.find("gpu_util_0")) L["gpus_used"] = used.size();
    if (auto s = devices_stat(t, "gpu_util_", used, false, first, last, first_dt))
      groups["gpu_util"] = group_json(*s, 1, 100.0, "%");
    if (auto s = devices_stat(t, "gpu_band_", used, false, first, last, first_dt))
      groups["gpu_band"] = group_json(*s, 1, 100.0, "%");
    if (auto s = devices_stat(t, "gpu_mem_", used, true, first, last, first_dt)) {
      const double gpu_gib = json_number(node, "gpu_memory_gib", kNaN);
      groups["gpu_mem"] =
          group_json(*s, 1, gpu_gib > 0 ? std::optional<double>(gpu_gib) : std::nullopt, "GiB");
    }
    L["groups"] = groups;
    L["tags"] = bottleneck_tags(level_tag_inputs(t, groups, node, first, last, first_dt));
    nlohmann::json totals = nlohmann::json::object();
    const std::pair<const char*, const char*> total_cols[] = {
        {"read_bytes", "io_read"},
        {"written_bytes", "io_write"},
        {"read_ops", "io_read_count"},
        {"write_ops", "io_write_count"},
        {"net_sent_bytes", "net_bytes_sent"},
        {"net_recv_bytes", "net_bytes_recv"},
        {"net_sent_packets", "net_packets_sent"},
        {"net_recv_packets", "net_packets_recv"}};
    for (const auto& [key, col] : total_cols)
      if (auto c = t.find(col)) totals[key] = column_stat(t, *c, first, last, first_dt).integral;
    L["totals"] = totals;
    levels[lname] = L;
  }
  // node-saturated (summary_json's rule): each lower level beside the node's mean.
  if (levels.contains("system") && levels["system"].contains("groups") &&
      levels["system"]["groups"].contains("cpu")) {
    const auto node_mean = opt_number(levels["system"]["groups"]["cpu"]["mean"]);
    for (auto& [lname, L] : levels.items()) {
      if (lname == "system" || !L.contains("groups") || !L["groups"].contains("cpu")) continue;
      const auto mean = opt_number(L["groups"]["cpu"]["mean"]);
      const auto cpus = opt_number(L.contains("num_cpus") ? L["num_cpus"] : nlohmann::json());
      std::optional<double> cores;
      if (mean && cpus) cores = *mean / 100 * *cpus;
      if (node_saturated(node_mean, mean, cores)) L["tags"].push_back("node-saturated");
    }
  }
  j["levels"] = levels;

  // The top-level figures: the program's level (process), else the node, as summary_json.
  const LevelTable* main =
      run.find(Level::process) ? run.find(Level::process) : run.find(Level::system);
  if (!main && !run.levels.empty()) main = &run.levels.front();
  const std::string mname = main ? std::string(level_name(main->level)) : std::string("system");
  const nlohmann::json ML = levels.contains(mname) ? levels[mname] : nlohmann::json::object();
  auto group = [&](const char* g, const char* stat) -> nlohmann::json {
    if (ML.contains("groups") && ML["groups"].contains(g)) return ML["groups"][g][stat];
    return nullptr;
  };
  auto total = [&](const nlohmann::json& L, const char* key) -> nlohmann::json {
    if (L.contains("totals") && L["totals"].contains(key)) return L["totals"][key];
    return nullptr;
  };
  j["level"] = mname;
  j["ticks"] = ML.value("ticks", 0);
  j["num_cpus"] = ML.contains("num_cpus") ? ML["num_cpus"] : nlohmann::json();
  double wall = kNaN;
  if (window) {
    wall = window->second - window->first;
  } else if (stored.contains("wall_s") && stored["wall_s"].is_number()) {
    wall = stored["wall_s"].get<double>();
  } else if (m.contains("end_wallclock") && m["end_wallclock"].is_number() &&
             m.contains("start_wallclock") && m["start_wallclock"].is_number()) {
    wall = m["end_wallclock"].get<double>() - m["start_wallclock"].get<double>();
  } else if (main && !main->rows.empty()) {
    wall = main->rows.back()[1] - main->rows.front()[1];
  }
  j["wall_s"] = num_or_null(wall);
  j["cpu_mean_cores"] = group("cpu_cores", "mean");
  j["cpu_peak_cores"] = group("cpu_cores", "max");
  j["cpu_seconds"] = ML.contains("cpu_seconds") ? ML["cpu_seconds"] : nlohmann::json();
  // CPU time the run measured after its last row (summary_json's cpu_carried_s): in the whole
  // run's figures, as `sonde run` printed them; a window holds rows only.
  const bool same_level = stored.is_object() && stored.contains("level") &&
                          stored["level"].is_string() && stored["level"] == mname;
  const double carried = !window && same_level ? json_number(stored, "cpu_carried_s", 0.0) : 0.0;
  j["cpu_carried_s"] = std::isfinite(carried) && carried > 0 ? carried : 0.0;
  if (j["cpu_carried_s"].get<double>() > 0) {
    const double c = j["cpu_carried_s"].get<double>();
    if (j["cpu_seconds"].is_number()) j["cpu_seconds"] = j["cpu_seconds"].get<double>() + c;
    // The mean with the carried time spread over the rows' span is the live summary's (the span
    // of its first tick is not in the rows).
    if (stored.contains("cpu_mean_cores") && stored["cpu_mean_cores"].is_number())
      j["cpu_mean_cores"] = stored["cpu_mean_cores"];
  }
  j["memory_peak_gib"] = group("memory", "max");
  j["memory_limit_gib"] = group("memory", "limit");
  j["read_bytes"] = total(ML, "read_bytes");
  j["written_bytes"] = total(ML, "written_bytes");
  const nlohmann::json SL = levels.contains("system") ? levels["system"] : nlohmann::json::object();
  j["net_sent_bytes"] = total(SL, "net_sent_bytes");
  j["net_recv_bytes"] = total(SL, "net_recv_bytes");
  // GPUs, as summary_json defines them: the GPUs the level used, their mean utilisation, the
  // peak memory on one of them.
  j["gpus_used"] = ML.contains("gpus_used") ? ML["gpus_used"] : nlohmann::json();
  j["gpu_util_mean"] = group("gpu_util", "mean");
  j["gpu_band_mean"] = group("gpu_band", "mean");
  j["gpu_mem_peak_gib"] = group("gpu_mem", "max");

  // Tags: the rules of summary_json (core/summary.cpp: bottleneck_tags) at the main level.
  j["tags"] = ML.contains("tags") ? ML["tags"] : nlohmann::json::array();
  if (mname != "system" && levels.contains("system") && levels["system"].contains("groups") &&
      levels["system"]["groups"].contains("cpu"))
    j["node_cpu_mean_pct"] = levels["system"]["groups"]["cpu"]["mean"];
  // The run's process table, as `sonde run` kept it (the whole run's: not for a window).
  if (!window && stored.is_object() && stored.contains("processes"))
    j["processes"] = stored["processes"];
  // The phases of the program's marks, likewise.
  if (!window && stored.is_object() && stored.contains("phases")) j["phases"] = stored["phases"];
  if (!run.nodes.empty()) add_nodes_summary(j, run, window);
  return j;
}

}  // namespace sonde
