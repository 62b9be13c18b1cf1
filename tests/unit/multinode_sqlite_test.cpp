// The multi-node head writing through multinode::SqliteStore (src/sinks/multinode_sqlite.hpp)
// on captured agent lines: nodes' rows with their names, aggregate rows with node '', the
// manifest's nodes, read back by the SQLite reader; the live node-imbalance tag agrees with the
// stored run's summary.
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/live_summary.hpp"
#include "core/multinode_head.hpp"
#include "core/stored_summary.hpp"
#include "sinks/multinode_sqlite.hpp"
#include "sinks/run_data.hpp"
#include "sinks/sqlite.hpp"
#include "support/agent_lines.hpp"

namespace sonde::multinode {
namespace {

using test::ready;
using test::sample;

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sonde-mn-sqlite-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

bool has_tag(const nlohmann::json& tags, const char* tag) {
  return tags.is_array() && std::find(tags.begin(), tags.end(), tag) != tags.end();
}

TEST(MultinodeSqliteStore, NodesAndAggregateReadBackAndTagsAgree) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  nlohmann::json manifest = {{"command", nlohmann::json::array()},
                             {"mode", "record"},
                             {"start_wallclock", 1000.0},
                             {"host", "login"},
                             {"interval", 1.0},
                             {"levels", nlohmann::json::array()},
                             {"columns_by_level", nlohmann::json::object()},
                             {"complete", false}};
  auto store = make_sqlite_store(db, manifest);
  ASSERT_TRUE(store) << store.error().message;
  HeadOptions o;
  o.job = "7";
  o.expected_nodes = 2;
  o.interval_s = 1;
  o.levels = {Level::slurm};
  Head head(o, **store);
  const double t0 = 1000;
  head.on_line("0: " + ready("a", t0), t0 + 0.01, 1);
  head.on_line("1: " + ready("b", t0), t0 + 0.01, 1);
  // a burns 90 % of its CPUs, b idles at 1 %: imbalance.
  for (int k = 1; k <= 6; ++k) {
    head.on_line("0: " + sample(t0 + k, 90, 1.0), t0 + k + 0.01, 1 + k);
    head.on_line("1: " + sample(t0 + k, 1, 0.5), t0 + k + 0.01, 1 + k);
    head.tick(1.1 + k, t0 + k + 0.1);
  }
  head.on_line("0: {\"status\":\"end\"}", t0 + 7, 8);
  head.on_line("1: {\"status\":\"end\"}", t0 + 7, 8);
  head.finish(8);
  const nlohmann::json live = head.summary_json();
  EXPECT_TRUE(has_tag(live["tags"], "node-imbalance")) << live.dump(2);
  EXPECT_NE(Head::summary_text(live).find("node-imbalance"), std::string::npos);
  EXPECT_NE(Head::summary_text(live).find("nodes (2, figures of their slurm level):"),
            std::string::npos)
      << Head::summary_text(live);
  RunOutcome outcome;
  (*store)->sink().finish(outcome, live, 6, 0);
  EXPECT_FALSE((*store)->failed());

  auto run = read_run_sqlite(db, std::nullopt);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->manifest["complete"].get<bool>());
  ASSERT_EQ(run->nodes.size(), 2u);
  const auto* a = run->find_node("a");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(a->find(Level::slurm), nullptr);
  EXPECT_EQ(a->find(Level::slurm)->rows.size(), 6u);
  const auto* agg = run->find(Level::slurm);
  ASSERT_NE(agg, nullptr);
  EXPECT_EQ(agg->rows.size(), 6u);
  const auto nodes_col = agg->find("nodes");
  const auto mem_col = agg->find("memory");
  ASSERT_TRUE(nodes_col && mem_col);
  EXPECT_DOUBLE_EQ(agg->rows[2][*nodes_col], 2.0);
  EXPECT_DOUBLE_EQ(agg->rows[2][*mem_col], 1.5);
  EXPECT_EQ(run->manifest["nodes"].size(), 2u);
  EXPECT_EQ(run->manifest["nodes"][0]["status"], "complete");
  const nlohmann::json stored = summarize_run(*run, std::nullopt);
  EXPECT_TRUE(has_tag(stored["tags"], "node-imbalance")) << stored.dump(2);
}

TEST(MultinodeSqliteStore, BalancedNodesHaveNoImbalanceLiveOrStored) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto store = make_sqlite_store(db, {{"mode", "record"}, {"interval", 1.0}, {"host", "h"}});
  ASSERT_TRUE(store) << store.error().message;
  HeadOptions o;
  o.job = "8";
  o.expected_nodes = 2;
  o.levels = {Level::slurm};
  Head head(o, **store);
  const double t0 = 1000;
  head.on_line("0: " + ready("a", t0), t0 + 0.01, 1);
  head.on_line("1: " + ready("b", t0), t0 + 0.01, 1);
  for (int k = 1; k <= 4; ++k) {
    head.on_line("0: " + sample(t0 + k, 90, 1.0), t0 + k + 0.01, 1 + k);
    head.on_line("1: " + sample(t0 + k, 80, 0.5), t0 + k + 0.01, 1 + k);
    head.tick(1.1 + k, t0 + k + 0.1);
  }
  head.finish(6);
  const nlohmann::json live = head.summary_json();
  EXPECT_FALSE(has_tag(live["tags"], "node-imbalance")) << live.dump(2);
  (*store)->sink().finish(RunOutcome{}, live, 4, 0);
  auto run = read_run_sqlite(db, std::nullopt);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_FALSE(has_tag(summarize_run(*run, std::nullopt)["tags"], "node-imbalance"));
}

}  // namespace
}  // namespace sonde::multinode
