#pragma once
// Runs in one SQLite database that many runs share (docs/sqlite.md has the schema and example
// queries). The database is in WAL mode; each tick is one short transaction, so several runs can
// write to the same file at once and a run killed with SIGKILL keeps every committed tick. The
// run's row says `complete = 0` until the run ends cleanly.
#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/result.hpp"
#include "core/summary.hpp"
#include "sinks/run_data.hpp"

namespace sonde {

/// Version of the schema, in `PRAGMA user_version`. A database with a newer one is refused.
inline constexpr int kSqliteSchemaVersion = 1;
/// `PRAGMA application_id` of a sonde database ('SOND').
inline constexpr std::int32_t kSqliteApplicationId = 0x534F4E44;

/// True when `out` names a database file rather than a run directory (.sqlite, .sqlite3, .db).
bool is_sqlite_path(const std::string& out);

/// How long a writer or reader waits for a lock held by another connection: 5 s, or
/// $SONDE_SQLITE_BUSY_TIMEOUT (seconds) when set.
double sqlite_busy_timeout_s();

/// An open connection (RAII). Errors name the file.
class SqliteDb {
 public:
  enum class Mode { read, write };
  /// Opens `path`. `write` creates the file and the schema when missing; both modes refuse a
  /// file that is not SQLite, a SQLite file that is not a sonde database, or a newer schema.
  static Result<std::unique_ptr<SqliteDb>> open(const std::string& path, Mode mode);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  /// "PATH: what failed: sqlite's message" for the last error of this connection.
  std::string error_text(const std::string& what) const;
  /// Runs SQL without results.
  Result<void> exec(const std::string& sql);

 private:
  SqliteDb() = default;
  sqlite3* db_ = nullptr;
  std::string path_;
};

/// A prepared statement (RAII).
class SqliteStmt {
 public:
  SqliteStmt() = default;
  SqliteStmt(sqlite3_stmt* s) : s_(s) {}  // NOLINT(google-explicit-constructor)
  ~SqliteStmt() { sqlite3_finalize(s_); }
  SqliteStmt(SqliteStmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  SqliteStmt& operator=(SqliteStmt&& o) noexcept;
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;
  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

/// Writes one run into a shared database.
class SqliteSink {
 public:
  /// Opens (or creates) the database and inserts the run's row and its columns. The manifest is
  /// built as the run directory's (RunDirSink) from the engine and `meta`.
  static Result<std::unique_ptr<SqliteSink>> create(const std::string& path, const Engine& engine,
                                                    nlohmann::json meta);
  /// The same without an engine: `manifest` is stored as given; `columns[level_index(l)]` are
  /// the columns (without time/wallclock) of each level in `levels`.
  static Result<std::unique_ptr<SqliteSink>> create(
      const std::string& path, nlohmann::json manifest, const std::vector<Level>& levels,
      const std::array<std::vector<std::string>, kNumLevels>& columns);
  ~SqliteSink();
  SqliteSink(const SqliteSink&) = delete;
  SqliteSink& operator=(const SqliteSink&) = delete;

  /// Stores one row per level in one transaction. When another writer holds the lock longer
  /// than half the interval the rows are kept and written with the next tick; a write error
  /// (disk full, read-only file) is reported once, later rows are dropped and the run goes on.
  void write(const Engine::Tick& tick);
  void write(double time_s, double wallclock_s,
             const std::array<std::vector<double>, kNumLevels>& rows);
  /// Stores the end of the run (`complete = 1` unless a write failed) and its summary.
  void finish(const RunOutcome& outcome, const nlohmann::json& summary, std::uint64_t ticks,
              std::uint64_t ticks_missed);
  /// Sets a manifest key.
  void update(const std::string& key, nlohmann::json value);

  std::int64_t run_id() const { return run_id_; }
  /// "PATH#ID", what `sonde report` and `sonde runs` accept.
  std::string location() const;
  bool failed() const { return failed_; }

 private:
  SqliteSink() = default;
  bool flush();
  void report_failure(const std::string& what);
  void store_manifest();

  std::unique_ptr<SqliteDb> db_;
  std::vector<Level> levels_;
  nlohmann::json manifest_;
  std::int64_t run_id_ = 0;
  std::uint64_t tick_ = 0;
  SqliteStmt begin_, commit_, rollback_, insert_;
  struct Pending {
    Level level;
    std::uint64_t tick;
    double time_s, wallclock_s;
    std::string values;
  };
  std::vector<Pending> pending_;
  bool failed_ = false;
  bool warned_busy_ = false;
  int tick_timeout_ms_ = 0;
};

/// One row of `runs`, for `sonde runs list`.
struct StoredRun {
  std::int64_t id = 0;
  std::string host;
  std::vector<std::string> command;
  double start_wallclock = 0;
  std::optional<double> end_wallclock;
  std::optional<double> last_wallclock;  ///< of the last stored tick (for unfinished runs)
  std::optional<int> exit_status;
  double interval_s = 0;
  bool complete = false;
  std::uint64_t ticks = 0;  ///< stored ticks
};

/// SQLite's quick_check of the whole file: an error naming the file when it is damaged.
Result<void> check_sqlite_integrity(const SqliteDb& db);

/// Every run in the database, oldest first. A damaged database (quick_check, or a failing
/// query) is an error, never a partial listing.
Result<std::vector<StoredRun>> list_runs_sqlite(const std::string& db);

/// Reads one run (the latest when `id` is empty): its manifest (summary included once the run
/// has finished) and every stored row. `source` is "DB#ID".
Result<RunData> read_run_sqlite(const std::string& db, std::optional<std::int64_t> id);

/// Splits "FILE.sqlite#ID" into the file and the id ("FILE.sqlite": no id). An id that is not a
/// positive integer is an error.
Result<std::pair<std::string, std::optional<std::int64_t>>> parse_sqlite_location(
    const std::string& text);

/// Writes `run` as a run directory (manifest.json + perf_<level>.csv, the layout of RunDirSink).
/// Refuses a directory that already holds a run.
Result<void> write_run_dir(const RunData& run, const std::string& dir);

}  // namespace sonde
