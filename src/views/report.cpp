#include "views/report.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>

#include <fmt/format.h>

#include "core/base64.hpp"
#include "core/fs.hpp"
#include "core/gzip.hpp"
#include "core/json_text.hpp"
#include "core/nan.hpp"
#include "core/units.hpp"
#include "views/report_assets.hpp"

namespace sonde {
namespace {

/// A value with `digits` significant digits, as short as JSON allows ("1.23e6", "0.5", "0").
void append_compact(std::string& out, double v, int digits) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  if (v == 0) {
    out += '0';
    return;
  }
  char buf[40];
  auto res = fmt::format_to_n(buf, sizeof buf - 1, "{:.{}g}", v, digits);
  std::string_view s(buf, res.size);
  const auto e = s.find('e');
  if (e == std::string_view::npos) {
    out += s;
    return;
  }
  // "1.23e+06" → "1.23e6", "4.5e-05" → "4.5e-5"
  out += s.substr(0, e + 1);
  std::size_t i = e + 1;
  if (s[i] == '+') {
    ++i;
  } else if (s[i] == '-') {
    out += '-';
    ++i;
  }
  while (i + 1 < s.size() && s[i] == '0') ++i;
  out += s.substr(i);
}

/// Seconds since t0 with millisecond resolution, trailing zeros dropped.
void append_time(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[40];
  auto res = fmt::format_to_n(buf, sizeof buf - 1, "{:.3f}", v);
  std::string_view s(buf, res.size);
  while (s.back() == '0') s.remove_suffix(1);
  if (s.back() == '.') s.remove_suffix(1);
  out += s;
}

/// JSON text that is safe inside <script>: `<` only occurs in strings, where \u003c means the
/// same, so no `</script>` or `<!--` can end or disturb the element.
std::string script_safe(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (char c : json) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

/// gzip (RFC 1952) of `text`, then base64: what DecompressionStream("gzip") reads back in the
/// browser. The numbers of a long run compress about threefold.
std::string gzip_base64(const std::string& text) {
  // Level 1: on these numbers it is 10x faster than the default level for 12 % more bytes
  // (bench/report).
  const std::string gz = gzip(text, 1);
  if (gz.empty()) return {};
  return base64_encode(gz);
}

double json_number(const nlohmann::json& j, const char* key) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return kNaN;
}
// The energy collector's figures (docs/energy.md): its domains name the series of the energy
// charts, and each level's energy (the last value of its cumulative energy_joules_<i> columns,
// summed over the domains of node_info.energy.counted) goes to the totals table with kWh and CO2.
std::vector<std::string> energy_domains(const nlohmann::json& node, const char* key) {
  std::vector<std::string> out;
  if (!node.contains("energy") || !node["energy"].is_object() || !node["energy"].contains(key) ||
      !node["energy"][key].is_array())
    return out;
  for (const auto& d : node["energy"][key])
    out.push_back(d.is_string() ? d.get<std::string>() : "");
  return out;
}

void label_energy_series(nlohmann::json& charts, const std::vector<std::string>& domains) {
  for (auto& chart : charts)
    for (auto& s : chart["series"]) {
      const std::string col = s["column"].get<std::string>();
      for (const std::string prefix : {"energy_power_", "energy_joules_"}) {
        if (col.rfind(prefix, 0) != 0) continue;
        const std::string rest = col.substr(prefix.size());
        if (rest.empty() || !std::all_of(rest.begin(), rest.end(), ::isdigit)) continue;
        const std::size_t i = std::stoul(rest);
        if (i < domains.size()) s["label"] = domains[i];
      }
    }
}

nlohmann::json level_energy(const LevelTable& t, const nlohmann::json& node) {
  const auto domains = energy_domains(node, "domains");
  const auto counted = energy_domains(node, "counted");
  double total = 0;
  bool any = false;
  for (std::size_t i = 0; i < domains.size(); ++i) {
    if (std::find(counted.begin(), counted.end(), domains[i]) == counted.end()) continue;
    const auto c = t.find(fmt::format("energy_joules_{}", i));
    if (!c) continue;
    double last = kNaN;
    for (const auto& row : t.rows)
      if (*c < row.size() && std::isfinite(row[*c]))
        last = std::max(std::isnan(last) ? 0 : last, row[*c]);
    if (std::isnan(last)) continue;
    total += last;
    any = true;
  }
  if (!any) return nullptr;
  double intensity = kNaN;
  if (node["energy"].contains("carbon_intensity_g_per_kwh") &&
      node["energy"]["carbon_intensity_g_per_kwh"].is_number())
    intensity = node["energy"]["carbon_intensity_g_per_kwh"].get<double>();
  nlohmann::json j = {{"joules", total}, {"kwh", total / 3.6e6}};
  j["co2_g"] = std::isfinite(intensity) ? nlohmann::json(total / 3.6e6 * intensity) : nullptr;
  return j;
}

/// The `levels` list of the page's data: per level its limits, resolved charts, times (seconds
/// since `t0`) and columns.
void append_levels(std::string& out, const RunData& run, const nlohmann::json& node, double t0,
                   const ReportOptions& options) {
  const auto domains = energy_domains(node, "domains");
  out += '[';
  bool first_level = true;
  for (const LevelTable& t : run.levels) {
    if (!first_level) out += ',';
    first_level = false;
    const std::string lname(level_name(t.level));
    nlohmann::json limits;
    double mem = kNaN;
    if (node.contains("memory_limits") && node["memory_limits"].is_object())
      mem = json_number(node["memory_limits"], lname.c_str()) / kGiB;
    limits["memory_limit"] = std::isfinite(mem) && mem > 0 ? nlohmann::json(mem) : nlohmann::json();
    const double gpu = json_number(node, "gpu_memory_gib");
    limits["gpu_memory"] = std::isfinite(gpu) && gpu > 0 ? nlohmann::json(gpu) : nlohmann::json();
    const double cpus = level_num_cpus(node, t.level);
    limits["cpu_count"] = std::isfinite(cpus) ? nlohmann::json(cpus) : nlohmann::json();

    nlohmann::json charts = resolve_charts(options.charts, t.columns);
    label_energy_series(charts, domains);
    fmt::format_to(std::back_inserter(out), "{{\"level\":\"{}\",\"limits\":{},\"charts\":{},",
                   lname, json_text(limits), json_text(charts));
    out += "\"t\":[";
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      if (i) out += ',';
      append_time(out, t.rows[i][1] - t0);
    }
    out += "],\"cols\":{";
    for (std::size_t c = 2; c < t.columns.size(); ++c) {
      if (c > 2) out += ',';
      out += json_text(nlohmann::json(t.columns[c]));
      out += ":[";
      for (std::size_t i = 0; i < t.rows.size(); ++i) {
        if (i) out += ',';
        append_compact(out, t.rows[i][c], options.digits);
      }
      out += ']';
    }
    out += "}}";
  }
  out += ']';
}
}  // namespace

