// Multi-node runs read back (src/sinks/run_data.cpp, zip_reader.cpp): the aggregate and each
// node, their summary with the per-node table and the node-imbalance tag (core/summary.cpp), the
// report's data (views/report.cpp). The fixtures are tests/fixtures/make_multinode_run.py's
// output: three nodes of 2 CPUs, n1 burns both, n2 holds 0.5 GiB, n3 idles (lost after 6 ticks in
// run_multinode_lost).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "sinks/run_data.hpp"
#include "sinks/zip_reader.hpp"
#include "support/built_paths.hpp"
#include "views/report.hpp"

namespace sonde {
namespace {
namespace fs = std::filesystem;
const std::string kFixtures = SONDE_FIXTURES_DIR;
const std::string kMulti = kFixtures + "/run_multinode";
const std::string kLost = kFixtures + "/run_multinode_lost";

class MultinodeCopy {
 public:
  explicit MultinodeCopy(const std::string& from = kMulti) {
    dir_ = fs::temp_directory_path() /
           ("sonde_multinode_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::copy(from, dir_, fs::copy_options::recursive);
  }
  ~MultinodeCopy() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }
  nlohmann::json manifest() const {
    std::ifstream in(dir_ / "manifest.json");
    return nlohmann::json::parse(in);
  }
  void set_manifest(const nlohmann::json& m) const {
    std::ofstream(dir_ / "manifest.json", std::ios::trunc) << m.dump(2);
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

TEST(MultinodeRun, ReadsTheAggregateAndEachNode) {
  auto run = read_run(kMulti);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->multinode());
  ASSERT_EQ(run->levels.size(), 2u);
  const LevelTable* agg = run->find(Level::slurm);
  ASSERT_NE(agg, nullptr);
  EXPECT_EQ(agg->rows.size(), 10u);
  ASSERT_TRUE(agg->find("nodes"));
  EXPECT_EQ(agg->rows[0][*agg->find("nodes")], 3);
  ASSERT_EQ(run->nodes.size(), 3u);
  EXPECT_EQ(run->nodes[0].node, "n1");
  EXPECT_EQ(run->nodes[2].node, "n3");
  const RunData* n2 = run->find_node("n2");
  ASSERT_NE(n2, nullptr);
  EXPECT_EQ(run->find_node("n4"), nullptr);
  ASSERT_NE(n2->find(Level::system), nullptr);
  const LevelTable& t = *n2->find(Level::slurm);
  EXPECT_EQ(t.columns[2], "cpu_util_0");  // per-device columns are kept per node
  EXPECT_EQ(t.rows.size(), 10u);
  EXPECT_DOUBLE_EQ(t.rows[0][0], 8001);  // the node's own monotonic clock, unconverted
  // The node's manifest: its node_info and host, the run's start on the node's clock.
  EXPECT_EQ(n2->manifest["host"], "n2");
  EXPECT_EQ(n2->manifest["node"]["status"], "complete");
  EXPECT_FALSE(n2->manifest.contains("nodes"));
  EXPECT_NEAR(n2->manifest["start_wallclock"].get<double>(), 1700000000.0012, 1e-6);
  EXPECT_EQ(n2->manifest["levels"], nlohmann::json({"slurm", "system"}));
  EXPECT_TRUE(n2->nodes.empty());
}

TEST(MultinodeRun, SingleNodeRunsHaveNoNodes) {
  auto run = read_run(kFixtures + "/run_basic");
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_FALSE(run->multinode());
  EXPECT_TRUE(run->nodes.empty());
  EXPECT_FALSE(summarize_run(*run).contains("nodes"));
}

TEST(MultinodeRun, ZipHoldsTheNodesToo) {
  auto run = read_run(kMulti + ".zip");
  ASSERT_TRUE(run) << run.error().message;
  ASSERT_EQ(run->nodes.size(), 3u);
  EXPECT_EQ(run->source, kMulti + ".zip");
  EXPECT_EQ(run->nodes[1].source, kMulti + ".zip node n2");
  auto dir = read_run(kMulti);
  ASSERT_TRUE(dir);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t l = 0; l < 2; ++l)
      EXPECT_EQ(run->nodes[i].levels[l].rows, dir->nodes[i].levels[l].rows);
}

TEST(MultinodeRun, LostNodeStopsAndIsSaidSo) {
  auto run = read_run(kLost);
  ASSERT_TRUE(run) << run.error().message;
  const RunData* n3 = run->find_node("n3");
  ASSERT_NE(n3, nullptr);
  EXPECT_EQ(n3->find(Level::slurm)->rows.size(), 6u);
  const auto s = summarize_run(*run);
  ASSERT_EQ(s["nodes"].size(), 3u);
  EXPECT_EQ(s["nodes"][2]["status"], "lost");
  EXPECT_NE(s["nodes"][2]["reason"].get<std::string>().find("no line"), std::string::npos);
  EXPECT_EQ(s["nodes"][2]["rows"], 6);
  EXPECT_EQ(s["nodes"][0]["status"], "complete");
}

TEST(MultinodeRun, BadNodesAreErrorsNamingTheFile) {
  {
    MultinodeCopy c;
    auto m = c.manifest();
    m["nodes"][1]["name"] = "../n2";
    c.set_manifest(m);
    auto run = read_run(c.path());
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().message.find("plain file name"), std::string::npos)
        << run.error().message;
  }
  {
    MultinodeCopy c;
    fs::remove(fs::path(c.path()) / "nodes" / "n2" / "perf_slurm.csv");
    auto run = read_run(c.path());
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().message.find("nodes/n2/perf_slurm.csv: missing"), std::string::npos)
        << run.error().message;
  }
  {
    // A lost node may lack its files (its agent never started).
    MultinodeCopy c;
    fs::remove_all(fs::path(c.path()) / "nodes" / "n2");
    auto m = c.manifest();
    m["nodes"][1]["status"] = "failed";
    c.set_manifest(m);
    auto run = read_run(c.path());
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_TRUE(run->find_node("n2")->levels.empty());
    const auto s = summarize_run(*run);
    EXPECT_EQ(s["nodes"][1]["rows"], 0);
  }
  {
    // No agent wrote anything: no `nodes` directory, every node failed.
    MultinodeCopy c;
    fs::remove_all(fs::path(c.path()) / "nodes");
    auto m = c.manifest();
    for (auto& n : m["nodes"]) n["status"] = "failed";
    c.set_manifest(m);
    auto run = read_run(c.path());
    ASSERT_TRUE(run) << run.error().message;
    EXPECT_EQ(run->nodes.size(), 3u);
    m["nodes"][0]["status"] = "complete";
    c.set_manifest(m);
    auto bad = read_run(c.path());
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().message.find("nodes/n1: missing"), std::string::npos)
        << bad.error().message;
  }
  {
    MultinodeCopy c;
    std::ofstream(fs::path(c.path()) / "nodes" / "n3" / "perf_system.csv", std::ios::app)
        << "1,2,x\n";
    auto run = read_run(c.path());
    ASSERT_FALSE(run);
    EXPECT_NE(run.error().message.find("nodes/n3/perf_system.csv:12"), std::string::npos)
        << run.error().message;
  }
}

