#pragma once
// `sonde report`: one self-contained HTML file (no network request) with the summary of a stored
// run, its bottleneck tags and interactive time-series charts (uPlot, inlined at build time).
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "sinks/run_data.hpp"
#include "views/report_charts.hpp"

namespace sonde {

struct ReportOptions {
  /// The charts: default_chart_rules() with the user's --charts files merged in.
  std::vector<ChartRule> charts = default_chart_rules();
  /// Significant digits of the embedded values (time keeps milliseconds).
  int digits = 4;
  /// Embed the data gzip-compressed and base64-encoded (the page inflates it with the
  /// browser's DecompressionStream); else as plain JSON.
  bool compress = true;
};

/// The whole HTML page.
std::string render_report(const RunData& run, const ReportOptions& options);

/// The data part of the page as JSON text (what report.js reads): meta, summary, cells and per
/// level the times, the columns' values and the resolved charts.
std::string report_data_json(const RunData& run, const ReportOptions& options);

/// `s` with &, <, > and " as HTML character references (text and attribute values).
std::string html_escape(std::string_view s);

/// Renders and writes atomically to `path`.
Result<void> write_report(const RunData& run, const ReportOptions& options,
                          const std::string& path);

}  // namespace sonde
