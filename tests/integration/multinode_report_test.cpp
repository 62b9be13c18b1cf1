// A stored multi-node run through the real binary: `sonde report` with its node selector and
// `--node`, of the directory and of a zip of it (the page itself: tests/browser/test_report.py).
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "sinks/run_data.hpp"
#include "sinks/sqlite.hpp"
#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

const fs::path kFixtures = fs::path(SONDE_SOURCE_DIR) / "tests" / "fixtures";

TEST(MultinodeReportCli, ReportOfTheAggregateAndOfOneNode) {
  const fs::path dir = scratch_dir("multinode_report");
  for (const char* what : {"run_multinode", "run_multinode.zip"}) {
    const fs::path out = dir / (std::string(what) + ".html");
    auto r = run_command({sonde_binary(), "report", (kFixtures / what).string(), "-o", out.string(),
                          "--uncompressed"});
    ASSERT_EQ(r.status, 0) << r.describe();
    const std::string html = read_file(out);
    EXPECT_NE(html.find("\"nodes\":[{\"name\":\"n1\""), std::string::npos) << what;
    // The tag in the page's summary (its style sheet names every tag, whatever the run).
    const nlohmann::json tags = report_data(out)["summary"].value("tags", nlohmann::json::array());
    EXPECT_NE(std::find(tags.begin(), tags.end(), "node-imbalance"), tags.end())
        << what << ": " << tags.dump();
  }
  for (const char* node : {"n2", "N2"}) {
    const fs::path out = dir / (std::string(node) + ".html");
    auto r = run_command({sonde_binary(), "report", (kFixtures / "run_multinode").string(),
                          "--node", node, "-o", out.string(), "--uncompressed"});
    if (std::string(node) == "N2") {
      // Names are exact; the error lists the nodes.
      EXPECT_EQ(r.status, 2) << r.describe();
      EXPECT_NE(r.err.find("--node N2: no such node in"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("its nodes: n1, n2, n3; or aggregate"), std::string::npos) << r.err;
      EXPECT_FALSE(fs::exists(out));
      continue;
    }
    ASSERT_EQ(r.status, 0) << r.describe();
    const std::string html = read_file(out);
    EXPECT_EQ(html.find("\"nodes\":[{\"name\""), std::string::npos);
    EXPECT_NE(html.find("\"host\":\"n2\""), std::string::npos);
    EXPECT_NE(html.find("\"cpu_util_1\""), std::string::npos);
  }
  auto agg = run_command({sonde_binary(), "report", (kFixtures / "run_multinode").string(),
                          "--node", "<Aggregated>", "-o", (dir / "agg.html").string()});
  EXPECT_EQ(agg.status, 0) << agg.describe();
  auto single = run_command({sonde_binary(), "report", (kFixtures / "run_basic").string(), "--node",
                             "n1", "-o", (dir / "single.html").string()});
  EXPECT_EQ(single.status, 2) << single.describe();
  EXPECT_NE(single.err.find("is not a multi-node run"), std::string::npos) << single.err;
}

// Three real `sonde record --system` runs, taken at the same time on this machine, assembled
// into one multi-node run (make_multinode_run.py --from): each node reads back exactly as the
// run it came from, and its summary is that run's.
TEST(MultinodeReportCli, RealRunsAssembledReadBackAsTheirRuns) {
  const fs::path dir = scratch_dir("multinode_real");
  std::string script;
  for (int i = 1; i <= 3; ++i)
    script +=
        fmt::format("'{}' record --system --duration 1.5 --interval 0.2 --quiet --out '{}' & ",
                    sonde_binary(), (dir / fmt::format("r{}", i)).string());
  auto rec = run_command({"/bin/sh", "-c", script + "wait"});
  ASSERT_EQ(rec.status, 0) << rec.describe();
  const fs::path job = dir / "job";
  auto mk =
      run_command({"/usr/bin/python3", (kFixtures / "make_multinode_run.py").string(), job.string(),
                   "--from", (dir / "r1").string(), (dir / "r2").string(), (dir / "r3").string()});
  ASSERT_EQ(mk.status, 0) << mk.describe();

  auto run = read_run_dir(job.string());
  ASSERT_TRUE(run) << run.error().message;
  ASSERT_EQ(run->nodes.size(), 3u);
  const auto s = summarize_run(*run);
  double cpus = 0;
  for (int i = 0; i < 3; ++i) {
    auto single = read_run_dir((dir / fmt::format("r{}", i + 1)).string());
    ASSERT_TRUE(single) << single.error().message;
    const RunData& node = run->nodes[static_cast<std::size_t>(i)];
    EXPECT_EQ(node.node, fmt::format("n{}", i + 1));
    ASSERT_EQ(node.levels.size(), 1u);
    EXPECT_EQ(node.levels[0].columns, single->levels[0].columns);
    ASSERT_EQ(node.levels[0].rows.size(), single->levels[0].rows.size());
    EXPECT_GE(node.levels[0].rows.size(), 5u);
    const auto one = summarize_run(*single);
    const auto& n = s["nodes"][static_cast<std::size_t>(i)];
    EXPECT_EQ(n["level"], "system");
    EXPECT_EQ(n["rows"], single->levels[0].rows.size());
    EXPECT_DOUBLE_EQ(n["cpu_mean_pct"].get<double>(),
                     one["levels"]["system"]["groups"]["cpu"]["mean"].get<double>());
    EXPECT_DOUBLE_EQ(n["memory_peak_gib"].get<double>(), one["memory_peak_gib"].get<double>());
    cpus += one["num_cpus"].get<double>();
  }
  // The aggregate: all the nodes' CPUs, rows covering the three nodes.
  EXPECT_DOUBLE_EQ(s["levels"]["system"]["num_cpus"].get<double>(), cpus);
  const LevelTable* agg = run->find(Level::system);
  ASSERT_NE(agg, nullptr);
  ASSERT_TRUE(agg->find("nodes"));
  double most = 0;
  for (const auto& row : agg->rows) most = std::max(most, row[*agg->find("nodes")]);
  EXPECT_EQ(most, 3);

  auto rep = run_command({sonde_binary(), "report", job.string(), "-o", (dir / "job.html").string(),
                          "--uncompressed"});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  EXPECT_NE(read_file(dir / "job.html").find("\"nodes\":[{\"name\":\"n1\""), std::string::npos);
}

/// The fixture stored in SQLite through the writer's node API, as a multi-node head stores it.
void store(const std::string& db, const RunData& run) {
  std::vector<Level> levels;
  std::array<std::vector<std::string>, kNumLevels> cols;
  for (const auto& t : run.levels) {
    levels.push_back(t.level);
    cols[level_index(t.level)].assign(t.columns.begin() + 2, t.columns.end());
  }
  auto sink = SqliteSink::create(db, run.manifest, levels, cols);
  ASSERT_TRUE(sink.ok()) << sink.error().message;
  for (const auto& n : run.nodes) {
    std::array<std::vector<std::string>, kNumLevels> nc;
    for (const auto& t : n.levels)
      nc[level_index(t.level)].assign(t.columns.begin() + 2, t.columns.end());
    ASSERT_TRUE((*sink)->add_node(n.node, nc).ok());
  }
  auto put = [&](const std::string& node, const LevelTable& t, std::size_t i) {
    if (i < t.rows.size())
      (*sink)->write_node_row(node, t.level, t.rows[i][0], t.rows[i][1],
                              std::vector<double>(t.rows[i].begin() + 2, t.rows[i].end()));
  };
  for (std::size_t i = 0; i < 10; ++i) {
    for (const auto& t : run.levels) put("", t, i);
    for (const auto& n : run.nodes)
      for (const auto& t : n.levels) put(n.node, t, i);
    (*sink)->end_tick();
  }
  RunOutcome outcome;
  outcome.exit_status = 0;
  (*sink)->finish(outcome, summarize_run(run), 10, 0);
}

TEST(MultinodeReportCli, RunsInSqlite) {
  const fs::path dir = scratch_dir("multinode_sqlite");
  const std::string db = (dir / "runs.sqlite").string();
  auto run = read_run_dir((kFixtures / "run_multinode_lost").string());
  ASSERT_TRUE(run) << run.error().message;
  store(db, *run);

  auto list = run_command({sonde_binary(), "runs", "list", db});
  ASSERT_EQ(list.status, 0) << list.describe();
  EXPECT_NE(list.out.find("NODES"), std::string::npos) << list.out;
  auto listj = run_command({sonde_binary(), "runs", "list", db, "--json"});
  ASSERT_EQ(listj.status, 0) << listj.describe();
  const auto lj = nlohmann::json::parse(listj.out);
  EXPECT_EQ(lj[0]["nodes"], nlohmann::json({"n1", "n2", "n3"}));
  EXPECT_EQ(lj[0]["ticks"], 10);

  auto show = run_command({sonde_binary(), "runs", "show", db, "1"});
  ASSERT_EQ(show.status, 0) << show.describe();
  EXPECT_NE(show.out.find("nodes (3, figures of their slurm level):"), std::string::npos)
      << show.out;
  EXPECT_NE(show.out.find("n1 (head)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("lost"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("clock -250.0 ms"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("node-imbalance"), std::string::npos) << show.out;
  auto showj = run_command({sonde_binary(), "runs", "show", db, "1", "--json"});
  ASSERT_EQ(showj.status, 0) << showj.describe();
  const auto sj = nlohmann::json::parse(showj.out);
  EXPECT_EQ(sj["nodes"][2]["stored_ticks"]["slurm"], 6);

  // Exported as a multi-node run directory, which reads back as the fixture.
  const fs::path out = dir / "export";
  auto ex = run_command({sonde_binary(), "runs", "export", db, "1", "-o", out.string()});
  ASSERT_EQ(ex.status, 0) << ex.describe();
  EXPECT_TRUE(fs::is_regular_file(out / "nodes" / "n3" / "perf_system.csv"));
  auto back = read_run_dir(out.string());
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->nodes.size(), 3u);
  EXPECT_EQ(back->find_node("n3")->levels[0].rows.size(), 6u);
  auto exj = run_command({sonde_binary(), "runs", "export", db + "#1", "--format", "json"});
  ASSERT_EQ(exj.status, 0) << exj.describe();
  EXPECT_EQ(nlohmann::json::parse(exj.out)["nodes"]["n2"]["slurm"]["rows"].size(), 10u);

  // The report of the stored run, and of one node.
  auto rep = run_command({sonde_binary(), "report", db + "#1", "--node", "n3", "-o",
                          (dir / "n3.html").string(), "--uncompressed"});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  EXPECT_NE(read_file(dir / "n3.html").find("\"host\":\"n3\""), std::string::npos);
}

}  // namespace
}  // namespace sonde::test