TEST(MultinodeRun, SummaryPerNodeAndImbalanceTag) {
  auto run = read_run(kMulti);
  ASSERT_TRUE(run);
  const auto s = summarize_run(*run);
  EXPECT_EQ(s["node_level"], "slurm");
  ASSERT_EQ(s["nodes"].size(), 3u);
  const auto& n1 = s["nodes"][0];
  EXPECT_EQ(n1["name"], "n1");
  EXPECT_TRUE(n1["head"].get<bool>());
  EXPECT_EQ(n1["num_cpus"], 2);
  EXPECT_NEAR(n1["cpu_mean_pct"].get<double>(), 97.5, 0.5);
  EXPECT_NEAR(n1["cpu_mean_cores"].get<double>(), 1.95, 0.02);
  EXPECT_NEAR(s["nodes"][1]["memory_peak_gib"].get<double>(), 0.5, 1e-9);
  EXPECT_NEAR(s["nodes"][1]["memory_limit_gib"].get<double>(), 2, 1e-9);
  EXPECT_NEAR(s["nodes"][2]["clock_offset_s"].get<double>(), -0.25, 1e-9);
  EXPECT_EQ(s["nodes"][2]["rows"], 10);
  // n3 idles (0.4 %) while n1 burns: the aggregate gets node-imbalance, at the slurm level too.
  const auto& tags = s["tags"];
  EXPECT_NE(std::find(tags.begin(), tags.end(), "node-imbalance"), tags.end()) << s.dump();
  const auto& lt = s["levels"]["slurm"]["tags"];
  EXPECT_NE(std::find(lt.begin(), lt.end(), "node-imbalance"), lt.end());
  // The aggregate's limits count every node: 6 CPUs, 3 x 2 GiB.
  EXPECT_EQ(s["levels"]["slurm"]["num_cpus"], 6);
  EXPECT_NEAR(s["levels"]["slurm"]["groups"]["memory"]["limit"].get<double>(), 6, 1e-9);
  // A node's own summary has no imbalance (one node).
  const auto one = summarize_run(*run->find_node("n1"));
  EXPECT_FALSE(one.contains("nodes"));
  EXPECT_EQ(one["levels"]["slurm"]["num_cpus"], 2);
}

TEST(MultinodeRun, NodesText) {
  auto run = read_run(kLost);
  ASSERT_TRUE(run);
  const std::string text = summary_nodes_text(summarize_run(*run));
  EXPECT_NE(text.find("nodes (3, figures of their slurm level):\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  n1 (head)    complete      10 rows  CPU mean 1.95 peak 1.95 of 2 cores  "
                      "memory peak 0.059 of 2.0 GiB  clock +0.0 ms\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  n3           lost           6 rows"), std::string::npos) << text;
  EXPECT_NE(text.find("(no line from the agent for 3 s after tick 6)"), std::string::npos) << text;
  EXPECT_EQ(summary_nodes_text(summarize_run(*read_run(kFixtures + "/run_basic"))), "");
}

