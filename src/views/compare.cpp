#include "views/compare.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/nan.hpp"
#include "core/stored_summary.hpp"
#include "core/summary.hpp"
#include "views/report.hpp"

namespace sonde {
namespace {

// The figures compared, in the order printed. `source`: where the figure comes from when both
// summaries have it (stored: summarize_run, the report's; live: the summary `sonde run` wrote,
// which alone has the kernel's figures).
struct Figure {
  const char* key;
  const char* label;
  const char* unit;  ///< s, cores, GiB, bytes, %, W, J, "" (a count)
};
constexpr Figure kFigures[] = {
    {"wall_s", "wall", "s"},
    {"exit_status", "exit status", ""},
    {"cpu_seconds", "CPU time", "s"},
    {"wait4_cpu_s", "CPU time (wait4)", "s"},
    {"cpu_mean_cores", "CPU mean", "cores"},
    {"cpu_peak_cores", "CPU peak", "cores"},
    {"memory_peak_gib", "memory peak", "GiB"},
    {"max_rss_gib", "max RSS (kernel)", "GiB"},
    {"read_bytes", "disk read", "bytes"},
    {"written_bytes", "disk written", "bytes"},
    {"net_sent_bytes", "network sent", "bytes"},
    {"net_recv_bytes", "network received", "bytes"},
    {"gpu_util_mean", "GPU utilisation", "%"},
    {"gpu_mem_peak_gib", "GPU memory peak", "GiB"},
    {"gpu_power_mean_w", "GPU power mean", "W"},
    {"gpu_energy_j", "GPU energy", "J"},
    {"energy_j", "energy", "J"},
};

std::optional<double> number(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  const double v = j[key].get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string command_of(const nlohmann::json& m) {
  for (const char* key : {"command", "target_command"}) {
    if (!m.contains(key) || !m[key].is_array() || m[key].empty()) continue;
    std::string out;
    for (const auto& w : m[key])
      if (w.is_string()) out += (out.empty() ? "" : " ") + w.get<std::string>();
    return out;
  }
  return "";
}

struct Side {
  nlohmann::json run;      ///< {source, command, start_wallclock, level, host}
  nlohmann::json figures;  ///< key -> number or null
  std::vector<std::string> tags;
};

Side side_of(const RunData& data) {
  const nlohmann::json stored = summarize_run(data);
  const nlohmann::json& m = data.manifest;
  const nlohmann::json live =
      m.contains("summary") && m["summary"].is_object() ? m["summary"] : nlohmann::json::object();
  Side s;
  s.run = {{"source", data.source},
           {"command", command_of(m)},
           {"start_wallclock",
            stored.contains("start_wallclock") ? stored["start_wallclock"] : nlohmann::json()},
           {"level", stored.value("level", std::string())},
           {"host", stored.contains("host") ? stored["host"] : nlohmann::json()}};
  s.figures = nlohmann::json::object();
  for (const Figure& f : kFigures) {
    std::optional<double> v = number(stored, f.key);
    if (!v) v = number(live, f.key);
    s.figures[f.key] = v ? nlohmann::json(*v) : nlohmann::json();
  }
  const auto user = number(live, "user_cpu_s"), sys = number(live, "system_cpu_s");
  s.figures["wait4_cpu_s"] = user && sys ? nlohmann::json(*user + *sys) : nlohmann::json();
  // GPU utilisation of a stored run without the live summary: the main level's group.
  if (s.figures["gpu_util_mean"].is_null() && stored.contains("levels")) {
    const std::string lvl = stored.value("level", std::string());
    const auto& L = stored["levels"];
    if (L.contains(lvl) && L[lvl].contains("groups") && L[lvl]["groups"].contains("gpu_util"))
      if (auto u = number(L[lvl]["groups"]["gpu_util"], "mean")) s.figures["gpu_util_mean"] = *u;
  }
  const nlohmann::json& tags = stored.contains("tags") ? stored["tags"] : live["tags"];
  if (tags.is_array())
    for (const auto& t : tags)
      if (t.is_string()) s.tags.push_back(t.get<std::string>());
  return s;
}

std::string value_text(const nlohmann::json& v, std::string_view unit) {
  if (!v.is_number()) return "-";
  const double x = v.get<double>();
  if (unit == "bytes") return bytes_text(x);
  if (unit == "") return fmt::format("{}", static_cast<long long>(std::llround(x)));
  if (unit == "%") return fmt::format("{:.1f} %", x);
  if (unit == "GiB") return fmt::format("{:.3f} GiB", x);
  if (unit == "cores") return fmt::format("{:.2f} cores", x);
  if (unit == "s") return fmt::format("{:.2f} s", x);
  return fmt::format("{:.1f} {}", x, unit);
}

std::string change_text(const nlohmann::json& pct) {
  if (!pct.is_number()) return "";
  const double p = pct.get<double>();
  if (std::fabs(p) < 0.05) return "0.0 %";
  return fmt::format("{:+.1f} %", p);
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "(none)" : out;
}

std::vector<std::string> strings(const nlohmann::json& a) {
  std::vector<std::string> out;
  if (a.is_array())
    for (const auto& x : a)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

// One series of a run for the charts: seconds since the first row, value per row.
struct Series {
  std::vector<double> t, v;
};

Series series_of(const RunData& run, const std::string& level, const char* what) {
  Series s;
  const LevelTable* t = nullptr;
  for (const auto& l : run.levels)
    if (level_name(l.level) == level) t = &l;
  if (!t || t->rows.empty()) return s;
  const auto time = t->find("time");
  if (!time) return s;
  std::optional<std::size_t> col;
  double scale = 1;
  if (std::string_view(what) == "cpu") {
    col = t->find("cpu_util_avg");
    const double cpus = level_num_cpus(run_node_info(run), t->level);
    scale = std::isfinite(cpus) ? cpus / 100 : kNaN;
  } else if (std::string_view(what) == "memory") {
    col = t->find("memory");
  } else {
    col = t->find("gpu_util_avg");
  }
  if (!col || !std::isfinite(scale)) return s;
  const double t0 = t->rows.front()[*time];
  for (const auto& row : t->rows) {
    s.t.push_back(row[*time] - t0);
    s.v.push_back(row[*col] * scale);
  }
  return s;
}

// An SVG line chart of two series (A blue, B orange) with their axes' ranges written out.
std::string svg_chart(const std::string& title, const std::string& unit, const Series& a,
                      const Series& b) {
  constexpr double W = 720, H = 220, L = 60, R = 10, T = 24, B = 30;
  double tmax = 0, vmax = 0;
  for (const Series* s : {&a, &b})
    for (std::size_t i = 0; i < s->t.size(); ++i) {
      tmax = std::max(tmax, s->t[i]);
      if (std::isfinite(s->v[i])) vmax = std::max(vmax, s->v[i]);
    }
  if (tmax <= 0) tmax = 1;
  if (vmax <= 0) vmax = 1;
  vmax *= 1.05;
  auto x = [&](double t) { return L + (W - L - R) * t / tmax; };
  auto y = [&](double v) { return T + (H - T - B) * (1 - v / vmax); };
  std::string svg = fmt::format(
      "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\"><text x=\"{2}\" y=\"16\" font-weight=\"bold\">{3} ({4})</text>"
      "<line x1=\"{2}\" y1=\"{5}\" x2=\"{6}\" y2=\"{5}\" stroke=\"#888\"/>"
      "<line x1=\"{2}\" y1=\"{7}\" x2=\"{2}\" y2=\"{5}\" stroke=\"#888\"/>"
      "<text x=\"{8}\" y=\"{9}\" text-anchor=\"end\">{10:.3g}</text>"
      "<text x=\"{8}\" y=\"{5}\" text-anchor=\"end\">0</text>"
      "<text x=\"{6}\" y=\"{11}\" text-anchor=\"end\">{12:.3g} s</text>",
      W, H, L, html_escape(title), html_escape(unit), H - B, W - R, T, L - 4, T + 10, vmax, H - 8,
      tmax);
  const char* colours[] = {"#1f77b4", "#ff7f0e"};
  const Series* both[] = {&a, &b};
  for (int k = 0; k < 2; ++k) {
    std::string points;
    for (std::size_t i = 0; i < both[k]->t.size(); ++i) {
      if (!std::isfinite(both[k]->v[i])) continue;
      points += fmt::format("{:.1f},{:.1f} ", x(both[k]->t[i]), y(both[k]->v[i]));
    }
    if (!points.empty())
      svg += fmt::format(
          "<polyline class=\"run-{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
          "points=\"{}\"/>",
          k == 0 ? 'a' : 'b', colours[k], points);
  }
  return svg + "</svg>\n";
}

}  // namespace

nlohmann::json compare_runs(const RunData& a, const RunData& b) {
  const Side A = side_of(a), B = side_of(b);
  nlohmann::json rows = nlohmann::json::array();
  for (const Figure& f : kFigures) {
    const nlohmann::json& va = A.figures[f.key];
    const nlohmann::json& vb = B.figures[f.key];
    if (va.is_null() && vb.is_null()) continue;
    nlohmann::json change;
    if (va.is_number() && vb.is_number() && va.get<double>() != 0 &&
        std::string_view(f.key) != "exit_status")
      change = (vb.get<double>() - va.get<double>()) / std::fabs(va.get<double>()) * 100;
    rows.push_back({{"key", f.key},
                    {"label", f.label},
                    {"unit", f.unit},
                    {"a", va},
                    {"b", vb},
                    {"change_pct", change}});
  }
  const std::set<std::string> ta(A.tags.begin(), A.tags.end()), tb(B.tags.begin(), B.tags.end());
  nlohmann::json only_a = nlohmann::json::array(), only_b = nlohmann::json::array();
  for (const auto& t : A.tags)
    if (!tb.count(t)) only_a.push_back(t);
  for (const auto& t : B.tags)
    if (!ta.count(t)) only_b.push_back(t);
  return {{"a", A.run},
          {"b", B.run},
          {"rows", rows},
          {"tags", {{"a", A.tags}, {"b", B.tags}, {"only_a", only_a}, {"only_b", only_b}}}};
}

std::string compare_text(const nlohmann::json& c) {
  std::string out;
  // One line of the table, without the blanks an empty last column leaves.
  const auto line = [&out](std::string text) {
    text.erase(text.find_last_not_of(' ') + 1);
    out += text + "\n";
  };
  for (const char* k : {"a", "b"}) {
    const nlohmann::json& r = c[k];
    const std::string cmd = r.value("command", std::string());
    line(fmt::format("{}  {}{}", k[0] == 'a' ? 'A' : 'B', r.value("source", std::string()),
                     cmd.empty() ? "" : "  (" + cmd + ")"));
  }
  out += "\n";
  line(fmt::format("  {:<18} {:>16} {:>16} {:>9}", "", "A", "B", "change"));
  for (const auto& row : c["rows"]) {
    const std::string unit = row.value("unit", std::string());
    line(fmt::format("  {:<18} {:>16} {:>16} {:>9}", row.value("label", std::string()),
                     value_text(row["a"], unit), value_text(row["b"], unit),
                     change_text(row["change_pct"])));
  }
  out += "\n";
  for (const char* k : {"a", "b"})
    line(fmt::format("  tags {}             {}", k[0] == 'a' ? 'A' : 'B',
                     join(strings(c["tags"][k]))));
  return out;
}

std::string compare_html(const nlohmann::json& c, const RunData& a, const RunData& b) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>sonde compare</title><style>"
      "body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
      "td,th{padding:.2em .8em;border-bottom:1px solid #ddd;text-align:right}"
      "td:first-child,th:first-child{text-align:left}.a{color:#1f77b4}.b{color:#ff7f0e}"
      "</style></head><body>\n<h1>sonde compare</h1>\n<ul>\n";
  for (const char* k : {"a", "b"}) {
    const nlohmann::json& r = c[k];
    const std::string cmd = r.value("command", std::string());
    html += fmt::format("<li class=\"{}\"><b>{}</b> {}{}</li>\n", k, k[0] == 'a' ? 'A' : 'B',
                        html_escape(r.value("source", std::string())),
                        cmd.empty() ? "" : " (" + html_escape(cmd) + ")");
  }
  html +=
      "</ul>\n<table id=\"figures\"><tr><th></th><th class=\"a\">A</th><th class=\"b\">B</th>"
      "<th>change</th></tr>\n";
  for (const auto& row : c["rows"]) {
    const std::string unit = row.value("unit", std::string());
    html += fmt::format(
        "<tr data-key=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        html_escape(row.value("key", std::string())), html_escape(row.value("label", "")),
        html_escape(value_text(row["a"], unit)), html_escape(value_text(row["b"], unit)),
        html_escape(change_text(row["change_pct"])));
  }
  html += "</table>\n";
  html += fmt::format("<p class=\"a\">tags A: {}</p>\n<p class=\"b\">tags B: {}</p>\n",
                      html_escape(join(strings(c["tags"]["a"]))),
                      html_escape(join(strings(c["tags"]["b"]))));
  const std::string la = c["a"].value("level", std::string("system"));
  const std::string lb = c["b"].value("level", std::string("system"));
  struct Chart {
    const char* what;
    const char* title;
    const char* unit;
  };
  for (const Chart& ch : {Chart{"cpu", "CPU", "cores"}, Chart{"memory", "memory", "GiB"},
                          Chart{"gpu", "GPU utilisation", "%"}}) {
    const Series sa = series_of(a, la, ch.what), sb = series_of(b, lb, ch.what);
    if (sa.t.empty() && sb.t.empty()) continue;
    html += svg_chart(ch.title, ch.unit, sa, sb);
  }
  html +=
      "<p>Time: seconds since each run's first row; <span class=\"a\">A</span> and "
      "<span class=\"b\">B</span> at their own levels (" +
      html_escape(la) + ", " + html_escape(lb) + ").</p>\n</body></html>\n";
  return html;
}

}  // namespace sonde
