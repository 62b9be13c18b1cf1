// `sonde report` and `sonde run --report` through the real binary (the page itself is checked in
// a browser by tests/browser/test_report.py).
#include <gtest/gtest.h>

#include <fstream>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(ReportCli, RunWritesReportAtTheEnd) {
  const fs::path dir = scratch_dir("report_run");
  const fs::path out = dir / "run";
  auto r = run_command({sonde_binary(), "run", "--interval", "0.1", "--quiet", "--out",
                        out.string(), "--report", "--", workload_binary(), "burn", "0.3"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const std::string html = read_file(out / "report.html");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("data-encoding=\"gzip+base64\""), std::string::npos);
  EXPECT_EQ(count(html, "</script>"), 3);
  EXPECT_NE(r.err.find("report written to"), std::string::npos) << r.err;
}

TEST(ReportCli, ReportOfAStoredRunToAChosenFile) {
  const fs::path dir = scratch_dir("report_cmd");
  auto r = run_command({sonde_binary(), "run", "--interval", "0.1", "--quiet", "--out",
                        (dir / "run").string(), "--", workload_binary(), "sleep", "0.3"});
  ASSERT_EQ(r.status, 0) << r.describe();
  ASSERT_FALSE(fs::exists(dir / "run" / "report.html"));
  auto rep = run_command(
      {sonde_binary(), "report", (dir / "run").string(), "-o", (dir / "mine.html").string()});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  EXPECT_GT(fs::file_size(dir / "mine.html"), 50'000u) << "uPlot is inlined";
  // --report=FILE on run
  auto r2 = run_command({sonde_binary(), "run", "--interval", "0.1", "--quiet", "--out",
                         (dir / "run2").string(), "--report=" + (dir / "r2.html").string(), "--",
                         workload_binary(), "sleep", "0.2"});
  ASSERT_EQ(r2.status, 0) << r2.describe();
  EXPECT_TRUE(fs::exists(dir / "r2.html"));
}

TEST(ReportCli, BadChartFileIsAUsageErrorBeforeTheRun) {
  const fs::path dir = scratch_dir("report_charts");
  {
    std::ofstream f(dir / "charts.yaml");
    f << "charts:\n  lustre:\n    type: composite_series\n    colums: [a]\n";
  }
  const fs::path marker = dir / "ran";
  auto r = run_command({sonde_binary(), "run", "--quiet", "--out", (dir / "run").string(),
                        "--report", "--charts", (dir / "charts.yaml").string(), "--", "/bin/sh",
                        "-c", "touch " + marker.string()});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find("charts.yaml:4:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown key 'colums'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(marker)) << "nothing ran";

  auto rep = run_command({sonde_binary(), "report", (dir / "nothing").string(), "--charts",
                          (dir / "charts.yaml").string()});
  EXPECT_EQ(rep.status, 2) << rep.describe();
}

TEST(ReportCli, MissingOrMalformedRun) {
  const fs::path dir = scratch_dir("report_bad");
  auto r = run_command({sonde_binary(), "report", (dir / "none").string()});
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_NE(r.err.find("not a run directory"), std::string::npos) << r.err;
  fs::create_directories(dir / "bad");
  {
    std::ofstream(dir / "bad" / "manifest.json") << R"({"levels": ["system"]})";
    std::ofstream(dir / "bad" / "perf_system.csv") << "time,wallclock,memory\n1,2,x\n";
  }
  auto b = run_command({sonde_binary(), "report", (dir / "bad").string()});
  EXPECT_EQ(b.status, 2) << b.describe();
  EXPECT_NE(b.err.find("perf_system.csv:2:"), std::string::npos) << b.err;
  EXPECT_FALSE(fs::exists(dir / "bad" / "report.html"));
}

}  // namespace
}  // namespace sonde::test
