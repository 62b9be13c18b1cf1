#include "sinks/sqlite_db.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/fs.hpp"
#include "sinks/sqlite_values.hpp"

namespace sonde {
using sqlite_detail::busy_ms;

namespace {

// The schema (docs/sqlite.md). Samples are one row per run, level and tick; the values of the
// level's columns are a JSON array in the order of `columns.position`: compact (no name per
// value), written with one insert per level per tick, and queryable with json_extract/json_each
// (the view sample_values gives the long form).
constexpr const char* kSchema = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  host TEXT NOT NULL,
  command TEXT NOT NULL,
  mode TEXT NOT NULL,
  start_wallclock REAL NOT NULL,
  end_wallclock REAL,
  exit_status INTEGER,
  interval_s REAL NOT NULL,
  complete INTEGER NOT NULL DEFAULT 0,
  ticks INTEGER,
  manifest TEXT NOT NULL,
  summary TEXT
);
CREATE TABLE columns (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node TEXT NOT NULL DEFAULT '',
  level TEXT NOT NULL,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (run_id, node, level, position)
) WITHOUT ROWID;
CREATE TABLE samples (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node TEXT NOT NULL DEFAULT '',
  level TEXT NOT NULL,
  tick INTEGER NOT NULL,
  time REAL NOT NULL,
  wallclock REAL NOT NULL,
  vals TEXT NOT NULL,
  PRIMARY KEY (run_id, node, level, tick)
);
CREATE VIEW sample_values AS
  SELECT s.run_id AS run_id, s.node AS node, s.level AS level, s.tick AS tick, s.time AS time,
         s.wallclock AS wallclock, c.name AS name,
         json_extract(s.vals, '$[' || c.position || ']') AS value
  FROM samples AS s JOIN columns AS c
    ON c.run_id = s.run_id AND c.node = s.node AND c.level = s.level;
)sql";

// Schema 1 (sonde before multi-node runs) to 2: `columns` and `samples` get `node` ('' for every
// existing row), part of their primary keys; the view follows. Run inside the write lock.
constexpr const char* kMigrate1To2 = R"sql(
DROP VIEW sample_values;
CREATE TABLE columns_v2 (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node TEXT NOT NULL DEFAULT '',
  level TEXT NOT NULL,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (run_id, node, level, position)
) WITHOUT ROWID;
INSERT INTO columns_v2 (run_id, node, level, position, name)
  SELECT run_id, '', level, position, name FROM columns;
DROP TABLE columns;
ALTER TABLE columns_v2 RENAME TO columns;
CREATE TABLE samples_v2 (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node TEXT NOT NULL DEFAULT '',
  level TEXT NOT NULL,
  tick INTEGER NOT NULL,
  time REAL NOT NULL,
  wallclock REAL NOT NULL,
  vals TEXT NOT NULL,
  PRIMARY KEY (run_id, node, level, tick)
);
INSERT INTO samples_v2 (run_id, node, level, tick, time, wallclock, vals)
  SELECT run_id, '', level, tick, time, wallclock, vals FROM samples;
DROP TABLE samples;
ALTER TABLE samples_v2 RENAME TO samples;
CREATE VIEW sample_values AS
  SELECT s.run_id AS run_id, s.node AS node, s.level AS level, s.tick AS tick, s.time AS time,
         s.wallclock AS wallclock, c.name AS name,
         json_extract(s.vals, '$[' || c.position || ']') AS value
  FROM samples AS s JOIN columns AS c
    ON c.run_id = s.run_id AND c.node = s.node AND c.level = s.level;
)sql";

// Seconds from the environment variable `name` when it holds a number of them, at least 0 (above
// 0 unless `zero_ok`), else `fallback`.
double env_seconds(const char* name, double fallback, bool zero_ok) {
  if (const char* t = std::getenv(name); t && *t) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end && *end == '\0' && (zero_ok ? v >= 0 : v > 0)) return v;
  }
  return fallback;
}

}  // namespace

