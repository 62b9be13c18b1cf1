// `sonde compare`: two real runs (a run directory and a run in a SQLite file) side by side, the
// figures against each run's own summary and the workloads' own rusage, the change in % from
// them, the HTML page's table and overlaid charts, and the errors.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

const nlohmann::json* row(const nlohmann::json& c, const std::string& key) {
  for (const auto& r : c.at("rows"))
    if (r.at("key") == key) return &r;
  return nullptr;
}

TEST(Compare, TwoRunsSideBySide) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  RunOptions oa, ob;
  oa.env = {{"SONDE_WORKLOAD_RUSAGE", (dir / "a.rusage").string()}};
  ob.env = {{"SONDE_WORKLOAD_RUSAGE", (dir / "b.rusage").string()}};
  // A burns a core for 0.6 s; B holds 200 MiB for 0.8 s.
  const RunResult a = run_command(
      {sonde_binary(), "run", "--quiet", "--interval", "0.1", "--out", (dir / "out").string(),
       "--summary-json", (dir / "a.json").string(), "--", workload_binary(), "burn", "0.6"},
      oa);
  ASSERT_EQ(a.status, 0) << a.describe();
  const RunResult b =
      run_command({sonde_binary(), "run", "--quiet", "--interval", "0.1", "--format", "sqlite",
                   "--out", db.string(), "--summary-json", (dir / "b.json").string(), "--",
                   workload_binary(), "hold", "200", "0.8"},
                  ob);
  ASSERT_EQ(b.status, 0) << b.describe();
  const fs::path run_a = run_dir(dir / "out");
  const nlohmann::json sa = read_json(dir / "a.json"), sb = read_json(dir / "b.json");

  const RunResult js = run_command({sonde_binary(), "compare", run_a.string(), db.string() + "#1",
                                    "--json", "--html", (dir / "compare.html").string()});
  ASSERT_EQ(js.status, 0) << js.describe();
  const nlohmann::json c = nlohmann::json::parse(js.out);
  EXPECT_EQ(c.at("a").at("source"), run_a.string());
  EXPECT_NE(c.at("a").at("command").get<std::string>().find("burn 0.6"), std::string::npos);
  EXPECT_NE(c.at("b").at("command").get<std::string>().find("hold 200 0.8"), std::string::npos);

  // Each run's figures are its own summary's (what `sonde run` printed at its end).
  for (const char* key : {"wall_s", "cpu_seconds", "memory_peak_gib"}) {
    const nlohmann::json* r = row(c, key);
    ASSERT_NE(r, nullptr) << key;
    EXPECT_NEAR(r->at("a").get<double>(), sa.at(key).get<double>(),
                0.01 * std::fabs(sa.at(key).get<double>()) + 1e-6)
        << key;
    EXPECT_NEAR(r->at("b").get<double>(), sb.at(key).get<double>(),
                0.01 * std::fabs(sb.at(key).get<double>()) + 1e-6)
        << key;
    // The change is B's figure against A's.
    const double va = r->at("a").get<double>(), vb = r->at("b").get<double>();
    if (va != 0) {
      EXPECT_NEAR(r->at("change_pct").get<double>(), (vb - va) / va * 100, 1e-6);
    }
  }
  // And they hold against the workloads' own truth: A's CPU time against its rusage (±3 %),
  // B's memory against the 200 MiB it touched.
  const double cpu_a = workload_rusage_cpu(dir / "a.rusage");
  ASSERT_GT(cpu_a, 0.3);
  EXPECT_NEAR(row(c, "cpu_seconds")->at("a").get<double>(), cpu_a, 0.03 * cpu_a + 0.02);
  EXPECT_NEAR(row(c, "wait4_cpu_s")->at("a").get<double>(), cpu_a, 0.03 * cpu_a + 0.02);
  EXPECT_GE(row(c, "memory_peak_gib")->at("b").get<double>(), 200.0 / 1024);
  EXPECT_LE(row(c, "memory_peak_gib")->at("b").get<double>(), 220.0 / 1024);
  EXPECT_EQ(row(c, "exit_status")->at("change_pct"), nullptr);
  EXPECT_EQ(row(c, "gpu_util_mean"), nullptr) << "no run had a GPU: no GPU row";

  // The text: one line per figure, the change, the tags of each.
  const RunResult text = run_command({sonde_binary(), "compare", run_a.string(), db.string()});
  ASSERT_EQ(text.status, 0) << text.describe();
  for (const char* s : {"A  ", "B  ", "CPU time", "memory peak", "change", "tags A", "tags B"})
    EXPECT_NE(text.out.find(s), std::string::npos) << s << " in\n" << text.out;
  EXPECT_EQ(text.out.find(" \n"), std::string::npos) << "a line ends in blanks:\n" << text.out;

  // The page: the table and one chart per metric with both runs' lines.
  std::ifstream in(dir / "compare.html");
  std::stringstream page;
  page << in.rdbuf();
  const std::string html = page.str();
  EXPECT_NE(html.find("<table id=\"figures\">"), std::string::npos);
  EXPECT_NE(html.find("data-key=\"cpu_seconds\""), std::string::npos);
  EXPECT_NE(html.find("class=\"run-a\""), std::string::npos);
  EXPECT_NE(html.find("class=\"run-b\""), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "a static page, no script";
}

TEST(Compare, AMissingRunIsOneLineNamingIt) {
  const fs::path dir = scratch_dir();
  const RunResult r =
      run_command({sonde_binary(), "compare", (dir / "nope").string(), (dir / "nope2").string()});
  EXPECT_NE(r.status, 0);
  EXPECT_EQ(r.err.rfind("sonde: error: compare: run A: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find((dir / "nope").string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  const RunResult one = run_command({sonde_binary(), "compare", (dir / "nope").string()});
  EXPECT_EQ(one.status, 2) << one.describe();
}

}  // namespace
}  // namespace sonde::test
