// Multi-node runs in SQLite (schema 2: `node` in `columns` and `samples`): the writer's node API,
// reading back the aggregate and each node, export to the multi-node directory layout, and the
// migration of a schema-1 database.
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "sinks/run_data.hpp"
#include "sinks/sqlite.hpp"
#include "support/built_paths.hpp"
#include "support/sqlite_helpers.hpp"

namespace sonde {
namespace {

using test::exec;
using test::query;
using test::TempDir;

namespace fs = std::filesystem;

/// Stores `run` (a multi-node run read from a directory) through the writer's node API, the way
/// a multi-node head does: the run's own levels at create, each node's columns with add_node,
/// rows tick by tick with write_node_row and end_tick.
std::int64_t store(const std::string& db, const RunData& run) {
  std::vector<Level> levels;
  std::array<std::vector<std::string>, kNumLevels> cols;
  for (const auto& t : run.levels) {
    levels.push_back(t.level);
    cols[level_index(t.level)].assign(t.columns.begin() + 2, t.columns.end());
  }
  nlohmann::json manifest = run.manifest;
  manifest.erase("nodes");  // learnt as the agents report
  auto sink = SqliteSink::create(db, manifest, levels, cols);
  EXPECT_TRUE(sink.ok()) << (sink.ok() ? "" : sink.error().message);
  if (!sink.ok()) return 0;
  SqliteSink& s = **sink;
  std::size_t ticks = 0;
  for (const auto& t : run.levels) ticks = std::max(ticks, t.rows.size());
  for (const auto& n : run.nodes) {
    std::array<std::vector<std::string>, kNumLevels> nc;
    for (const auto& t : n.levels)
      nc[level_index(t.level)].assign(t.columns.begin() + 2, t.columns.end());
    EXPECT_TRUE(s.add_node(n.node, nc).ok());
  }
  for (std::size_t i = 0; i < ticks; ++i) {
    for (const auto& t : run.levels)
      if (i < t.rows.size())
        s.write_node_row("", t.level, t.rows[i][0], t.rows[i][1],
                         std::vector<double>(t.rows[i].begin() + 2, t.rows[i].end()));
    for (const auto& n : run.nodes)
      for (const auto& t : n.levels)
        if (i < t.rows.size())
          s.write_node_row(n.node, t.level, t.rows[i][0], t.rows[i][1],
                           std::vector<double>(t.rows[i].begin() + 2, t.rows[i].end()));
    s.end_tick();
  }
  s.update("nodes", run.manifest["nodes"]);
  s.finish({}, {}, ticks, 0);
  EXPECT_FALSE(s.failed());
  return s.run_id();
}

void expect_same(const RunData& a, const RunData& b) {
  ASSERT_EQ(a.levels.size(), b.levels.size());
  for (std::size_t l = 0; l < a.levels.size(); ++l) {
    EXPECT_EQ(a.levels[l].level, b.levels[l].level);
    EXPECT_EQ(a.levels[l].columns, b.levels[l].columns);
    ASSERT_EQ(a.levels[l].rows.size(), b.levels[l].rows.size());
    for (std::size_t r = 0; r < a.levels[l].rows.size(); ++r)
      for (std::size_t c = 0; c < a.levels[l].rows[r].size(); ++c)
        EXPECT_NEAR(a.levels[l].rows[r][c], b.levels[l].rows[r][c],
                    1e-9 * std::max(1.0, std::fabs(a.levels[l].rows[r][c])));
  }
}

TEST(SqliteMultinode, StoresAndReadsEveryNode) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto dir = read_run_dir(std::string(SONDE_FIXTURES_DIR) + "/run_multinode_lost");
  ASSERT_TRUE(dir) << dir.error().message;
  const auto id = store(db, *dir);
  ASSERT_EQ(id, 1);
  EXPECT_EQ(query(db, "SELECT count(DISTINCT node) FROM samples WHERE node != ''"), "3");
  EXPECT_EQ(query(db, "SELECT count(*) FROM samples WHERE node = 'n3' AND level = 'slurm'"), "6");
  EXPECT_EQ(query(db, "SELECT max(tick) FROM samples WHERE node = 'n1' AND level = 'system'"), "9");
  // The per-node query of docs/sqlite.md.
  EXPECT_EQ(query(db,
                  "SELECT group_concat(node || '=' || round(m, 3)) FROM (SELECT s.node AS node, "
                  "max(json_extract(s.vals, '$[' || c.position || ']')) AS m FROM samples AS s "
                  "JOIN columns AS c ON c.run_id = s.run_id AND c.node = s.node AND c.level = "
                  "s.level AND c.name = 'memory' WHERE s.run_id = 1 AND s.level = 'slurm' AND "
                  "s.node != '' GROUP BY s.node ORDER BY s.node)"),
            "n1=0.059,n2=0.5,n3=0.002");
  EXPECT_EQ(query(db,
                  "SELECT count(*) FROM sample_values WHERE node = 'n2' AND name = "
                  "'cpu_util_1' AND level = 'slurm'"),
            "10");

