// SQLite output and `sonde runs`: real sonde runs on real workloads into one database file, read
// back with the sqlite3 C API, the sqlite3 CLI and `sonde runs list|show|export`.
#include <signal.h>
#include <sqlite3.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

// Rows of a query as text cells ("NULL" for NULL), or a failure naming the database.
std::vector<std::vector<std::string>> query(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  std::vector<std::vector<std::string>> out;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << db << ": " << sqlite3_errmsg(h);
    sqlite3_close(h);
    return out;
  }
  sqlite3_busy_timeout(h, 5000);
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << db << ": " << sql << ": " << sqlite3_errmsg(h);
  } else {
    while (sqlite3_step(s) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(s); ++i) {
        const auto* t = sqlite3_column_text(s, i);
        row.emplace_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out.push_back(std::move(row));
    }
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return out;
}

std::string scalar(const fs::path& db, const std::string& sql) {
  const auto rows = query(db, sql);
  return rows.empty() || rows[0].empty() ? "<none>" : rows[0][0];
}

// Rows in `samples`, or -1 while the database or its schema does not exist yet.
int stored_rows(const fs::path& db) {
  if (!fs::exists(db)) return -1;
  if (scalar(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'samples'") != "1") return -1;
  return std::stoi(scalar(db, "SELECT count(*) FROM samples"));
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

TEST(SqliteRuns, TwoRunsListShowExport) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  const RunResult a = sonde({"run", "--interval", "0.05", "--levels", "process,system", "--out",
                             db.string(), "--", workload_binary(), "burn", "0.4"});
  ASSERT_EQ(a.status, 0) << a.describe();
  EXPECT_NE(a.err.find(db.string() + "#1"), std::string::npos) << "the summary names the run";
  const RunResult b = sonde({"record", "--system", "--interval", "0.05", "--duration", "0.5",
                             "--format", "sqlite", "--out", db.string(), "--quiet"});
  ASSERT_EQ(b.status, 0) << b.describe();

  // The shared file, with the sqlite3 CLI.
  const RunResult cli = run_command(
      {"sqlite3", db.string(), "SELECT id, complete, exit_status, mode FROM runs ORDER BY id"});
  ASSERT_EQ(cli.status, 0) << cli.describe();
  EXPECT_EQ(cli.out, "1|1|0|run\n2|1||record\n");

  const RunResult list = sonde({"runs", "list", db.string()});
  ASSERT_EQ(list.status, 0) << list.describe();
  EXPECT_NE(first_line(list.out).find("COMPLETE"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("burn 0.4"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("(node)"), std::string::npos) << list.out;
  const RunResult list_json = sonde({"runs", "list", "--json", db.string()});
  ASSERT_EQ(list_json.status, 0) << list_json.describe();
  const auto runs = nlohmann::json::parse(list_json.out);
  ASSERT_EQ(runs.size(), 2u) << runs.dump(2);
  EXPECT_EQ(runs[0].at("id"), 1);
  EXPECT_EQ(runs[0].at("exit_status"), 0);
  EXPECT_EQ(runs[0].at("complete"), true);
  EXPECT_GE(runs[0].at("ticks").get<int>(), 4);
  EXPECT_TRUE(runs[1].at("exit_status").is_null());
  EXPECT_GE(runs[1].at("duration_s").get<double>(), 0.4);

  const RunResult show = sonde({"runs", "show", "--json", db.string(), "1"});
  ASSERT_EQ(show.status, 0) << show.describe();
  const auto shown = nlohmann::json::parse(show.out);
  EXPECT_EQ(shown.at("manifest").at("command").at(1), "burn");
  EXPECT_EQ(shown.at("manifest").at("complete"), true);
  const auto& summary = shown.at("summary");
  EXPECT_GE(summary.at("user_cpu_s").get<double>() + summary.at("system_cpu_s").get<double>(), 0.35)
      << shown.dump(2);
  const RunResult show_text = sonde({"runs", "show", db.string() + "#2"});
  ASSERT_EQ(show_text.status, 0) << show_text.describe();
  EXPECT_NE(show_text.out.find("sonde summary"), std::string::npos) << show_text.out;

  // Exported run 1 has the layout of a run directory written by the same sonde.
  const RunResult dir_run =
      sonde({"run", "--interval", "0.05", "--levels", "process,system", "--quiet", "--out",
             (dir / "csv").string(), "--", workload_binary(), "burn", "0.2"});
  ASSERT_EQ(dir_run.status, 0) << dir_run.describe();
  const fs::path exported = dir / "exported";
  const RunResult exp = sonde({"runs", "export", db.string(), "1", "-o", exported.string()});
  ASSERT_EQ(exp.status, 0) << exp.describe();
  std::set<std::string> want, got;
  for (const auto& e : fs::directory_iterator(dir / "csv")) want.insert(e.path().filename());
  for (const auto& e : fs::directory_iterator(exported)) got.insert(e.path().filename());
  EXPECT_EQ(got, want);
  const auto m_dir = read_json(dir / "csv" / "manifest.json");
  const auto m_exp = read_json(exported / "manifest.json");
  // Keys written only when the run met a condition (a loaded machine that missed the interval,
  // a short last tick, a degraded collector) depend on how each run went, not on the layout.
  const std::set<std::string> conditional = {"interval_warning", "short_final_interval", "degraded",
                                             "notes", "priority"};
  for (const auto& [key, value] : m_dir.items()) {
    if (!conditional.contains(key)) {
      EXPECT_TRUE(m_exp.contains(key)) << "exported manifest lacks " << key;
    }
  }
  EXPECT_EQ(m_exp.at("files"), m_dir.at("files"));
  EXPECT_EQ(m_exp.at("columns_by_level"), m_dir.at("columns_by_level"));
  for (const std::string level : {"process", "system"}) {
    const std::string name = "perf_" + level + ".csv";
    const CsvTable d = read_csv(dir / "csv" / name);
    const CsvTable e = read_csv(exported / name);  // strict: every row complete
    EXPECT_EQ(e.header, d.header) << name;
    EXPECT_EQ(std::to_string(e.rows.size()), scalar(db,
                                                    "SELECT count(*) FROM samples WHERE "
                                                    "run_id = 1 AND level = '" +
                                                        level + "'"));
    // wallclock with microseconds, as the run directory writes it
    ASSERT_FALSE(e.rows.empty());
    const std::string& wc = e.rows[0][1];
    EXPECT_EQ(wc.size() - wc.find('.'), 7u) << wc;
  }
  EXPECT_EQ(count_nan(read_csv(exported / "perf_process.csv").numbers("memory")), 0u);

  // sonde report reads a run from the database.
  const RunResult report =
      sonde({"report", db.string() + "#1", "-o", (dir / "run1.html").string()});
  ASSERT_EQ(report.status, 0) << report.describe();
  EXPECT_NE(read_file(dir / "run1.html").find("burn"), std::string::npos);

  // JSON export.
  const RunResult json = sonde({"runs", "export", "--format", "json", db.string(), "2"});
  ASSERT_EQ(json.status, 0) << json.describe();
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j.at("source"), db.string() + "#2");
  EXPECT_EQ(j.at("levels").at("system").at("columns").at(0), "time");
  EXPECT_GE(j.at("levels").at("system").at("rows").size(), 5u);
}

TEST(SqliteRuns, SigkillKeepsEveryCommittedTick) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  BackgroundProcess rec(
      {sonde_binary(), "record", "--system", "--interval", "0.05", "--out", db.string()});
  int rows = -1;
  for (int i = 0; i < 300 && rec.running() && rows < 10; ++i) {
    sleep_for(0.1);
    rec.poll();
    rows = stored_rows(db);
  }
  ASSERT_TRUE(rec.running()) << "sonde record exited by itself; stderr: " << rec.err();
  ASSERT_GE(rows, 10);
  const std::string seen = std::to_string(rows);
  rec.signal(SIGKILL);
  ASSERT_EQ(rec.wait(30), std::optional<int>(128 + SIGKILL));

  // The sqlite3 CLI reads it (recovering the WAL): every tick seen before the kill is there,
  // numbered without gaps, and the run says it did not finish.
  const RunResult cli =
      run_command({"sqlite3", db.string(),
                   "PRAGMA integrity_check; SELECT count(*) >= " + seen +
                       ", max(tick) + 1 = count(*) FROM samples WHERE run_id = 1; "
                       "SELECT complete, end_wallclock IS NULL FROM runs"});
  ASSERT_EQ(cli.status, 0) << cli.describe();
  EXPECT_EQ(cli.out, "ok\n1|1\n0|1\n");

  const RunResult list = sonde({"runs", "list", db.string()});
  ASSERT_EQ(list.status, 0) << list.describe();
  EXPECT_NE(list.out.find(" no "), std::string::npos) << list.out;
  const RunResult exp =
      sonde({"runs", "export", db.string() + "#1", "-o", (dir / "exported").string()});
  ASSERT_EQ(exp.status, 0) << exp.describe();
  const CsvTable t = read_csv(dir / "exported" / "perf_system.csv");
  EXPECT_GE(t.rows.size(), static_cast<std::size_t>(std::stoi(seen)));
  EXPECT_EQ(read_json(dir / "exported" / "manifest.json").at("complete"), false);
}

TEST(SqliteRuns, ConcurrentRunsShareOneDatabase) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  std::vector<std::unique_ptr<BackgroundProcess>> procs;
  for (int i = 0; i < 3; ++i)
    procs.push_back(std::make_unique<BackgroundProcess>(
        std::vector<std::string>{sonde_binary(), "run", "--interval", "0.02", "--quiet", "--out",
                                 db.string(), "--", workload_binary(), "burn", "0.5"}));
  for (auto& p : procs) {
    const auto status = p->wait(60);
    ASSERT_EQ(status, std::optional<int>(0)) << p->err();
    EXPECT_EQ(p->err().find("error"), std::string::npos) << p->err();
  }
  const auto runs = query(db, "SELECT id, complete, ticks FROM runs ORDER BY id");
  ASSERT_EQ(runs.size(), 3u);
  for (const auto& r : runs) {
    EXPECT_EQ(r[1], "1");
    // Every tick of every level stored, numbered 0..ticks-1.
    for (const std::string level : {"process", "user", "system"})
      EXPECT_EQ(scalar(db,
                       "SELECT count(*) || '/' || (max(tick) + 1) FROM samples WHERE run_id "
                       "= " +
                           r[0] + " AND level = '" + level + "'"),
                r[2] + "/" + r[2])
          << "run " << r[0] << " level " << level;
  }
}

TEST(SqliteRuns, ALockedDatabaseDelaysRowsButLosesNone) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  BackgroundProcess rec({sonde_binary(), "record", "--system", "--interval", "0.05", "--duration",
                         "5", "--quiet", "--out", db.string()});
  for (int i = 0; i < 100 && stored_rows(db) < 1; ++i) sleep_for(0.1);
  // Another writer holds the write lock for a second (the sqlite3 CLI in a transaction).
  const RunResult lock = run_command(
      {"sqlite3", db.string(),
       "BEGIN IMMEDIATE; INSERT INTO runs (host, command, mode, start_wallclock, interval_s, "
       "manifest) VALUES ('x', '[]', 'run', 0, 1, '{}'); SELECT 1 FROM (WITH RECURSIVE c(n) AS "
       "(SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000000) SELECT count(*) FROM c); "
       "COMMIT;"});
  ASSERT_EQ(lock.status, 0) << lock.describe();
  ASSERT_EQ(rec.wait(60), std::optional<int>(0)) << rec.err();
  const auto r = query(db,
                       "SELECT ticks, (SELECT count(*) FROM samples WHERE run_id = 1), "
                       "(SELECT max(tick) + 1 FROM samples WHERE run_id = 1) FROM runs "
                       "WHERE id = 1");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0][0], r[0][1]) << "every tick stored; stderr: " << rec.err();
  EXPECT_EQ(r[0][0], r[0][2]);
  EXPECT_NE(rec.err().find("rows are kept and written with a later tick"), std::string::npos)
      << "the lock was not noticed: " << rec.err();
}

