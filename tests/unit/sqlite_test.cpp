// The SQLite store: schema, writer and reader on real database files in a temporary directory.
#include <sqlite3.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "sinks/run_reader.hpp"
#include "sinks/sqlite.hpp"
#include "support/sqlite_helpers.hpp"

namespace sonde {
namespace {

using test::exec;
using test::query;
using test::TempDir;

namespace fs = std::filesystem;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::array<std::vector<std::string>, kNumLevels> test_columns() {
  std::array<std::vector<std::string>, kNumLevels> c;
  c[level_index(Level::process)] = {"cpu_util_avg", "memory"};
  c[level_index(Level::system)] = {"cpu_util_0", "cpu_util_avg", "memory"};
  return c;
}

nlohmann::json test_manifest(double interval = 0.5) {
  return {{"host", "node1"},      {"command", {"sleep", "1"}},
          {"mode", "run"},        {"start_wallclock", 1700000000.0},
          {"interval", interval}, {"levels", {"process", "system"}},
          {"complete", false}};
}

std::unique_ptr<SqliteSink> make_sink(const std::string& db, double interval = 0.5) {
  auto s = SqliteSink::create(db, test_manifest(interval), {Level::process, Level::system},
                              test_columns());
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

void write_ticks(SqliteSink& s, int n, int first = 0) {
  for (int i = first; i < first + n; ++i) {
    std::array<std::vector<double>, kNumLevels> rows;
    rows[level_index(Level::process)] = {i == 0 ? kNaN : 10.0 * i, 0.25};
    rows[level_index(Level::system)] = {1.5, 2.5 * i, 3.0};
    s.write(100.0 + 0.5 * i, 1700000000.0 + 0.5 * i, rows);
  }
}

TEST(Sqlite, WritesAndReadsBackARun) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  EXPECT_EQ(sink->run_id(), 1);
  EXPECT_EQ(sink->location(), db + "#1");
  write_ticks(*sink, 3);

  // Before the end the run is readable and incomplete.
  auto partial = read_run_sqlite(db, std::nullopt);
  ASSERT_TRUE(partial.ok()) << partial.error().message;
  EXPECT_EQ(partial->manifest.at("complete"), false);
  EXPECT_EQ(query(db, "SELECT complete FROM runs WHERE id = 1"), "0");

  RunOutcome outcome;
  outcome.exit_status = 3;
  sink->finish(outcome, {{"wall_s", 1.5}}, 3, 0);
  EXPECT_EQ(query(db, "SELECT complete || ',' || exit_status || ',' || ticks FROM runs"), "1,3,3");

  auto run = read_run_sqlite(db, 1);
  ASSERT_TRUE(run.ok()) << run.error().message;
  EXPECT_EQ(run->source, db + "#1");
  EXPECT_EQ(run->manifest.at("complete"), true);
  EXPECT_EQ(run->manifest.at("exit_status"), 3);
  EXPECT_EQ(run->manifest.at("summary").at("wall_s"), 1.5);
  ASSERT_EQ(run->levels.size(), 2u);
  const LevelTable& p = run->levels[0];
  EXPECT_EQ(p.level, Level::process);
  EXPECT_EQ(p.columns, (std::vector<std::string>{"time", "wallclock", "cpu_util_avg", "memory"}));
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(p.rows[0][0], 100.0);
  EXPECT_DOUBLE_EQ(p.rows[0][1], 1700000000.0);
  EXPECT_TRUE(std::isnan(p.rows[0][2])) << "NaN is stored as null and read back as NaN";
  EXPECT_DOUBLE_EQ(p.rows[2][2], 20.0);
  const LevelTable& s = run->levels[1];
  EXPECT_EQ(s.level, Level::system);
  ASSERT_EQ(s.rows.size(), 3u);
  EXPECT_DOUBLE_EQ(s.rows[2][3], 5.0);
}

TEST(Sqlite, SchemaIsQueryableWithPlainSql) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  write_ticks(*sink, 4);
  sink->finish({}, nlohmann::json::object(), 4, 0);
  EXPECT_EQ(query(db, "PRAGMA user_version"), std::to_string(kSqliteSchemaVersion));
  EXPECT_EQ(query(db, "PRAGMA journal_mode"), "wal");
  // One column's time series through json_extract and the column's position.
  EXPECT_EQ(query(db,
                  "SELECT group_concat(v, ' ') FROM (SELECT json_extract(s.vals, '$[' || "
                  "c.position || ']') AS v FROM samples s JOIN columns c USING (run_id, level) "
                  "WHERE c.name = 'cpu_util_avg' AND s.level = 'system' ORDER BY s.tick)"),
            "0 2.5 5 7.5");
  // The long form.
  EXPECT_EQ(query(db,
                  "SELECT avg(value) FROM sample_values WHERE run_id = 1 AND level = 'process' "
                  "AND name = 'cpu_util_avg'"),
            "20.0");
  EXPECT_EQ(query(db, "SELECT count(*) FROM sample_values WHERE value IS NULL"), "1");
}

TEST(Sqlite, SecondRunGetsTheNextIdAndIsTheLatest) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  {
    auto a = make_sink(db);
    ASSERT_TRUE(a);
    write_ticks(*a, 2);
    a->finish({}, {}, 2, 0);
  }
  auto b = make_sink(db);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->run_id(), 2);
  write_ticks(*b, 5);
  auto latest = read_run_sqlite(db, std::nullopt);
  ASSERT_TRUE(latest.ok()) << latest.error().message;
  EXPECT_EQ(latest->source, db + "#2");
  EXPECT_EQ(latest->levels.at(0).rows.size(), 5u);
  auto runs = list_runs_sqlite(db);
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_TRUE((*runs)[0].complete);
  EXPECT_FALSE((*runs)[1].complete);
  EXPECT_EQ((*runs)[1].ticks, 5u);
  EXPECT_EQ((*runs)[1].command, (std::vector<std::string>{"sleep", "1"}));
}