std::string report_data_json(const RunData& run, const ReportOptions& options) {
  const nlohmann::json& m = run.manifest;
  const nlohmann::json node = run_node_info(run);
  // Time origin: the start of the run, else the first row.
  double t0 = json_number(m, "start_wallclock");
  if (!std::isfinite(t0)) {
    t0 = std::numeric_limits<double>::infinity();
    for (const auto& t : run.levels)
      if (!t.rows.empty()) t0 = std::min(t0, t.rows.front()[1]);
    if (!std::isfinite(t0)) t0 = 0;
  }
  nlohmann::json meta;
  meta["command"] = m.contains("command") ? m["command"] : nlohmann::json::array();
  meta["exit_status"] = m.contains("exit_status") ? m["exit_status"] : nlohmann::json();
  meta["host"] = m.value("host", std::string());
  meta["mode"] = m.value("mode", std::string());
  meta["interval"] = m.contains("interval") ? m["interval"] : nlohmann::json();
  meta["start_wallclock"] = t0;
  meta["end_wallclock"] = m.contains("end_wallclock") ? m["end_wallclock"] : nlohmann::json();
  meta["complete"] = m.contains("complete") ? m["complete"] : nlohmann::json();
  meta["notes"] = m.contains("notes") && m["notes"].is_array() ? m["notes"] : nlohmann::json();
  meta["sonde_version"] = m.value("sonde_version", std::string());
  meta["source"] = run.source;
  meta["node"] = node;
  nlohmann::json energy = nlohmann::json::object();
  for (const LevelTable& t : run.levels)
    if (auto e = level_energy(t, node); !e.is_null()) energy[std::string(level_name(t.level))] = e;
  meta["energy"] = energy;
  if (m.contains("multinode")) meta["multinode"] = m["multinode"];
  nlohmann::json cells = nlohmann::json::array();
  for (const auto& c : run.cells)
    cells.push_back({{"index", c.index},
                     {"start", c.start_wallclock - t0},
                     {"end", c.end_wallclock - t0},
                     {"code", c.code}});

  std::string out;
  out.reserve(1 << 20);
  out += "{\"meta\":";
  out += json_text(meta);
  out += ",\"summary\":";
  out += json_text(summarize_run(run));
  out += ",\"cells\":";
  out += json_text(cells);
  out += ",\"levels\":";
  append_levels(out, run, node, t0, options);
  if (!run.nodes.empty()) {
    // A multi-node run: each node's own levels, on its own clock moved onto the head's
    // (node_manifest: the node's start_wallclock includes its clock offset).
    out += ",\"nodes\":[";
    for (std::size_t i = 0; i < run.nodes.size(); ++i) {
      const RunData& n = run.nodes[i];
      if (i) out += ',';
      const nlohmann::json& nm = n.manifest;
      const nlohmann::json ni = nm.contains("node_info") && nm["node_info"].is_object()
                                    ? nm["node_info"]
                                    : nlohmann::json::object();
      const double offset = nm.contains("node") ? json_number(nm["node"], "clock_offset_s") : 0;
      out += "{\"name\":";
      out += json_text(nlohmann::json(n.node));
      out += ",\"node\":";
      out += json_text(ni);
      out += ",\"levels\":";
      append_levels(out, n, ni, t0 + (std::isfinite(offset) ? offset : 0), options);
      out += '}';
    }
    out += ']';
  }
  out += '}';
  return script_safe(out);
}

