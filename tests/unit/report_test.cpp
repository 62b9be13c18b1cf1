// The chart configuration (src/views/report_charts.cpp) and the HTML page (src/views/report.cpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "sinks/run_data.hpp"
#include "support/built_paths.hpp"
#include "views/report.hpp"
#include "views/report_assets.hpp"
#include "views/report_charts.hpp"

namespace sonde {
namespace {

std::vector<std::string> names(const nlohmann::json& charts) {
  std::vector<std::string> out;
  for (const auto& c : charts) out.push_back(c["name"].get<std::string>());
  return out;
}

const nlohmann::json* chart(const nlohmann::json& charts, const std::string& name) {
  for (const auto& c : charts)
    if (c["name"] == name) return &c;
  return nullptr;
}

TEST(ReportCharts, ShippedChartsParse) {
  const auto& rules = default_chart_rules();
  ASSERT_GE(rules.size(), 10u);
  EXPECT_EQ(rules.front().name, "cpu_summary");
  EXPECT_FALSE(report_assets::uplot_js().empty());
  EXPECT_NE(report_assets::uplot_js().find("uPlot"), std::string_view::npos);
  EXPECT_FALSE(report_assets::report_js().empty());
}

TEST(ReportCharts, ResolvesRulesAndPluginColumns) {
  const std::vector<std::string> cols = {
      "time",       "wallclock",    "cpu_util_0",   "cpu_util_1",   "cpu_util_10",
      "cpu_util_2", "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory",
      "io_read",    "temp_0",       "temp_1",       "temp_avg",     "lustre_read"};
  const auto charts = resolve_charts(default_chart_rules(), cols);
  const auto n = names(charts);
  EXPECT_EQ(n, (std::vector<std::string>{"cpu_summary", "cpu_cores", "memory", "io_bytes",
                                         "auto:temp_", "auto:lustre_read"}));
  const auto* cores = chart(charts, "cpu_cores");
  ASSERT_TRUE(cores);
  ASSERT_EQ((*cores)["series"].size(), 4u);
  EXPECT_EQ((*cores)["series"][3]["column"], "cpu_util_10") << "devices in numeric order";
  const auto* summary = chart(charts, "cpu_summary");
  EXPECT_EQ((*summary)["series"][1]["label"], "mean");
  const auto* mem = chart(charts, "memory");
  EXPECT_EQ((*mem)["limit"], "memory_limit");
  EXPECT_EQ((*mem)["ylim"], nlohmann::json({0.0, nullptr}));
  const auto* io = chart(charts, "io_bytes");
  ASSERT_EQ((*io)["series"].size(), 1u) << "io_write is absent";
  EXPECT_EQ((*io)["series"][0]["label"], "read");
  EXPECT_DOUBLE_EQ((*io)["scale"].get<double>(), 1.0 / (1024 * 1024)) << "MiB/s, as the summary";
  EXPECT_EQ((*io)["unit"], "MiB/s");
  const auto* temp = chart(charts, "auto:temp_");
  ASSERT_TRUE(temp);
  EXPECT_EQ((*temp)["series"].size(), 3u);
  EXPECT_EQ((*temp)["section"], "Other columns");
}

TEST(ReportCharts, UserFileReplacesRemovesAndAdds) {
  auto rules = default_chart_rules();
  const std::string text =
      "charts:\n"
      "  memory:\n"
      "    type: single_series\n"
      "    column: memory\n"
      "    title: RSS\n"
      "  cpu_cores: null\n"
      "  lustre:\n"
      "    type: composite_series\n"
      "    section: Lustre\n"
      "    columns: [lustre_read, lustre_write]\n"
      "    labels: [read, write]\n"
      "    unit: MB/s\n"
      "    scale: 1e-6\n"
      "    ylim: [0, null]\n";
  auto ok = merge_chart_rules(rules, text, "mine.yaml");
  ASSERT_TRUE(ok) << ok.error().message;
  const auto charts = resolve_charts(
      rules, {"time", "wallclock", "cpu_util_0", "memory", "lustre_read", "lustre_write"});
  EXPECT_EQ(names(charts), (std::vector<std::string>{"memory", "lustre", "auto:cpu_util_"}))
      << "cpu_util_0 is covered by no chart now: it gets an automatic one";
  EXPECT_EQ((*chart(charts, "memory"))["title"], "RSS");
  EXPECT_EQ((*chart(charts, "lustre"))["series"][1]["label"], "write");
}

TEST(ReportCharts, RemovedRuleLeavesColumnsToAutomaticCharts) {
  auto rules = default_chart_rules();
  ASSERT_TRUE(merge_chart_rules(rules, "charts:\n  cpu_cores: null\n", "x.yaml"));
  const auto charts = resolve_charts(rules, {"time", "wallclock", "cpu_util_0", "cpu_util_1"});
  EXPECT_EQ(names(charts), (std::vector<std::string>{"auto:cpu_util_"}));
}

void expect_error(const std::string& text, const std::string& where, const std::string& what) {
  auto rules = default_chart_rules();
  auto ok = merge_chart_rules(rules, text, "bad.yaml");
  ASSERT_FALSE(ok) << text;
  EXPECT_NE(ok.error().message.find(where), std::string::npos) << ok.error().message;
  EXPECT_NE(ok.error().message.find(what), std::string::npos) << ok.error().message;
}

TEST(ReportCharts, ErrorsNameFileAndLine) {
  expect_error("charts:\n  a:\n    type: single_series\n    colum: x\n",
               "bad.yaml:4:", "unknown key 'colum'");
  expect_error("charts:\n  a:\n    type: pie\n", "bad.yaml:3:", "unknown chart type 'pie'");
  expect_error("charts:\n  a:\n    type: multi_series\n    title: t\n",
               "bad.yaml:3:", "needs 'prefix'");
  expect_error("charts:\n  a:\n    title: t\n", "bad.yaml:3:", "missing 'type'");
  expect_error("charts:\n  a:\n    type: summary_series\n    columns: [a, b]\n",
               "bad.yaml:3:", "[min, mean, max]");
  expect_error("charts:\n  a:\n    type: single_series\n    column: x\n    ylim: [0, lots]\n",
               "bad.yaml:5:", "got 'lots'");
  expect_error("plots:\n  a: {}\n", "bad.yaml:1:", "unknown key 'plots'");
  expect_error("charts:\n  a: [1, 2\n", "bad.yaml:", "invalid YAML");
  expect_error("charts:\n  a:\n    type: composite_series\n    columns: [a, b]\n    labels: [x]\n",
               "bad.yaml:3:", "1 labels for 2 columns");
}

RunData fixture() {
  auto run = read_run_dir(std::string(SONDE_FIXTURES_DIR) + "/run_basic");
  EXPECT_TRUE(run) << run.error().message;
  return std::move(*run);
}

TEST(Report, DataJsonHasLevelsChartsAndCompactValues) {
  RunData run = fixture();
  const auto data = nlohmann::json::parse(report_data_json(run, ReportOptions{}));
  ASSERT_EQ(data["levels"].size(), 2u);
  const auto& p = data["levels"][0];
  EXPECT_EQ(p["level"], "process");
  EXPECT_EQ(p["t"], nlohmann::json({1, 2, 3, 4})) << "seconds since the start";
  EXPECT_TRUE(p["cols"]["cpu_util_avg"][0].is_null()) << "NaN is null";
  EXPECT_EQ(p["cols"]["cpu_util_avg"][1], 90);
  EXPECT_DOUBLE_EQ(p["limits"]["memory_limit"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(p["limits"]["gpu_memory"].get<double>(), 16.0);
  EXPECT_FALSE(p["cols"].contains("time"));
  EXPECT_TRUE(chart(p["charts"], "gpu_util"));
  EXPECT_EQ(data["summary"]["tags"].size(), 4u);
  EXPECT_EQ(data["meta"]["host"], "node01");
}

TEST(Report, ValuesKeepFourSignificantDigits) {
  RunData run;
  run.manifest = {{"levels", {"system"}}, {"start_wallclock", 100.0}};
  LevelTable t;
  t.level = Level::system;
  t.columns = {"time", "wallclock", "io_read", "tiny"};
  t.rows = {{0.5, 100.25, 123456789.0, 0.000123456}, {1.0, 100.5, 0.0, -2.5}};
  run.levels.push_back(t);
  const std::string text = report_data_json(run, ReportOptions{});
  EXPECT_NE(text.find("\"io_read\":[1.235e8,0]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"tiny\":[0.0001235,-2.5]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"t\":[0.25,0.5]"), std::string::npos) << text;
}

TEST(Report, PageIsSelfContainedAndEscapesText) {
  RunData run = fixture();
  run.manifest["command"] = {"echo", "</script><script>alert(1)</script>", "<!--"};
  const std::string html = render_report(run, ReportOptions{});
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  EXPECT_NE(html.find("default-src 'none'"), std::string::npos);
  // Only the page's own four script elements close; the command's text cannot.
  std::size_t closes = 0;
  for (auto pos = html.find("</script>"); pos != std::string::npos;
       pos = html.find("</script>", pos + 1))
    ++closes;
  EXPECT_EQ(closes, 3u);
  EXPECT_EQ(html.find("<!--"), std::string::npos);
  EXPECT_NE(html.find("&lt;/script&gt;"), std::string::npos) << "the title is escaped";
  // No stylesheet, script or image is fetched from elsewhere.
  EXPECT_EQ(html.find("<script src"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
}

}  // namespace
}  // namespace sonde