  auto back = read_run_sqlite(db, id);
  ASSERT_TRUE(back) << back.error().message;
  expect_same(*dir, *back);
  ASSERT_EQ(back->nodes.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back->nodes[i].node, dir->nodes[i].node);
    expect_same(dir->nodes[i], back->nodes[i]);
    EXPECT_EQ(back->nodes[i].manifest["node"]["status"], dir->nodes[i].manifest["node"]["status"]);
  }
  EXPECT_EQ(back->nodes[1].source, db + "#1 node n2");
  const auto s = summarize_run(*back);
  EXPECT_EQ(s["nodes"][2]["status"], "lost");
  EXPECT_EQ(s["nodes"][2]["rows"], 6);

  auto list = list_runs_sqlite(db);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].ticks, 10u);  // the aggregate's rows
  EXPECT_EQ((*list)[0].nodes, (std::vector<std::string>{"n1", "n2", "n3"}));

  // Exported: the multi-node directory layout, read back as the original.
  const std::string out = (t.path / "export").string();
  ASSERT_TRUE(write_run_dir(*back, out).ok());
  EXPECT_TRUE(fs::is_regular_file(out + "/nodes/n2/perf_slurm.csv"));
  auto again = read_run_dir(out);
  ASSERT_TRUE(again) << again.error().message;
  expect_same(*dir, *again);
  ASSERT_EQ(again->nodes.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) expect_same(dir->nodes[i], again->nodes[i]);
  EXPECT_EQ(again->manifest["nodes"][2]["status"], "lost");
}

TEST(SqliteMultinode, AddNodeErrors) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  std::array<std::vector<std::string>, kNumLevels> cols;
  cols[level_index(Level::system)] = {"memory"};
  auto sink =
      SqliteSink::create(db, {{"levels", {"system"}}, {"interval", 1.0}}, {Level::system}, cols);
  ASSERT_TRUE(sink.ok());
  EXPECT_FALSE((*sink)->add_node("", cols).ok());
  EXPECT_TRUE((*sink)->add_node("n1", cols).ok());
  auto twice = (*sink)->add_node("n1", cols);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message.find("node n1 added twice"), std::string::npos);
  // The aggregate ('') may add a level create() did not have (a head learns its columns late).
  std::array<std::vector<std::string>, kNumLevels> slurm;
  slurm[level_index(Level::slurm)] = {"cpu_util_avg", "nodes"};
  EXPECT_TRUE((*sink)->add_node("", slurm).ok());
  EXPECT_FALSE((*sink)->add_node("", slurm).ok());
  EXPECT_EQ(query(db, "SELECT group_concat(name) FROM columns WHERE node = '' AND level = 'slurm'"),
            "cpu_util_avg,nodes");
  // A row of a node never added is dropped (with a warning), the others are written.
  (*sink)->write_node_row("n9", Level::system, 1, 2, {3});
  (*sink)->write_node_row("n1", Level::system, 1, 2, {3});
  (*sink)->end_tick();
  EXPECT_EQ(query(db, "SELECT group_concat(node) FROM samples"), "n1");
  EXPECT_FALSE((*sink)->failed());
}

// The schema of sonde before multi-node runs (version 1), with one run in it.
constexpr const char* kSchema1 = R"sql(
CREATE TABLE runs (id INTEGER PRIMARY KEY, host TEXT NOT NULL, command TEXT NOT NULL,
  mode TEXT NOT NULL, start_wallclock REAL NOT NULL, end_wallclock REAL, exit_status INTEGER,
  interval_s REAL NOT NULL, complete INTEGER NOT NULL DEFAULT 0, ticks INTEGER,
  manifest TEXT NOT NULL, summary TEXT);