TEST(Sqlite, MissingRunIdNamesTheFileAndTheIds) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  auto run = read_run_sqlite(db, 7);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error().message.find(db), std::string::npos) << run.error().message;
  EXPECT_NE(run.error().message.find("no run with id 7"), std::string::npos) << run.error().message;
  EXPECT_NE(run.error().message.find("ids 1 to 1"), std::string::npos) << run.error().message;
}

TEST(Sqlite, RefusesFilesThatAreNotSondeDatabases) {
  TempDir t;
  const std::string text = (t.path / "notes.sqlite").string();
  std::ofstream(text) << "this is not a database, just some text that is long enough\n";
  for (auto mode : {SqliteDb::Mode::read, SqliteDb::Mode::write}) {
    auto d = SqliteDb::open(text, mode);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find(text + " is not a SQLite database"), std::string::npos)
        << d.error().message;
  }

  const std::string other = (t.path / "other.db").string();
  exec(other, "CREATE TABLE t (x)");
  auto d = SqliteDb::open(other, SqliteDb::Mode::write);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().message.find("not one written by sonde"), std::string::npos)
      << d.error().message;
  EXPECT_EQ(query(other, "PRAGMA journal_mode"), "delete") << "another program's file is untouched";

  auto missing = read_run_sqlite((t.path / "missing.sqlite").string(), std::nullopt);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no such database file"), std::string::npos);
  EXPECT_FALSE(fs::exists(t.path / "missing.sqlite")) << "reading creates nothing";
}

TEST(Sqlite, RefusesANewerSchema) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  { ASSERT_TRUE(make_sink(db)); }
  exec(db, "PRAGMA user_version = 99");
  for (auto mode : {SqliteDb::Mode::read, SqliteDb::Mode::write}) {
    auto d = SqliteDb::open(db, mode);
    ASSERT_FALSE(d.ok());
    EXPECT_NE(d.error().message.find("schema version 99, newer"), std::string::npos)
        << d.error().message;
  }
}

TEST(Sqlite, KeepsRowsWhileAnotherWriterHoldsTheLock) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db, 0.02);  // a tick waits at most 10 ms for the lock
  ASSERT_TRUE(sink);
  write_ticks(*sink, 1);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  write_ticks(*sink, 2, 1);
  EXPECT_EQ(query(db, "SELECT count(*) FROM samples"), "2") << "only tick 0 is committed";
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  write_ticks(*sink, 1, 3);
  EXPECT_FALSE(sink->failed());
  EXPECT_EQ(query(db, "SELECT group_concat(tick) FROM samples WHERE level = 'process'"), "0,1,2,3");
}

TEST(Sqlite, AWriteErrorStopsWritingButNotTheRun) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  write_ticks(*sink, 2);
  // Someone else breaks the database under the writer.
  exec(db, "DROP VIEW sample_values; DROP TABLE samples");
  testing::internal::CaptureStderr();
  write_ticks(*sink, 3, 2);
  sink->finish({}, {}, 5, 0);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(sink->failed());
  EXPECT_NE(err.find(db), std::string::npos) << err;
  EXPECT_EQ(err.find("no more rows"), err.rfind("no more rows")) << "reported once: " << err;
  EXPECT_EQ(query(db, "SELECT complete FROM runs"), "0");
}

