// Another user's SQLite database read by root (`runs list/show`, `report x.sqlite`), issue 21: a
// file's owner writes the SQL that reading it runs when `runs` is a view (an infinite recursive
// CTE hung every command) or a table with generated columns, stores values of any size (800 MB
// reached 2.7 GB RSS before the 1 MiB bound applied) and JSON nested a million deep (4 GB RSS).
// sonde reads only plain tables, no value over 64 MiB, JSON nested at most 64 deep, and another
// user's file under a deadline.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

// A database with one real run in it.
fs::path recorded_db(const fs::path& dir) {
  const fs::path db = dir / "runs.sqlite";
  const RunResult r = run_command({sonde_binary(), "run", "--interval", "0.05", "--levels",
                                   "process", "--out", db.string(), "--", "/bin/true"});
  EXPECT_EQ(r.status, 0) << r.describe();
  return db;
}

// Runs SQL on `db` as its owner would (the sqlite3 C API, no limits of sonde's).
void tamper(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << "\n" << sql;
  sqlite3_free(err);
  // Back to a plain file: no -wal left for the reader to find.
  sqlite3_exec(h, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;", nullptr, nullptr,
               nullptr);
  sqlite3_close(h);
}

TEST(HostileSqlite, RunsAsAnEndlessViewIsRefusedAtOnce) {
  const fs::path db = recorded_db(scratch_dir());
  tamper(db,
         "PRAGMA foreign_keys=OFF; ALTER TABLE runs RENAME TO runs_real; "
         "CREATE VIEW runs AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
         "SELECT x AS id, 'h' AS host, '[]' AS command, 0 AS start_wallclock, 0 AS end_wallclock, "
         "0 AS exit_status, 1 AS interval_s, 1 AS complete, 0 AS ticks, '{}' AS manifest, "
         "NULL AS summary FROM c;");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"runs", "list", db.string()},
        std::vector<std::string>{"runs", "show", db.string() + "#1"}}) {
    const RunResult r = sonde(args);
    ASSERT_FALSE(r.timed_out) << r.describe();
    EXPECT_NE(r.status, 0) << r.describe();
    EXPECT_NE(r.err.find("`runs` is a view, not sonde's table"), std::string::npos) << r.err;
  }
}

TEST(HostileSqlite, GeneratedColumnsAreRefused) {
  const fs::path db = recorded_db(scratch_dir());
  tamper(db,
         "PRAGMA foreign_keys=OFF; ALTER TABLE runs RENAME TO runs_real; "
         "CREATE TABLE runs (id INTEGER PRIMARY KEY, host TEXT, command TEXT, start_wallclock "
         "REAL, end_wallclock REAL, exit_status INTEGER, interval_s REAL, complete INTEGER, "
         "ticks INTEGER, summary TEXT, manifest TEXT GENERATED ALWAYS AS "
         "(printf('%.*c', 100000000, 'x')) VIRTUAL);"
         "INSERT INTO runs (id, host, command) VALUES (1, 'h', '[]');");
  const RunResult r = sonde({"runs", "show", db.string() + "#1"});
  EXPECT_NE(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("`runs` is a table with generated columns"), std::string::npos) << r.err;
}

TEST(HostileSqlite, AValueOverTheBoundIsNotRead) {
  const fs::path db = recorded_db(scratch_dir());
  tamper(db, "UPDATE runs SET manifest = printf('{\"x\":\"%.*c\"}', 80000000, 'x');");
  const RunResult r = sonde({"runs", "show", db.string() + "#1"});
  EXPECT_NE(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("too big"), std::string::npos) << r.err;
}

TEST(HostileSqlite, AManifestNestedAMillionDeepIsRefused) {
  const fs::path db = recorded_db(scratch_dir());
  tamper(db,
         "UPDATE runs SET manifest = '{\"x\":' || printf('%.*c', 1000000, '[') || "
         "printf('%.*c', 1000000, ']') || '}';");
  const RunResult r = sonde({"runs", "show", db.string() + "#1"});
  ASSERT_FALSE(r.timed_out) << r.describe();
  EXPECT_NE(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("nested deeper than 64 levels"), std::string::npos) << r.err;
  // The same manifest in a run directory.
  const fs::path dir = scratch_dir("dir");
  const RunResult run =
      run_command({sonde_binary(), "run", "--interval", "0.05", "--levels", "process", "--out",
                   (dir / "run").string(), "--", "/bin/true"});
  ASSERT_EQ(run.status, 0) << run.describe();
  {
    std::ofstream f(dir / "run" / "manifest.json", std::ios::trunc);
    f << "{\"x\":" << std::string(1000000, '[') << std::string(1000000, ']') << "}";
  }
  const RunResult rep = sonde({"report", (dir / "run").string(), "-o", (dir / "r.html").string()});
  EXPECT_NE(rep.status, 0) << rep.describe();
  EXPECT_NE(rep.err.find("nested deeper than 64 levels"), std::string::npos) << rep.err;
}

// Root reading another user's file: every statement runs under a deadline
// ($SONDE_SQLITE_READ_TIMEOUT, here so short that the first one is stopped).
TEST(HostileSqlite, AnotherUsersFileIsReadUnderADeadline) {
  const auto other = other_user();
  if (!other) GTEST_SKIP() << "needs root (a second user)";
  const fs::path dir = scratch_dir();
  ::chmod(dir.c_str(), 0755);
  const fs::path db = recorded_db(dir);
  // Enough rows that reading them takes more than the progress handler's step.
  tamper(db,
         "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 20000) "
         "INSERT INTO samples (run_id, node, level, tick, time, wallclock, vals) "
         "SELECT 1, '', 'process', 1000 + x, x, x, '[]' FROM c;");
  ASSERT_EQ(::chown(db.c_str(), other->uid, other->gid), 0);
  RunOptions o;
  o.timeout_s = 30;
  o.env = {{"SONDE_SQLITE_READ_TIMEOUT", "0.000001"}};
  const RunResult r = run_command({sonde_binary(), "runs", "list", db.string()}, o);
  EXPECT_NE(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("reading took longer than"), std::string::npos) << r.err;
  // With the default deadline the same file reads.
  const RunResult ok = run_command({sonde_binary(), "runs", "list", db.string()});
  EXPECT_EQ(ok.status, 0) << ok.describe();
}

}  // namespace
}  // namespace sonde::test