CREATE TABLE columns (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  level TEXT NOT NULL, position INTEGER NOT NULL, name TEXT NOT NULL,
  PRIMARY KEY (run_id, level, position)) WITHOUT ROWID;
CREATE TABLE samples (run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  level TEXT NOT NULL, tick INTEGER NOT NULL, time REAL NOT NULL, wallclock REAL NOT NULL,
  vals TEXT NOT NULL, PRIMARY KEY (run_id, level, tick));
CREATE VIEW sample_values AS
  SELECT s.run_id AS run_id, s.level AS level, s.tick AS tick, s.time AS time,
         s.wallclock AS wallclock, c.name AS name,
         json_extract(s.vals, '$[' || c.position || ']') AS value
  FROM samples AS s JOIN columns AS c ON c.run_id = s.run_id AND c.level = s.level;
INSERT INTO runs VALUES (1, 'old', '["sleep","1"]', 'run', 1700000000, 1700000002, 0, 1, 1, 2,
  '{"host":"old","levels":["system"],"interval":1.0,"start_wallclock":1700000000}', NULL);
INSERT INTO columns VALUES (1, 'system', 0, 'cpu_util_avg'), (1, 'system', 1, 'memory');
INSERT INTO samples VALUES (1, 'system', 0, 10, 1700000001, '[50,1.5]'),
  (1, 'system', 1, 11, 1700000002, '[null,2]');
PRAGMA application_id = 1397706308;
PRAGMA user_version = 1;
)sql";

TEST(SqliteMultinode, ReadsAndMigratesASchema1Database) {
  TempDir t;
  const std::string db = (t.path / "old.sqlite").string();
  exec(db, kSchema1);
  auto check_old = [&](const char* when) {
    auto run = read_run_sqlite(db, 1);
    ASSERT_TRUE(run) << when << ": " << run.error().message;
    ASSERT_EQ(run->levels.size(), 1u) << when;
    EXPECT_TRUE(run->nodes.empty());
    ASSERT_EQ(run->levels[0].rows.size(), 2u) << when;
    EXPECT_EQ(run->levels[0].rows[0][2], 50);
    EXPECT_TRUE(std::isnan(run->levels[0].rows[1][2]));
    auto list = list_runs_sqlite(db);
    ASSERT_TRUE(list) << list.error().message;
    EXPECT_EQ((*list)[0].ticks, 2u) << when;
    EXPECT_TRUE((*list)[0].nodes.empty());
  };
  // Read as it is: nothing changes in the file.
  check_old("before");
  EXPECT_EQ(query(db, "PRAGMA user_version"), "1");
  // Opened for writing: migrated, the old run unchanged, a new run beside it.
  std::array<std::vector<std::string>, kNumLevels> cols;
  cols[level_index(Level::system)] = {"memory"};
  {
    auto sink =
        SqliteSink::create(db, {{"levels", {"system"}}, {"interval", 1.0}}, {Level::system}, cols);
    ASSERT_TRUE(sink.ok()) << sink.error().message;
    std::array<std::vector<double>, kNumLevels> rows;
    rows[level_index(Level::system)] = {4.0};
    (*sink)->write(1, 2, rows);
    EXPECT_EQ((*sink)->run_id(), 2);
  }
  EXPECT_EQ(query(db, "PRAGMA user_version"), std::to_string(kSqliteSchemaVersion));
  EXPECT_EQ(query(db, "SELECT count(*) FROM samples WHERE node = ''"), "3");
  EXPECT_EQ(query(db, "SELECT count(*) FROM sample_values WHERE run_id = 1"), "4");
  EXPECT_EQ(query(db, "SELECT count(*) FROM pragma_table_info('columns') WHERE name = 'node'"),
            "1");
  check_old("after");
  auto run2 = read_run_sqlite(db, 2);
  ASSERT_TRUE(run2);
  EXPECT_EQ(run2->levels[0].rows[0][2], 4);
  // A second writer finds it migrated already.
  {
    auto again = SqliteDb::open(db, SqliteDb::Mode::write);
    ASSERT_TRUE(again.ok()) << again.error().message;
    EXPECT_EQ((*again)->schema_version(), kSqliteSchemaVersion);
  }
}

}  // namespace
}  // namespace sonde