TEST(SqliteRuns, LockedLongerThanTheTimeoutIsAClearError) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  ASSERT_EQ(
      sonde({"record", "--system", "--duration", "0.1", "--quiet", "--out", db.string()}).status,
      0);
  BackgroundProcess holder(
      {"sqlite3", db.string(),
       "BEGIN IMMEDIATE; INSERT INTO runs (host, command, mode, start_wallclock, interval_s, "
       "manifest) VALUES ('x', '[]', 'run', 0, 1, '{}'); SELECT 1 FROM (WITH RECURSIVE c(n) AS "
       "(SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 20000000) SELECT count(*) FROM c); "
       "ROLLBACK;"});
  sleep_for(0.3);
  const RunResult r = sonde({"run", "--out", db.string(), "--", workload_binary(), "exit", "0"},
                            {.env = {{"SONDE_SQLITE_BUSY_TIMEOUT", "0.2"}}});
  holder.kill_and_wait();
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_NE(r.err.find(db.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("locked by another process (waited 0.2 s)"), std::string::npos) << r.err;
}

TEST(SqliteRuns, BadDatabaseFilesAreClearErrors) {
  const fs::path dir = scratch_dir();
  const fs::path text = dir / "notes.sqlite";
  std::ofstream(text) << "not a database: some text, long enough to fill a SQLite header.....\n";
  const RunResult r = sonde({"record", "--system", "--duration", "0.2", "--out", text.string()});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find(text.string() + " is not a SQLite database"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(text).substr(0, 15), "not a database:") << "the file is untouched";
  const RunResult l = sonde({"runs", "list", text.string()});
  EXPECT_EQ(l.status, 2) << l.describe();
  EXPECT_NE(l.err.find("is not a SQLite database"), std::string::npos) << l.err;

  const fs::path db = dir / "runs.db";
  ASSERT_EQ(
      sonde({"record", "--system", "--duration", "0.1", "--quiet", "--out", db.string()}).status,
      0);
  const RunResult missing = sonde({"runs", "show", db.string(), "42"});
  EXPECT_EQ(missing.status, 2) << missing.describe();
  EXPECT_NE(missing.err.find(db.string() + " has no run with id 42"), std::string::npos)
      << missing.err;
  const RunResult bad_id = sonde({"runs", "export", db.string() + "#x"});
  EXPECT_EQ(bad_id.status, 2) << bad_id.describe();

  ASSERT_EQ(run_command({"sqlite3", db.string(), "PRAGMA user_version = 7"}).status, 0);
  const RunResult newer = sonde({"runs", "list", db.string()});
  EXPECT_EQ(newer.status, 2) << newer.describe();
  EXPECT_NE(newer.err.find("schema version 7, newer"), std::string::npos) << newer.err;

  const RunResult none = sonde({"runs", "list", (dir / "nothing.sqlite").string()});
  EXPECT_EQ(none.status, 1) << none.describe();
  EXPECT_NE(none.err.find("nothing.sqlite: no such database file"), std::string::npos) << none.err;
}

// A write error (here: the file size limit) is reported once; the run and its program go on.
TEST(SqliteRuns, AWriteErrorIsReportedOnceAndTheRunGoesOn) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  // dash: 200 blocks of 512 bytes; the WAL grows by a few KiB per tick.
  const std::string cmd = std::string("ulimit -f 200; trap '' XFSZ; exec ") + sonde_binary() +
                          " run --interval 0.05 --out " + db.string() + " -- " + workload_binary() +
                          " sleep 2";
  const RunResult r = run_command({"/bin/sh", "-c", cmd});
  EXPECT_EQ(r.status, 0) << r.describe();
  const auto first = r.err.find("no more rows are written");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(first, r.err.rfind("no more rows are written")) << "reported once: " << r.err;
  EXPECT_NE(r.err.find(db.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sonde summary"), std::string::npos) << "the run went on: " << r.err;
  // What was committed before is readable.
  EXPECT_GT(std::stoi(scalar(db, "SELECT count(*) FROM samples")), 0);
}

}  // namespace
}  // namespace sonde::test
