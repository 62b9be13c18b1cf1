#pragma once
// Files embedded into sonde at build time (cmake/embed_files.cmake): the charting library uPlot
// from the npm registry (web/node_modules, installed by scripts/install-deps), the report's own
// script and style (web/report.js, web/report.css) and the default chart configuration.
#include <string_view>

namespace sonde::report_assets {
std::string_view uplot_js();     ///< web/node_modules/uplot/dist/uPlot.iife.min.js
std::string_view uplot_css();    ///< web/node_modules/uplot/dist/uPlot.min.css
std::string_view report_js();    ///< web/report.js
std::string_view report_css();   ///< web/report.css
std::string_view charts_yaml();  ///< share/sonde/charts.yaml
}  // namespace sonde::report_assets
