#pragma once
// A sonde SQLite database: the connection and statement handles (RAII), the checks on opening
// (links, owners, another program's or a newer sonde's database) and the schema
// (docs/sqlite.md), created on first write.
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/result.hpp"

namespace sonde {

/// Version of the schema, in `PRAGMA user_version`. A database with a newer one is refused.
/// 1: one node per run; 2: `columns` and `samples` have `node` ('' = the run's own rows or a
/// multi-node run's aggregate). A version-1 database is migrated when opened for writing and
/// read as it is.
inline constexpr int kSqliteSchemaVersion = 2;
/// `PRAGMA application_id` of a sonde database ('SOND').
inline constexpr std::int32_t kSqliteApplicationId = 0x534F4E44;

/// True when `out` names a database file rather than a run directory (.sqlite, .sqlite3, .db).
bool is_sqlite_path(const std::string& out);

/// How long a writer or reader waits for a lock held by another connection: 5 s, or
/// $SONDE_SQLITE_BUSY_TIMEOUT (seconds) when set.
double sqlite_busy_timeout_s();

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
  /// Prepares one statement (`flags`: SQLITE_PREPARE_*); an error (Errc::io) is error_text(what).
  Result<SqliteStmt> prepare(const char* sql, const std::string& what, unsigned flags = 0) const;
  /// The file's schema version (after migration, for a write connection).
  int schema_version() const { return version_; }

 private:
  SqliteDb() = default;
  /// Read mode: `runs`, `columns` and `samples` are plain tables (not views, virtual tables or
  /// tables with generated columns, whose reading runs SQL the file's owner wrote).
  Result<void> check_read_schema() const;
  sqlite3* db_ = nullptr;
  std::string path_;
  int version_ = 0;
  /// Another user's database: every statement stops at this monotonic time (progress handler).
  double read_deadline_ = 0;
  mutable bool timed_out_ = false;
};

}  // namespace sonde