bool is_sqlite_path(const std::string& out) {
  for (const char* ext : {".sqlite", ".sqlite3", ".db"}) {
    const std::string_view e(ext);
    if (out.size() > e.size() && out.compare(out.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

double sqlite_busy_timeout_s() {
  return env_seconds("SONDE_SQLITE_BUSY_TIMEOUT", 5.0, true);
}

/// How long reading another user's database may take, all statements together:
/// $SONDE_SQLITE_READ_TIMEOUT seconds, 60 by default.
double sqlite_read_timeout_s() {
  return env_seconds("SONDE_SQLITE_READ_TIMEOUT", 60.0, false);
}

/// The longest value (string or blob) sonde reads from a database: a manifest is at most 16 MiB,
/// a row of values at most 1 MiB; a larger one is SQLITE_TOOBIG before it is in memory.
constexpr int kMaxReadValueBytes = 64 << 20;

SqliteStmt& SqliteStmt::operator=(SqliteStmt&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(s_);
    s_ = o.s_;
    o.s_ = nullptr;
  }
  return *this;
}

SqliteDb::~SqliteDb() {
  if (db_) sqlite3_close_v2(db_);
}

Result<void> SqliteDb::check_read_schema() const {
  for (const char* table : {"runs", "columns", "samples"}) {
    auto s = prepare(
        "SELECT type, coalesce(sql, ''), "
        "(SELECT count(*) FROM pragma_table_xinfo(?1) WHERE hidden != 0) "
        "FROM sqlite_schema WHERE name = ?1",
        "cannot read the schema");
    if (!s) return s.error();
    sqlite3_stmt* raw = s->get();
    sqlite3_bind_text(raw, 1, table, -1, SQLITE_STATIC);
    const int rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) continue;  // an older or empty database: the queries say so
    if (rc != SQLITE_ROW) return make_error(Errc::io, error_text("cannot read the schema"));
    const std::string type = reinterpret_cast<const char*>(sqlite3_column_text(raw, 0));
    const std::string text = reinterpret_cast<const char*>(sqlite3_column_text(raw, 1));
    const bool is_virtual =
        text.size() >= 14 && sqlite3_strnicmp(text.c_str(), "CREATE VIRTUAL", 14) == 0;
    if (type != "table" || is_virtual || sqlite3_column_int64(raw, 2) != 0)
      return make_error(
          Errc::config,
          fmt::format("{}: `{}` is {}, not sonde's table; sonde does not read a database whose "
                      "reading would run SQL written into the file",
                      path_, table,
                      type != "table" ? "a " + type
                      : is_virtual    ? std::string("a virtual table")
                                      : std::string("a table with generated columns")));
  }
  return {};
}

std::string SqliteDb::error_text(const std::string& what) const {
  const int code = sqlite3_extended_errcode(db_);
  std::string msg = sqlite3_errmsg(db_);
  if ((code & 0xff) == SQLITE_BUSY)
    msg = fmt::format("the database is locked by another process (waited {:g} s)",
                      sqlite_busy_timeout_s());
  if (timed_out_)
    msg = fmt::format(
        "reading took longer than {:g} s (another user's database is read under a "
        "deadline: $SONDE_SQLITE_READ_TIMEOUT)",
        sqlite_read_timeout_s());
  const int primary = code & 0xff;
  if ((primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN ||
       primary == SQLITE_READONLY) &&
      sqlite3_system_errno(db_) != 0)
    msg += fmt::format(" ({})", std::strerror(sqlite3_system_errno(db_)));
  return fmt::format("{}: {}: {}", path_, what, msg);
}

Result<void> SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    sqlite3_free(err);
    return make_error(Errc::io, error_text("cannot run '" + sql.substr(0, 40) + "'"));
  }
  return {};
}

