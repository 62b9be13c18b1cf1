#include "views/report_charts.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "views/report_assets.hpp"

namespace sonde {
namespace {

std::string where(const std::string& file, const YAML::Mark& m) {
  return fmt::format("{}:{}", file, std::max(m.line, 0) + 1);
}

Error chart_error(const std::string& file, const YAML::Node& n, const std::string& what) {
  return make_error(Errc::config, where(file, n.Mark()) + ": " + what);
}

const char* kTypes[] = {"single_series", "summary_series", "multi_series", "composite_series"};
const char* kKeys[] = {"type",    "title",  "section", "unit", "scale", "column",
                       "columns", "prefix", "labels",  "ylim", "limit"};
const char* kLimits[] = {"memory_limit", "gpu_memory", "cpu_count"};

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

bool is_limit_name(const std::string& s) {
  return std::any_of(std::begin(kLimits), std::end(kLimits), [&](const char* l) { return s == l; });
}

Result<std::string> scalar(const std::string& file, const std::string& path, const YAML::Node& n) {
  if (!n.IsScalar())
    return chart_error(file, n, path + ": expected a single value (text or number)");
  return n.Scalar();
}

Result<std::vector<std::string>> string_list(const std::string& file, const std::string& path,
                                             const YAML::Node& n) {
  if (!n.IsSequence()) return chart_error(file, n, path + ": expected a list of column names");
  std::vector<std::string> out;
  for (const auto& item : n) {
    auto s = scalar(file, path, item);
    if (!s) return s.error();
    out.push_back(*s);
  }
  return out;
}

/// A bound or limit: a number or a limit name.
Result<std::optional<std::string>> bound(const std::string& file, const std::string& path,
                                         const YAML::Node& n) {
  if (n.IsNull()) return std::optional<std::string>();
  auto s = scalar(file, path, n);
  if (!s) return s.error();
  if (!is_number(*s) && !is_limit_name(*s))
    return chart_error(file, n,
                       fmt::format("{}: expected a number, null or one of memory_limit, "
                                   "gpu_memory, cpu_count; got '{}'",
                                   path, *s));
  return std::optional<std::string>(*s);
}

Result<ChartRule> parse_rule(const std::string& file, const std::string& name,
                             const YAML::Node& n) {
  const std::string path = "charts." + name;
  if (!n.IsMap())
    return chart_error(file, n, path + ": expected a map (type, title, columns, ...) or null");
  ChartRule r;
  r.name = name;
  r.origin = where(file, n.Mark());
  bool has_type = false;
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    if (std::none_of(std::begin(kKeys), std::end(kKeys), [&](const char* k) { return key == k; })) {
      std::string keys;
      for (const char* k : kKeys) keys += (keys.empty() ? "" : ", ") + std::string(k);
      return chart_error(
          file, kv.first,
          fmt::format("{}: unknown key '{}' (expected one of: {})", path, key, keys));
    }
    const std::string kpath = path + "." + key;
    if (key == "type") {
      auto s = scalar(file, kpath, v);
      if (!s) return s.error();
      bool found = false;
      for (std::size_t i = 0; i < std::size(kTypes); ++i)
        if (*s == kTypes[i]) {
          r.type = static_cast<ChartRule::Type>(i);
          found = true;
        }
      if (!found)
        return chart_error(file, v,
                           fmt::format("{}: unknown chart type '{}' (expected single_series, "
                                       "summary_series, multi_series or composite_series)",
                                       kpath, *s));
      has_type = true;
    } else if (key == "title" || key == "section" || key == "unit" || key == "column" ||
               key == "prefix") {
      auto s = scalar(file, kpath, v);
      if (!s) return s.error();
      if (key == "title") r.title = *s;
      if (key == "section") r.section = *s;
      if (key == "unit") r.unit = *s;
      if (key == "column") r.columns = {*s};
      if (key == "prefix") r.prefix = *s;
    } else if (key == "scale") {
      auto s = scalar(file, kpath, v);
      if (!s) return s.error();
      if (!is_number(*s) || std::strtod(s->c_str(), nullptr) == 0)
        return chart_error(file, v, kpath + ": expected a non-zero number, got '" + *s + "'");
      r.scale = std::strtod(s->c_str(), nullptr);
    } else if (key == "columns" || key == "labels") {
      auto l = string_list(file, kpath, v);
      if (!l) return l.error();
      (key == "columns" ? r.columns : r.labels) = std::move(*l);
    } else if (key == "ylim") {
      if (!v.IsSequence() || v.size() != 2)
        return chart_error(file, v,
                           kpath +
                               ": expected [min, max] (each a number, null or a "
                               "limit name)");
      auto lo = bound(file, kpath, v[0]);
      if (!lo) return lo.error();
      auto hi = bound(file, kpath, v[1]);
      if (!hi) return hi.error();
      r.ylim_min = *lo;
      r.ylim_max = *hi;
    } else if (key == "limit") {
      auto b = bound(file, kpath, v);
      if (!b) return b.error();
      r.limit = *b;
    }
  }
  if (!has_type)
    return chart_error(file, n,
                       path +
                           ": missing 'type' (single_series, summary_series, "
                           "multi_series or composite_series)");
  using T = ChartRule::Type;
  if (r.type == T::multi_series && r.prefix.empty())
    return chart_error(file, n, path + ": a multi_series chart needs 'prefix'");
  if (r.type != T::multi_series && !r.prefix.empty())
    return chart_error(file, n, path + ": 'prefix' is for multi_series charts only");
  if (r.type == T::single_series && r.columns.size() != 1)
    return chart_error(file, n, path + ": a single_series chart needs 'column'");
  if (r.type == T::summary_series && r.columns.size() != 3)
    return chart_error(file, n,
                       path + ": a summary_series chart needs 'columns: [min, mean, max]'");
  if (r.type == T::composite_series && r.columns.empty())
    return chart_error(file, n, path + ": a composite_series chart needs 'columns'");
  if (!r.labels.empty() && r.labels.size() != r.columns.size())
    return chart_error(
        file, n,
        fmt::format("{}: {} labels for {} columns", path, r.labels.size(), r.columns.size()));
  if (r.title.empty()) r.title = name;
  return r;
}

nlohmann::json bound_json(const std::optional<std::string>& b) {
  if (!b) return nullptr;
  if (is_number(*b)) return std::strtod(b->c_str(), nullptr);
  return *b;
}

/// Columns `prefix<digits>` in device order.
std::vector<std::string> device_columns(const std::string& prefix,
                                        const std::vector<std::string>& columns) {
  std::vector<std::pair<long, std::string>> found;
  for (const auto& c : columns) {
    if (c.size() <= prefix.size() || c.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = c.substr(prefix.size());
    if (!std::all_of(rest.begin(), rest.end(), [](unsigned char ch) { return std::isdigit(ch); }))
      continue;
    found.emplace_back(std::strtol(rest.c_str(), nullptr, 10), c);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

/// "cpu_util_0" → "cpu_util_", "temp_avg" → "temp_"; other names have no group.
std::optional<std::string> group_prefix(const std::string& c) {
  for (const char* agg : {"avg", "min", "max"}) {
    const std::string a(agg);
    if (c.size() > a.size() && c.compare(c.size() - a.size(), a.size(), a) == 0)
      return c.substr(0, c.size() - a.size());
  }
  std::size_t i = c.size();
  while (i > 0 && std::isdigit(static_cast<unsigned char>(c[i - 1]))) --i;
  if (i < c.size() && i > 0) return c.substr(0, i);
  return std::nullopt;
}
}  // namespace

Result<void> merge_chart_rules(std::vector<ChartRule>& rules, const std::string& yaml_text,
                               const std::string& file) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return make_error(Errc::config, where(file, e.mark) + ": invalid YAML: " + e.msg);
  }
  if (root.IsNull()) return {};
  if (!root.IsMap()) return chart_error(file, root, "expected a map with the key 'charts'");
  for (const auto& kv : root) {
    if (kv.first.Scalar() != "charts")
      return chart_error(file, kv.first,
                         "unknown key '" + kv.first.Scalar() + "' (expected 'charts')");
    if (kv.second.IsNull()) continue;
    if (!kv.second.IsMap())
      return chart_error(file, kv.second, "charts: expected a map of chart names to charts");
    for (const auto& c : kv.second) {
      const std::string name = c.first.Scalar();
      auto it = std::find_if(rules.begin(), rules.end(),
                             [&](const ChartRule& r) { return r.name == name; });
      if (c.second.IsNull()) {
        if (it != rules.end()) rules.erase(it);
        continue;
      }
      auto rule = parse_rule(file, name, c.second);
      if (!rule) return rule.error();
      if (it != rules.end())
        *it = std::move(*rule);
      else
        rules.push_back(std::move(*rule));
    }
  }
  return {};
}

const std::vector<ChartRule>& default_chart_rules() {
  static const std::vector<ChartRule> rules = [] {
    std::vector<ChartRule> r;
    auto ok =
        merge_chart_rules(r, std::string(report_assets::charts_yaml()), "share/sonde/charts.yaml");
    if (!ok) {
      // The shipped file is checked by the unit tests; a broken build must not go unnoticed.
      fmt::print(stderr, "sonde: internal error: {}\n", ok.error().message);
      std::abort();
    }
    return r;
  }();
  return rules;
}

nlohmann::json resolve_charts(const std::vector<ChartRule>& rules,
                              const std::vector<std::string>& columns) {
  using T = ChartRule::Type;
  const std::set<std::string> have(columns.begin(), columns.end());
  std::set<std::string> used = {"time", "wallclock"};
  nlohmann::json out = nlohmann::json::array();
  auto emit = [&](const std::string& name, const std::string& type, const std::string& title,
                  const std::string& section, const std::string& unit, double scale,
                  const nlohmann::json& series, nlohmann::json ylim, nlohmann::json limit) {
    out.push_back({{"name", name},
                   {"type", type},
                   {"title", title},
                   {"section", section},
                   {"unit", unit},
                   {"scale", scale},
                   {"series", series},
                   {"ylim", std::move(ylim)},
                   {"limit", std::move(limit)}});
  };
  for (const ChartRule& r : rules) {
    nlohmann::json series = nlohmann::json::array();
    std::vector<std::string> cols;
    std::vector<std::string> labels = r.labels;
    if (r.type == T::multi_series) {
      cols = device_columns(r.prefix, columns);
      for (const auto& c : cols) labels.push_back(c.substr(r.prefix.size()));
    } else {
      for (std::size_t i = 0; i < r.columns.size(); ++i)
        if (have.count(r.columns[i])) {
          cols.push_back(r.columns[i]);
          if (r.type == T::summary_series)
            labels.push_back(i == 0 ? "min" : i == 1 ? "mean" : "max");
        }
      if (r.type == T::summary_series) labels.resize(cols.size());
    }
    if (cols.empty()) continue;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      std::string label = i < labels.size() && !labels[i].empty() ? labels[i] : cols[i];
      if (r.type == T::composite_series && !r.labels.empty()) {
        // Labels follow the configured columns, present or not.
        auto pos = std::find(r.columns.begin(), r.columns.end(), cols[i]) - r.columns.begin();
        label = r.labels[static_cast<std::size_t>(pos)];
      }
      series.push_back({{"column", cols[i]}, {"label", label}});
      used.insert(cols[i]);
    }
    static const char* kTypeNames[] = {"single_series", "summary_series", "multi_series",
                                       "composite_series"};
    emit(r.name, kTypeNames[static_cast<int>(r.type)], r.title, r.section, r.unit, r.scale, series,
         nlohmann::json::array({bound_json(r.ylim_min), bound_json(r.ylim_max)}),
         bound_json(r.limit));
  }
  // Columns no rule shows (plugin columns): one chart per prefix group, else per column.
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> groups;
  for (const auto& c : columns) {
    if (used.count(c)) continue;
    const auto p = group_prefix(c);
    const std::string key = p ? *p : c;
    if (!groups.count(key)) order.push_back(key);
    groups[key].push_back(c);
  }
  for (const auto& key : order) {
    const auto& cols = groups[key];
    nlohmann::json series = nlohmann::json::array();
    for (const auto& c : cols)
      series.push_back(
          {{"column", c},
           {"label", cols.size() > 1 && c.size() > key.size() ? c.substr(key.size()) : c}});
    std::string title = key;
    if (cols.size() > 1 && !title.empty() && title.back() == '_') title.pop_back();
    emit("auto:" + key, cols.size() > 1 ? "multi_series" : "single_series", title, "Other columns",
         "", 1, series, nlohmann::json::array({nullptr, nullptr}), nullptr);
  }
  return out;
}

}  // namespace sonde