std::string render_report(const RunData& run, const ReportOptions& options) {
  const nlohmann::json& m = run.manifest;
  std::string title = "sonde report";
  if (m.contains("command") && m["command"].is_array() && !m["command"].empty()) {
    std::string cmd;
    for (const auto& a : m["command"])
      if (a.is_string()) cmd += (cmd.empty() ? "" : " ") + a.get<std::string>();
    if (cmd.size() > 80) cmd = cmd.substr(0, 77) + "...";
    title += ": " + cmd;
  }
  std::string html;
  html.reserve(1 << 21);
  html +=
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
      // Everything is inline: the page may not fetch anything, whatever a value contains.
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n"
      "<meta name=\"generator\" content=\"sonde " SONDE_VERSION "\">\n<title>";
  html += html_escape(title);
  html += "</title>\n<style>\n";
  html += report_assets::uplot_css();
  html += "\n</style>\n<style>\n";
  html += report_assets::report_css();
  html +=
      "\n</style>\n</head>\n<body>\n<div id=\"app\"><noscript>This report draws its charts "
      "with JavaScript.</noscript></div>\n";
  const std::string data = report_data_json(run, options);
  const std::string packed = options.compress ? gzip_base64(data) : std::string();
  if (!packed.empty()) {
    html +=
        "<script id=\"sonde-data\" type=\"application/octet-stream\" "
        "data-encoding=\"gzip+base64\">";
    html += packed;
  } else {
    html += "<script id=\"sonde-data\" type=\"application/json\">";
    html += data;
  }
  html += "</script>\n<script>\n";
  html += report_assets::uplot_js();
  html += "\n</script>\n<script>\n";
  html += report_assets::report_js();
  html += "\n</script>\n</body>\n</html>\n";
  return html;
}

Result<void> write_report(const RunData& run, const ReportOptions& options,
                          const std::string& path) {
  return write_file_atomic(path, render_report(run, options));
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace sonde