Result<SqliteStmt> SqliteDb::prepare(const char* sql, const std::string& what,
                                     unsigned flags) const {
  sqlite3_stmt* raw = nullptr;
  // With no flags, sqlite3_prepare_v3 is sqlite3_prepare_v2.
  if (sqlite3_prepare_v3(db_, sql, -1, flags, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return make_error(Errc::io, error_text(what));
  }
  return SqliteStmt(raw);
}

Result<std::unique_ptr<SqliteDb>> SqliteDb::open(const std::string& path, Mode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (mode == Mode::read && !fs::exists(path, ec))
    return make_error(Errc::io, fmt::format("{}: no such database file", path));
  if (fs::is_directory(path, ec))
    return make_error(Errc::config, fmt::format("{} is a directory, not a SQLite database", path));
  // SQLite opens the database and its -wal, -shm and -journal files with O_CREAT and follows
  // links: a link another user planted there would make sonde (root) create or truncate the
  // file it points to. So: the directory must be sonde's to write in (owned by the user or
  // root), and none of the four names may be a link or another non-regular entry.
  const fs::path parent = fs::path(path).parent_path();
  const std::string parent_dir = parent.empty() ? std::string(".") : parent.string();
  bool foreign = false;  // a database in another user's directory is only read, never written
  if (mode == Mode::write) {
    auto dir_fd = open_output_dir(parent_dir, true);
    if (!dir_fd) return dir_fd.error();
  } else {
    struct stat dst {};
    const uid_t me = ::geteuid();
    if (::stat(parent_dir.c_str(), &dst) == 0 && dst.st_uid != me && dst.st_uid != 0)
      foreign = true;
  }
  bool live = false;  // a -wal or -shm file: a writer may be at work
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
    const std::string f = path + suffix;
    struct stat st {};
    if (::lstat(f.c_str(), &st) != 0) continue;
    if (S_ISLNK(st.st_mode))
      return make_error(Errc::config,
                        fmt::format("{} is a symbolic link; sonde does not open a database (or "
                                    "its -wal, -shm, -journal files) through links",
                                    f));
    if (!S_ISREG(st.st_mode))
      return make_error(Errc::config, fmt::format("{} is not a regular file", f));
    if (mode == Mode::read && st.st_uid != ::geteuid() && st.st_uid != 0) foreign = true;
    if (*suffix == '-' && suffix[1] != 'j') live = true;
  }
  std::unique_ptr<SqliteDb> d(new SqliteDb());
  d->path_ = path;
  int flags = SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW;
  flags |= foreign ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (mode == Mode::write) flags |= SQLITE_OPEN_CREATE;
  std::string name = path;
  if (foreign) {
    // Even a read-only connection creates -wal and -shm (read-write) next to the database.
    // Another user's database is read without touching their directory: as immutable when no
    // writer is at work (everything is in the file), else through their -shm, read-only.
    flags |= SQLITE_OPEN_URI;
    name = "file:";
    for (const char c : path) {
      if (c == '%' || c == '?' || c == '#' || static_cast<unsigned char>(c) < 0x21 ||
          static_cast<unsigned char>(c) >= 0x7f)
        name += fmt::format("%{:02X}", static_cast<unsigned char>(c));
      else
        name += c;
    }
    name += live ? "?mode=ro&readonly_shm=1" : "?mode=ro&immutable=1";
  }
  int rc = sqlite3_open_v2(name.c_str(), &d->db_, flags, nullptr);
  if (rc != SQLITE_OK && mode == Mode::read && !foreign) {
    // A file we may only read (another user's database, a read-only mount).
    sqlite3_close_v2(d->db_);
    d->db_ = nullptr;
    rc =
        sqlite3_open_v2(path.c_str(), &d->db_,
                        SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW, nullptr);
  }
  if (rc != SQLITE_OK)
    return make_error(Errc::io, d->db_ ? d->error_text("cannot open")
                                       : fmt::format("{}: cannot open: out of memory", path));
  sqlite3_extended_result_codes(d->db_, 1);
  sqlite3_busy_timeout(d->db_, busy_ms(sqlite_busy_timeout_s()));
  if (mode == Mode::read) {
    // What a file may make sonde hold or compute is bounded: no value over 64 MiB, and another
    // user's file (root running `runs list` on it) is read under a deadline, so that SQL its
    // owner wrote cannot hang or bloat the reader.
    sqlite3_limit(d->db_, SQLITE_LIMIT_LENGTH, kMaxReadValueBytes);
    if (foreign) {
      d->read_deadline_ = monotonic_now() + sqlite_read_timeout_s();
      sqlite3_progress_handler(
          d->db_, 1000,
          [](void* p) -> int {
            auto* db = static_cast<SqliteDb*>(p);
            if (monotonic_now() < db->read_deadline_) return 0;
            db->timed_out_ = true;
            return 1;  // SQLITE_INTERRUPT for the statement
          },
          d.get());
    }
  }

  // What is in the file: another program's database, or a newer sonde's, is left untouched.
  auto probe = [&](std::int64_t& app_id, std::int64_t& version,
                   std::int64_t& tables) -> Result<void> {
    // Another file than a database fails the prepare or the step (SQLITE_NOTADB).
    auto fail = [&](int code) -> Error {
      if ((code & 0xff) == SQLITE_NOTADB)
        return make_error(Errc::config,
                          fmt::format("{} is not a SQLite database (give a .sqlite file written "
                                      "by sonde, or a new file name)",
                                      path));
      return make_error(Errc::io, d->error_text("cannot read"));
    };
    auto s = d->prepare(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_schema)",
        "cannot read");
    if (!s) return fail(sqlite3_extended_errcode(d->db_));
    sqlite3_stmt* raw = s->get();
    const int step = sqlite3_step(raw);
    if (step != SQLITE_ROW) return fail(step);
    app_id = sqlite3_column_int64(raw, 0);
    version = sqlite3_column_int64(raw, 1);
    tables = sqlite3_column_int64(raw, 2);
    return {};
  };
  auto check = [&](std::int64_t app_id, std::int64_t version, std::int64_t tables,
                   bool allow_empty) -> Result<void> {
    if (app_id != kSqliteApplicationId && (app_id != 0 || tables != 0 || version != 0))
      return make_error(Errc::config,
                        fmt::format("{} is a SQLite database, but not one written by sonde "
                                    "(application_id {}, {} schema objects); sonde leaves it "
                                    "alone: give another file",
                                    path, app_id, tables));
    if (version > kSqliteSchemaVersion)
      return make_error(Errc::config,
                        fmt::format("{} has sonde schema version {}, newer than the version {} "
                                    "this sonde {} understands; use a newer sonde",
                                    path, version, kSqliteSchemaVersion, SONDE_VERSION));
    if (app_id == kSqliteApplicationId && version < 1)
      return make_error(Errc::config,
                        fmt::format("{}: unknown sonde schema version {}", path, version));
    if (!allow_empty && tables == 0)
      return make_error(Errc::config,
                        fmt::format("{} holds no sonde runs (an empty database)", path));
    return {};
  };

  std::int64_t app_id = 0, version = 0, tables = 0;
  if (auto ok = probe(app_id, version, tables); !ok) return ok.error();
  if (auto ok = check(app_id, version, tables, mode == Mode::write); !ok) return ok.error();
  d->version_ = static_cast<int>(version);
  if (mode == Mode::read) {
    if (auto ok = d->check_read_schema(); !ok) return ok.error();
    return d;
  }

  // WAL: readers and several writers share the file; a commit is one append to the WAL, which
  // survives a crash of the process (synchronous=NORMAL syncs at checkpoints).
  if (version == 0) {
    auto s = d->prepare("PRAGMA journal_mode=WAL", "cannot switch to WAL mode");
    if (!s) return s.error();
    if (sqlite3_step(s->get()) != SQLITE_ROW)
      return make_error(Errc::io, d->error_text("cannot switch to WAL mode"));
  }
  if (auto ok = d->exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON"); !ok)
    return ok.error();
  if (version == 0) {
    // Another sonde may create the schema at the same moment: check again under the write lock.
    if (auto ok = d->exec("BEGIN IMMEDIATE"); !ok) return ok.error();
    auto created = [&]() -> Result<void> {
      if (auto ok = probe(app_id, version, tables); !ok) return ok.error();
      if (auto ok = check(app_id, version, tables, true); !ok) return ok.error();
      if (version != 0) return {};
      if (auto ok = d->exec(kSchema); !ok) return ok.error();
      return d->exec(fmt::format("PRAGMA application_id={}; PRAGMA user_version={}",
                                 kSqliteApplicationId, kSqliteSchemaVersion));
    }();
    if (!created) {
      (void)d->exec("ROLLBACK");
      return created.error();
    }
    if (auto ok = d->exec("COMMIT"); !ok) return ok.error();
  }
  if (version > 0 && version < kSqliteSchemaVersion) {
    // An older sonde's database: migrated under the write lock (another sonde may be doing the
    // same: the version is checked again inside). Its runs stay as they were, node ''.
    if (auto ok = d->exec("BEGIN IMMEDIATE"); !ok) return ok.error();
    auto migrated = [&]() -> Result<void> {
      if (auto ok = probe(app_id, version, tables); !ok) return ok.error();
      if (auto ok = check(app_id, version, tables, true); !ok) return ok.error();
      if (version == 1)
        if (auto ok = d->exec(kMigrate1To2); !ok) return ok.error();
      return d->exec(fmt::format("PRAGMA user_version={}", kSqliteSchemaVersion));
    }();
    if (!migrated) {
      (void)d->exec("ROLLBACK");
      return make_error(migrated.error().code,
                        fmt::format("{}: cannot update the database from sonde schema version {} "
                                    "to {}: {}",
                                    path, version, kSqliteSchemaVersion, migrated.error().message));
    }
    if (auto ok = d->exec("COMMIT"); !ok) return ok.error();
  }
  d->version_ = kSqliteSchemaVersion;
  return d;
}

}  // namespace sonde