TEST(MultinodeRun, ImbalanceRule) {
  using N = TagInputs::NodeCpu;
  EXPECT_FALSE(node_imbalance({}));
  EXPECT_FALSE(node_imbalance({{95, 1}}));
  EXPECT_TRUE(node_imbalance({{95, 1}, {10, 0}}));
  EXPECT_TRUE(node_imbalance({{10, 0}, {95, 0.5}, {90, 1}}));
  // The busiest is not busy for most of the run.
  EXPECT_FALSE(node_imbalance({{95, 0.4}, {1, 0}}));
  // All nodes about equally loaded.
  EXPECT_FALSE(node_imbalance({{95, 1}, {80, 1}, {60, 1}}));
  // Just at the share: 25 % of 80 is 20.
  EXPECT_FALSE(node_imbalance({N{80, 1}, N{20, 0}}));
  EXPECT_TRUE(node_imbalance({N{80, 1}, N{19.9, 0}}));
  TagInputs in;
  in.node_cpu = {{95, 1}, {10, 0}};
  in.cpu_mean_pct = 50;
  EXPECT_EQ(bottleneck_tags(in), std::vector<std::string>{"node-imbalance"});
}

TEST(MultinodeRun, SaturatedRule) {
  // The node busy, the program below 90 % of its CPUs: held back.
  EXPECT_TRUE(node_saturated(100, 43, 0.86));
  EXPECT_TRUE(node_saturated(90, 89.9, std::nullopt));  // CPU count unknown: no floor
  EXPECT_FALSE(node_saturated(89.9, 10, 0.2));          // the node was not busy
  EXPECT_FALSE(node_saturated(100, 95, 1.9));           // the program got its CPUs
  EXPECT_FALSE(node_saturated(std::nullopt, 10, 0.2));
  // A program that waited (sleep on a busy node) was not held back.
  EXPECT_FALSE(node_saturated(100, 0.0, 0.0));
  EXPECT_FALSE(node_saturated(100, 2.0, 0.04));
  EXPECT_TRUE(node_saturated(100, 2.5, 0.05));
}

TEST(MultinodeRun, NoImbalanceWhenNodesShareTheWork) {
  MultinodeCopy c;
  // n3 burns as much as n1: rewrite its slurm rows from n1's.
  fs::copy_file(fs::path(c.path()) / "nodes" / "n1" / "perf_slurm.csv",
                fs::path(c.path()) / "nodes" / "n3" / "perf_slurm.csv",
                fs::copy_options::overwrite_existing);
  fs::copy_file(fs::path(c.path()) / "nodes" / "n1" / "perf_slurm.csv",
                fs::path(c.path()) / "nodes" / "n2" / "perf_slurm.csv",
                fs::copy_options::overwrite_existing);
  auto run = read_run(c.path());
  ASSERT_TRUE(run) << run.error().message;
  const auto s = summarize_run(*run);
  const auto& tags = s["tags"];
  EXPECT_EQ(std::find(tags.begin(), tags.end(), "node-imbalance"), tags.end()) << s.dump();
}

TEST(MultinodeRun, ReportDataHasEveryNode) {
  auto run = read_run(kMulti);
  ASSERT_TRUE(run);
  ReportOptions o;
  o.compress = false;
  const auto j = nlohmann::json::parse(report_data_json(*run, o));
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][1]["name"], "n2");
  ASSERT_EQ(j["nodes"][1]["levels"].size(), 2u);
  const auto& lv = j["nodes"][1]["levels"][0];
  EXPECT_EQ(lv["level"], "slurm");
  EXPECT_TRUE(lv["cols"].contains("cpu_util_1"));
  // Node times on the head's clock: a node row at head second 1 (+ the node's offset) is at 1.
  EXPECT_NEAR(lv["t"][0].get<double>(), 1.0, 1e-3);
  EXPECT_NEAR(j["nodes"][2]["levels"][0]["t"][0].get<double>(), 1.0, 1e-3);
  EXPECT_EQ(lv["limits"]["cpu_count"], 2);
  // The aggregate's limits: all the job's CPUs.
  EXPECT_EQ(j["levels"][0]["limits"]["cpu_count"], 6);
  EXPECT_EQ(j["summary"]["nodes"].size(), 3u);
  EXPECT_EQ(j["meta"]["multinode"]["job"], "1234");
  // A single node's report has no node selector.
  const auto one = nlohmann::json::parse(report_data_json(*run->find_node("n2"), o));
  EXPECT_FALSE(one.contains("nodes"));
  EXPECT_EQ(one["meta"]["host"], "n2");
}

TEST(MultinodeRun, AggregateNames) {
  for (const char* a : {"aggregate", "<Aggregated>", "Aggregate", "all"})
    EXPECT_TRUE(is_aggregate_node_name(a)) << a;
  for (const char* a : {"n1", "", "<n1>"}) EXPECT_FALSE(is_aggregate_node_name(a)) << a;
}

}  // namespace
}  // namespace sonde