TEST(Sqlite, ParsesLocations) {
  auto a = parse_sqlite_location("runs.sqlite#12");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "runs.sqlite");
  EXPECT_EQ(a->second, std::optional<std::int64_t>(12));
  auto b = parse_sqlite_location("dir/runs.db");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, "dir/runs.db");
  EXPECT_FALSE(b->second);
  EXPECT_FALSE(parse_sqlite_location("runs.sqlite#x").ok());
  EXPECT_FALSE(parse_sqlite_location("runs.sqlite#0").ok());
  EXPECT_TRUE(is_sqlite_path("a/runs.sqlite"));
  EXPECT_TRUE(is_sqlite_path("x.db"));
  EXPECT_FALSE(is_sqlite_path("sonde-runs/demo"));
  EXPECT_FALSE(is_sqlite_path(".db"));
}

TEST(Sqlite, ReadRunDispatchesDatabaseLocations) {
  TempDir t;
  const std::string db = (t.path / "store.data").string();  // any file name, with #ID or not
  for (int run = 0; run < 2; ++run) {
    auto sink = make_sink(db);
    ASSERT_TRUE(sink);
    write_ticks(*sink, 2 + run);
  }
  auto first = read_run(db + "#1");
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_EQ(first->source, db + "#1");
  EXPECT_EQ(first->levels.at(0).rows.size(), 2u);
  auto latest = read_run(db);
  ASSERT_TRUE(latest.ok()) << latest.error().message;
  EXPECT_EQ(latest->source, db + "#2");
  auto missing = read_run((t.path / "gone.sqlite#3").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("gone.sqlite: no such database file"), std::string::npos)
      << missing.error().message;
}

TEST(Sqlite, ExportsTheRunDirectoryLayout) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  write_ticks(*sink, 2);
  sink->finish({}, {}, 2, 0);
  auto run = read_run_sqlite(db, 1);
  ASSERT_TRUE(run.ok());
  const std::string dir = (t.path / "export").string();
  ASSERT_TRUE(write_run_dir(*run, dir).ok());
  std::ifstream f(dir + "/perf_process.csv");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text,
            "time,wallclock,cpu_util_avg,memory\n"
            "100.000000,1700000000.000000,,0.25\n"
            "100.500000,1700000000.500000,10,0.25\n");
  auto manifest = nlohmann::json::parse(std::ifstream(dir + "/manifest.json"));
  EXPECT_EQ(manifest.at("files").at("system"), "perf_system.csv");
  EXPECT_EQ(manifest.at("exported_from"), db + "#1");
  EXPECT_FALSE(write_run_dir(*run, dir).ok()) << "an existing run is not overwritten";
}

}  // namespace
TEST(Sqlite, ReadingAHostileRunIsBounded) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  write_ticks(*sink, 2);
  sink.reset();
  ASSERT_TRUE(read_run_sqlite(db, 1).ok());
  // One row whose array is longer than any row sonde writes (1.2 MB of "0,").
  exec(db,
       "UPDATE samples SET vals = '[' || replace(hex(zeroblob(600000)), '00', '0,') || '0]' "
       "WHERE tick = 0");
  auto run = read_run_sqlite(db, 1);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.error().message.find("more than sonde reads"), std::string::npos)
      << run.error().message;
}

TEST(Sqlite, ListingADamagedDatabaseIsAnError) {
  TempDir t;
  const std::string db = (t.path / "runs.sqlite").string();
  auto sink = make_sink(db);
  ASSERT_TRUE(sink);
  write_ticks(*sink, 50);
  sink.reset();
  ASSERT_TRUE(list_runs_sqlite(db).ok());
  const long page = std::stol(
      query(db, "SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_autoindex_samples_1'"));
  const long size = std::stol(query(db, "PRAGMA page_size"));
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((page - 1) * size);
    const std::string garbage(static_cast<std::size_t>(size), 'Z');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  auto runs = list_runs_sqlite(db);
  ASSERT_FALSE(runs.ok());
  EXPECT_NE(runs.error().message.find(db), std::string::npos) << runs.error().message;
  EXPECT_NE(runs.error().message.find("corrupt"), std::string::npos) << runs.error().message;
}

}  // namespace sonde
