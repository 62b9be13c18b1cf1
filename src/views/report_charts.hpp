#pragma once
// The chart configuration of `sonde report` (share/sonde/charts.yaml, docs/report.md): which
// charts exist and which columns each one draws, in the spirit of JUmPER's plots.yaml.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.hpp"

namespace sonde {

struct ChartRule {
  enum class Type { single_series, summary_series, multi_series, composite_series };
  std::string name;
  Type type = Type::single_series;
  std::string title, section, unit;
  double scale = 1;
  std::vector<std::string> columns;  ///< single (one), summary (min, mean, max), composite
  std::string prefix;                ///< multi_series: prefix0, prefix1, ...
  std::vector<std::string> labels;   ///< legend, one per column (composite)
  /// Axis bounds: a number, a limit name (memory_limit, gpu_memory, cpu_count) or nothing.
  std::optional<std::string> ylim_min, ylim_max;
  std::optional<std::string> limit;  ///< a dashed line at a limit name or number
  std::string origin;                ///< "FILE:LINE" where the chart was defined
};

/// The charts of the shipped share/sonde/charts.yaml (embedded at build time).
const std::vector<ChartRule>& default_chart_rules();

/// Parses a chart file (`charts:` mapping). `rules` is updated in place: a chart of the same name
/// is replaced, `name: null` removes it, new names are appended. Errors name `file:line`.
Result<void> merge_chart_rules(std::vector<ChartRule>& rules, const std::string& yaml_text,
                               const std::string& file);

/// The charts that one level's columns can draw: [{name, type, title, section, unit, scale,
/// series: [{column, label}], ylim: [min|null|name, max|null|name], limit}], in rule order,
/// then one automatic chart per group of columns no rule covers (plugin columns): columns
/// `p0, p1, ...` and `pavg/pmin/pmax` of one prefix form one chart, any other column its own.
nlohmann::json resolve_charts(const std::vector<ChartRule>& rules,
                              const std::vector<std::string>& columns);

}  // namespace sonde
