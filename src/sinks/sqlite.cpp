#include "sinks/sqlite.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "sinks/format.hpp"

namespace sonde {
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
  level TEXT NOT NULL,
  position INTEGER NOT NULL,
  name TEXT NOT NULL,
  PRIMARY KEY (run_id, level, position)
) WITHOUT ROWID;
CREATE TABLE samples (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  level TEXT NOT NULL,
  tick INTEGER NOT NULL,
  time REAL NOT NULL,
  wallclock REAL NOT NULL,
  vals TEXT NOT NULL,
  PRIMARY KEY (run_id, level, tick)
);
CREATE VIEW sample_values AS
  SELECT s.run_id AS run_id, s.level AS level, s.tick AS tick, s.time AS time,
         s.wallclock AS wallclock, c.name AS name,
         json_extract(s.vals, '$[' || c.position || ']') AS value
  FROM samples AS s JOIN columns AS c ON c.run_id = s.run_id AND c.level = s.level;
)sql";

int busy_ms(double seconds) {
  return static_cast<int>(std::lround(std::clamp(seconds, 0.0, 3600.0) * 1000.0));
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
}

std::optional<double> column_opt_double(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}

void bind_text(sqlite3_stmt* s, int i, const std::string& text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

// The JSON array of a row's values: numbers as in the CSV files, NaN as null.
void append_values(std::string& out, const std::vector<double>& row) {
  out += '[';
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (i) out += ',';
    append_number(out, row[i], "null");
  }
  out += ']';
}

// Parses what append_values wrote (a flat array of numbers and nulls).
bool parse_values(std::string_view text, std::vector<double>& out) {
  out.clear();
  auto skip_ws = [&](std::size_t& i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
  };
  std::size_t i = 0;
  skip_ws(i);
  if (i >= text.size() || text[i] != '[') return false;
  ++i;
  skip_ws(i);
  if (i < text.size() && text[i] == ']') return true;
  while (i < text.size()) {
    skip_ws(i);
    if (text.compare(i, 4, "null") == 0) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      i += 4;
    } else {
      double v = 0;
      const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
      if (ec != std::errc()) return false;
      out.push_back(v);
      i = static_cast<std::size_t>(p - text.data());
    }
    skip_ws(i);
    if (i >= text.size()) return false;
    if (text[i] == ']') return true;
    if (text[i] != ',') return false;
    ++i;
  }
  return false;
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
  if (const char* t = std::getenv("SONDE_SQLITE_BUSY_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end && *end == '\0' && v >= 0) return v;
  }
  return 5.0;
}

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

std::string SqliteDb::error_text(const std::string& what) const {
  const int code = sqlite3_extended_errcode(db_);
  std::string msg = sqlite3_errmsg(db_);
  if ((code & 0xff) == SQLITE_BUSY)
    msg = fmt::format("the database is locked by another process (waited {:g} s)",
                      sqlite_busy_timeout_s());
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

  // What is in the file: another program's database, or a newer sonde's, is left untouched.
  auto probe = [&](std::int64_t& app_id, std::int64_t& version,
                   std::int64_t& tables) -> Result<void> {
    sqlite3_stmt* raw = nullptr;
    const char* sql =
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), "
        "(SELECT count(*) FROM sqlite_schema)";
    if (sqlite3_prepare_v2(d->db_, sql, -1, &raw, nullptr) != SQLITE_OK) {
      sqlite3_finalize(raw);
      const int code = sqlite3_extended_errcode(d->db_) & 0xff;
      if (code == SQLITE_NOTADB)
        return make_error(Errc::config,
                          fmt::format("{} is not a SQLite database (give a .sqlite file written "
                                      "by sonde, or a new file name)",
                                      path));
      return make_error(Errc::io, d->error_text("cannot read"));
    }
    SqliteStmt s(raw);
    const int step = sqlite3_step(raw);
    if (step != SQLITE_ROW) {
      if ((step & 0xff) == SQLITE_NOTADB)
        return make_error(Errc::config,
                          fmt::format("{} is not a SQLite database (give a .sqlite file written "
                                      "by sonde, or a new file name)",
                                      path));
      return make_error(Errc::io, d->error_text("cannot read"));
    }
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
  if (mode == Mode::read) return d;

  // WAL: readers and several writers share the file; a commit is one append to the WAL, which
  // survives a crash of the process (synchronous=NORMAL syncs at checkpoints).
  if (version == 0) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(d->db_, "PRAGMA journal_mode=WAL", -1, &raw, nullptr) != SQLITE_OK) {
      sqlite3_finalize(raw);
      return make_error(Errc::io, d->error_text("cannot switch to WAL mode"));
    }
    SqliteStmt s(raw);
    if (sqlite3_step(raw) != SQLITE_ROW)
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
  return d;
}

// ---- writer ----------------------------------------------------------------------------------

Result<std::unique_ptr<SqliteSink>> SqliteSink::create(const std::string& path,
                                                       const Engine& engine, nlohmann::json meta) {
  nlohmann::json& m = meta;
  m["sonde_version"] = SONDE_VERSION;
  m["host"] = engine.node_info().hostname;
  m["kernel"] = engine.node_info().kernel;
  m["interval"] = engine.interval_s();
  m["levels"] = levels_json(engine);
  m["columns_by_level"] = columns_by_level_json(engine);
  m["node_info"] = node_info_json(engine);
  m["end_wallclock"] = nullptr;
  m["exit_status"] = nullptr;
  m["complete"] = false;
  m["ticks"] = 0;
  std::array<std::vector<std::string>, kNumLevels> columns;
  for (Level l : engine.levels()) columns[level_index(l)] = engine.columns(l);
  return create(path, std::move(meta), engine.levels(), columns);
}

Result<std::unique_ptr<SqliteSink>> SqliteSink::create(
    const std::string& path, nlohmann::json manifest, const std::vector<Level>& levels,
    const std::array<std::vector<std::string>, kNumLevels>& columns) {
  auto db = SqliteDb::open(path, SqliteDb::Mode::write);
  if (!db) return db.error();
  std::unique_ptr<SqliteSink> s(new SqliteSink());
  s->db_ = std::move(*db);
  s->levels_ = levels;
  s->manifest_ = std::move(manifest);
  sqlite3* h = s->db_->handle();
  auto prepare = [&](const char* sql, SqliteStmt& out) -> Result<void> {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v3(h, sql, -1, SQLITE_PREPARE_PERSISTENT, &raw, nullptr) != SQLITE_OK) {
      sqlite3_finalize(raw);
      return make_error(Errc::io, s->db_->error_text("cannot prepare a statement"));
    }
    out = SqliteStmt(raw);
    return {};
  };
  SqliteStmt insert_run, insert_column;
  for (auto [sql, stmt] : {std::pair{"BEGIN IMMEDIATE", &s->begin_},
                           std::pair{"COMMIT", &s->commit_}, std::pair{"ROLLBACK", &s->rollback_},
                           std::pair{"INSERT INTO samples (run_id, level, tick, time, wallclock, "
                                     "vals) VALUES (?, ?, ?, ?, ?, ?)",
                                     &s->insert_},
                           std::pair{"INSERT INTO runs (host, command, mode, start_wallclock, "
                                     "interval_s, manifest) VALUES (?, ?, ?, ?, ?, ?)",
                                     &insert_run},
                           std::pair{"INSERT INTO columns (run_id, level, position, name) VALUES "
                                     "(?, ?, ?, ?)",
                                     &insert_column}})
    if (auto ok = prepare(sql, *stmt); !ok) return ok.error();

  auto fail = [&](const std::string& what) -> Error {
    const Error e = make_error(Errc::io, s->db_->error_text(what));
    sqlite3_step(s->rollback_.get());
    sqlite3_reset(s->rollback_.get());
    return e;
  };
  if (sqlite3_step(s->begin_.get()) != SQLITE_DONE) {
    sqlite3_reset(s->begin_.get());
    return make_error(Errc::io, s->db_->error_text("cannot start the run"));
  }
  sqlite3_reset(s->begin_.get());
  const nlohmann::json& m = s->manifest_;
  sqlite3_stmt* r = insert_run.get();
  bind_text(r, 1, m.value("host", std::string()));
  bind_text(r, 2, m.value("command", nlohmann::json::array()).dump());
  bind_text(r, 3, m.value("mode", std::string()));
  sqlite3_bind_double(r, 4, m.value("start_wallclock", wallclock_now()));
  sqlite3_bind_double(r, 5, m.value("interval", 0.0));
  bind_text(r, 6, m.dump());
  if (sqlite3_step(r) != SQLITE_DONE) return fail("cannot add the run");
  s->run_id_ = sqlite3_last_insert_rowid(h);
  sqlite3_stmt* c = insert_column.get();
  for (Level l : levels) {
    const auto& cols = columns[level_index(l)];
    for (std::size_t i = 0; i < cols.size(); ++i) {
      sqlite3_reset(c);
      sqlite3_bind_int64(c, 1, s->run_id_);
      sqlite3_bind_text(c, 2, level_name(l).data(), static_cast<int>(level_name(l).size()),
                        SQLITE_STATIC);
      sqlite3_bind_int64(c, 3, static_cast<sqlite3_int64>(i));
      bind_text(c, 4, cols[i]);
      if (sqlite3_step(c) != SQLITE_DONE) return fail("cannot add the run's columns");
    }
  }
  s->manifest_["sqlite"] = {{"database", path}, {"run_id", s->run_id_}};
  {
    SqliteStmt upd;
    if (auto ok = prepare("UPDATE runs SET manifest = ? WHERE id = ?", upd); !ok) {
      (void)fail("");
      return ok.error();
    }
    bind_text(upd.get(), 1, s->manifest_.dump());
    sqlite3_bind_int64(upd.get(), 2, s->run_id_);
    if (sqlite3_step(upd.get()) != SQLITE_DONE) return fail("cannot add the run");
  }
  if (sqlite3_step(s->commit_.get()) != SQLITE_DONE) return fail("cannot add the run");
  sqlite3_reset(s->commit_.get());
  // A tick waits for another writer at most half the interval, then keeps its rows for the next.
  s->tick_timeout_ms_ = std::max(10, busy_ms(s->manifest_.value("interval", 1.0) * 0.5));
  return s;
}

SqliteSink::~SqliteSink() = default;

std::string SqliteSink::location() const {
  return fmt::format("{}#{}", db_->path(), run_id_);
}

void SqliteSink::report_failure(const std::string& what) {
  if (failed_) return;
  failed_ = true;
  std::cerr << fmt::format(
      "sonde: error: {}; no more rows are written to it, the program keeps running and the ticks "
      "already committed stay valid\n",
      db_->error_text(what));
}

void SqliteSink::write(const Engine::Tick& tick) {
  write(tick.ctx.time_s, tick.ctx.wallclock_s, tick.rows);
}

void SqliteSink::write(double time_s, double wallclock_s,
                       const std::array<std::vector<double>, kNumLevels>& rows) {
  if (failed_) return;
  for (Level l : levels_) {
    Pending p{l, tick_, time_s, wallclock_s, {}};
    append_values(p.values, rows[level_index(l)]);
    pending_.push_back(std::move(p));
  }
  ++tick_;
  // Bounded: a lock held for hours must not eat the node's memory.
  if (pending_.size() > 100000) {
    std::cerr << fmt::format(
        "sonde: error: {}: locked by another process for {} ticks; no more rows are written, the "
        "program keeps running\n",
        db_->path(), pending_.size() / std::max<std::size_t>(1, levels_.size()));
    failed_ = true;
    pending_.clear();
    return;
  }
  flush();
}

bool SqliteSink::flush() {
  if (failed_ || pending_.empty()) return !failed_;
  sqlite3* h = db_->handle();
  sqlite3_busy_timeout(h, tick_timeout_ms_);
  const int rc = sqlite3_step(begin_.get());
  sqlite3_reset(begin_.get());
  sqlite3_busy_timeout(h, busy_ms(sqlite_busy_timeout_s()));
  if ((rc & 0xff) == SQLITE_BUSY) {
    if (!warned_busy_) {
      warned_busy_ = true;
      std::cerr << fmt::format(
          "sonde: warning: {}: locked by another process for more than {} ms; this tick's rows "
          "are kept and written with a later tick\n",
          db_->path(), tick_timeout_ms_);
    }
    return false;
  }
  if (rc != SQLITE_DONE) {
    report_failure("cannot write a tick");
    pending_.clear();
    return false;
  }
  sqlite3_stmt* ins = insert_.get();
  for (const Pending& p : pending_) {
    sqlite3_reset(ins);
    sqlite3_bind_int64(ins, 1, run_id_);
    const std::string_view level = level_name(p.level);
    sqlite3_bind_text(ins, 2, level.data(), static_cast<int>(level.size()), SQLITE_STATIC);
    sqlite3_bind_int64(ins, 3, static_cast<sqlite3_int64>(p.tick));
    sqlite3_bind_double(ins, 4, p.time_s);
    sqlite3_bind_double(ins, 5, p.wallclock_s);
    sqlite3_bind_text(ins, 6, p.values.data(), static_cast<int>(p.values.size()), SQLITE_STATIC);
    if (sqlite3_step(ins) != SQLITE_DONE) {
      report_failure("cannot write a tick");
      sqlite3_reset(ins);
      sqlite3_step(rollback_.get());
      sqlite3_reset(rollback_.get());
      pending_.clear();
      return false;
    }
  }
  sqlite3_reset(ins);
  sqlite3_clear_bindings(ins);
  if (sqlite3_step(commit_.get()) != SQLITE_DONE) {
    report_failure("cannot commit a tick");
    sqlite3_reset(commit_.get());
    sqlite3_step(rollback_.get());
    sqlite3_reset(rollback_.get());
    pending_.clear();
    return false;
  }
  sqlite3_reset(commit_.get());
  pending_.clear();
  return true;
}

void SqliteSink::store_manifest() {
  SqliteStmt upd;
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_->handle(), "UPDATE runs SET manifest = ? WHERE id = ?", -1, &raw,
                         nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    std::cerr << "sonde: error: " << db_->error_text("cannot update the run") << "\n";
    return;
  }
  upd = SqliteStmt(raw);
  bind_text(raw, 1, manifest_.dump());
  sqlite3_bind_int64(raw, 2, run_id_);
  if (sqlite3_step(raw) != SQLITE_DONE)
    std::cerr << "sonde: error: " << db_->error_text("cannot update the run") << "\n";
}

void SqliteSink::update(const std::string& key, nlohmann::json value) {
  manifest_[key] = std::move(value);
  if (!failed_) store_manifest();
}

void SqliteSink::finish(const RunOutcome& outcome, const nlohmann::json& summary,
                        std::uint64_t ticks, std::uint64_t ticks_missed) {
  // Rows kept while the file was locked get the full lock timeout now.
  tick_timeout_ms_ = busy_ms(sqlite_busy_timeout_s());
  if (!flush() && !failed_) report_failure("cannot write the last ticks");
  const double end = wallclock_now();
  set_manifest_end(manifest_, end, outcome, !failed_, summary, ticks, ticks_missed);
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_->handle(),
                         "UPDATE runs SET end_wallclock = ?, exit_status = ?, complete = ?, "
                         "ticks = ?, manifest = ?, summary = ? WHERE id = ?",
                         -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    std::cerr << "sonde: error: " << db_->error_text("cannot finish the run") << "\n";
    return;
  }
  SqliteStmt upd(raw);
  sqlite3_bind_double(raw, 1, end);
  if (outcome.exit_status)
    sqlite3_bind_int(raw, 2, *outcome.exit_status);
  else
    sqlite3_bind_null(raw, 2);
  sqlite3_bind_int(raw, 3, failed_ ? 0 : 1);
  sqlite3_bind_int64(raw, 4, static_cast<sqlite3_int64>(ticks));
  bind_text(raw, 5, manifest_.dump());
  bind_text(raw, 6, summary.dump());
  sqlite3_bind_int64(raw, 7, run_id_);
  // After a reported write error this is a last try (the run's row keeps complete = 0 anyway);
  // its failure is not reported a second time.
  if (sqlite3_step(raw) != SQLITE_DONE && !failed_)
    std::cerr << "sonde: error: " << db_->error_text("cannot finish the run") << "\n";
}

// ---- reader ----------------------------------------------------------------------------------

Result<std::pair<std::string, std::optional<std::int64_t>>> parse_sqlite_location(
    const std::string& text) {
  const std::size_t hash = text.rfind('#');
  if (hash == std::string::npos) return std::pair{text, std::optional<std::int64_t>()};
  const std::string file = text.substr(0, hash), id = text.substr(hash + 1);
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(id.data(), id.data() + id.size(), v);
  if (ec != std::errc() || p != id.data() + id.size() || v <= 0)
    return make_error(Errc::config, fmt::format("{}: expected FILE#ID with a run id (a positive "
                                                "integer) after '#', got '{}'",
                                                text, id));
  return std::pair{file, std::optional<std::int64_t>(v)};
}

namespace {
Result<SqliteStmt> prepare_read(const SqliteDb& db, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db.handle(), sql, -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return make_error(Errc::io, db.error_text("cannot read"));
  }
  return SqliteStmt(raw);
}
}  // namespace

Result<void> check_sqlite_integrity(const SqliteDb& db) {
  // quick_check reads every page once (no index cross-check): a damaged file is an error rather
  // than a listing with wrong counts.
  auto q = prepare_read(db, "PRAGMA quick_check(1)");
  if (!q) return make_error(Errc::io, q.error().message + " (the database may be corrupt)");
  const int rc = sqlite3_step(q->get());
  if (rc != SQLITE_ROW)
    return make_error(Errc::io, db.error_text("the database is corrupt (quick_check failed)"));
  std::string verdict = column_text(q->get(), 0);
  for (char& c : verdict)
    if (c == '\n') c = ' ';
  if (verdict != "ok")
    return make_error(Errc::io,
                      fmt::format("{}: the database is corrupt (SQLite quick_check: {}); restore "
                                  "it from a backup",
                                  db.path(), verdict.substr(0, 200)));
  return {};
}

Result<std::vector<StoredRun>> list_runs_sqlite(const std::string& path) {
  auto db = SqliteDb::open(path, SqliteDb::Mode::read);
  if (!db) return db.error();
  if (auto ok = check_sqlite_integrity(**db); !ok) return ok.error();
  auto q = prepare_read(**db,
                        "SELECT id, host, command, start_wallclock, end_wallclock, exit_status, "
                        "interval_s, complete, ticks FROM runs ORDER BY id");
  if (!q) return q.error();
  auto last = prepare_read(**db,
                           "SELECT count(*), max(wallclock) FROM samples WHERE run_id = ?1 AND "
                           "level = (SELECT level FROM columns WHERE run_id = ?1 LIMIT 1)");
  if (!last) return last.error();
  std::vector<StoredRun> out;
  int rc = 0;
  while ((rc = sqlite3_step(q->get())) == SQLITE_ROW) {
    sqlite3_stmt* s = q->get();
    StoredRun r;
    r.id = sqlite3_column_int64(s, 0);
    r.host = column_text(s, 1);
    const auto cmd = nlohmann::json::parse(column_text(s, 2), nullptr, false);
    if (cmd.is_array())
      for (const auto& a : cmd)
        if (a.is_string()) r.command.push_back(a.get<std::string>());
    r.start_wallclock = sqlite3_column_double(s, 3);
    r.end_wallclock = column_opt_double(s, 4);
    if (sqlite3_column_type(s, 5) != SQLITE_NULL) r.exit_status = sqlite3_column_int(s, 5);
    r.interval_s = sqlite3_column_double(s, 6);
    r.complete = sqlite3_column_int(s, 7) != 0;
    sqlite3_stmt* l = last->get();
    sqlite3_reset(l);
    sqlite3_bind_int64(l, 1, r.id);
    if (sqlite3_step(l) != SQLITE_ROW)
      return make_error(Errc::io,
                        (*db)->error_text(fmt::format("cannot count the ticks of run {}", r.id)));
    r.ticks = static_cast<std::uint64_t>(sqlite3_column_int64(l, 0));
    r.last_wallclock = column_opt_double(l, 1);
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return make_error(Errc::io, (*db)->error_text("cannot read the runs"));
  return out;
}

Result<RunData> read_run_sqlite(const std::string& path, std::optional<std::int64_t> id) {
  auto dbr = SqliteDb::open(path, SqliteDb::Mode::read);
  if (!dbr) return dbr.error();
  const SqliteDb& db = **dbr;
  if (!id) {
    auto q = prepare_read(db, "SELECT max(id) FROM runs");
    if (!q) return q.error();
    if (sqlite3_step(q->get()) != SQLITE_ROW)
      return make_error(Errc::io, db.error_text("cannot read the runs"));
    if (sqlite3_column_type(q->get(), 0) == SQLITE_NULL)
      return make_error(Errc::config, fmt::format("{} holds no runs yet", path));
    id = sqlite3_column_int64(q->get(), 0);
  }
  auto q = prepare_read(db, "SELECT manifest, summary FROM runs WHERE id = ?");
  if (!q) return q.error();
  sqlite3_bind_int64(q->get(), 1, *id);
  const int rc = sqlite3_step(q->get());
  if (rc == SQLITE_DONE) {
    std::string ids;
    auto all = prepare_read(db, "SELECT min(id), max(id), count(*) FROM runs");
    if (all && sqlite3_step(all->get()) == SQLITE_ROW) {
      const auto n = sqlite3_column_int64(all->get(), 2);
      ids = n == 0 ? std::string("it holds no runs")
                   : fmt::format("it holds {} run{}, ids {} to {}; see `sonde runs list {}`", n,
                                 n == 1 ? "" : "s", sqlite3_column_int64(all->get(), 0),
                                 sqlite3_column_int64(all->get(), 1), path);
    }
    return make_error(Errc::config, fmt::format("{} has no run with id {} ({})", path, *id, ids));
  }
  if (rc != SQLITE_ROW) return make_error(Errc::io, db.error_text("cannot read the run"));
  RunData run;
  run.source = fmt::format("{}#{}", path, *id);
  run.manifest = nlohmann::json::parse(column_text(q->get(), 0), nullptr, false);
  if (!run.manifest.is_object())
    return make_error(Errc::parse,
                      fmt::format("{}: the manifest of run {} is not a JSON object", path, *id));
  if (sqlite3_column_type(q->get(), 1) != SQLITE_NULL && !run.manifest.contains("summary")) {
    auto summary = nlohmann::json::parse(column_text(q->get(), 1), nullptr, false);
    if (!summary.is_discarded()) run.manifest["summary"] = std::move(summary);
  }

  // Levels in the manifest's order; their columns from `columns`.
  std::vector<Level> levels;
  if (run.manifest.contains("levels") && run.manifest["levels"].is_array())
    for (const auto& n : run.manifest["levels"])
      if (n.is_string())
        if (auto l = parse_level(n.get<std::string>())) levels.push_back(*l);
  auto cols = prepare_read(db,
                           "SELECT level, name FROM columns WHERE run_id = ? ORDER BY level, "
                           "position");
  if (!cols) return cols.error();
  sqlite3_bind_int64(cols->get(), 1, *id);
  std::array<std::vector<std::string>, kNumLevels> names;
  std::size_t column_count = 0;
  int crc = 0;
  while ((crc = sqlite3_step(cols->get())) == SQLITE_ROW) {
    const auto l = parse_level(column_text(cols->get(), 0));
    if (!l)
      return make_error(Errc::parse, fmt::format("{}: run {} has an unknown level '{}'", path, *id,
                                                 column_text(cols->get(), 0)));
    if (++column_count > kMaxRunLineBytes)
      return make_error(Errc::parse, fmt::format("{}: run {} has more than {} columns", path, *id,
                                                 kMaxRunLineBytes));
    names[level_index(*l)].push_back(column_text(cols->get(), 1));
    if (std::find(levels.begin(), levels.end(), *l) == levels.end()) levels.push_back(*l);
  }
  if (crc != SQLITE_DONE) return make_error(Errc::io, db.error_text("cannot read the columns"));

  auto rows = prepare_read(db,
                           "SELECT tick, time, wallclock, vals FROM samples WHERE run_id = ? AND "
                           "level = ? ORDER BY tick");
  if (!rows) return rows.error();
  std::vector<double> values;
  std::uint64_t values_left = kMaxRunValues;  // the bounds of a run directory (run_data.hpp)
  for (Level l : levels) {
    LevelTable t;
    t.level = l;
    t.columns = {"time", "wallclock"};
    for (const auto& n : names[level_index(l)]) t.columns.push_back(n);
    sqlite3_stmt* s = rows->get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, *id);
    const std::string_view ln = level_name(l);
    sqlite3_bind_text(s, 2, ln.data(), static_cast<int>(ln.size()), SQLITE_STATIC);
    int src = 0;
    while ((src = sqlite3_step(s)) == SQLITE_ROW) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
      const std::string_view v(text ? text : "",
                               static_cast<std::size_t>(sqlite3_column_bytes(s, 3)));
      if (v.size() > kMaxRunLineBytes || values_left < t.columns.size())
        return make_error(Errc::parse,
                          fmt::format("{}: run {}, level {}, tick {}: more than sonde reads of "
                                      "one run ({} bytes a row, {} values in all)",
                                      path, *id, ln, sqlite3_column_int64(s, 0), kMaxRunLineBytes,
                                      kMaxRunValues));
      values_left -= t.columns.size();
      if (!parse_values(v, values) || values.size() != names[level_index(l)].size())
        return make_error(
            Errc::parse,
            fmt::format("{}: run {}, level {}, tick {}: expected a JSON array of {} "
                        "numbers or nulls",
                        path, *id, ln, sqlite3_column_int64(s, 0), names[level_index(l)].size()));
      std::vector<double> row;
      row.reserve(values.size() + 2);
      row.push_back(sqlite3_column_double(s, 1));
      row.push_back(sqlite3_column_double(s, 2));
      row.insert(row.end(), values.begin(), values.end());
      t.rows.push_back(std::move(row));
    }
    if (src != SQLITE_DONE) return make_error(Errc::io, db.error_text("cannot read the samples"));
    run.levels.push_back(std::move(t));
  }
  return run;
}

Result<void> write_run_dir(const RunData& run, const std::string& dir) {
  auto dir_fd = open_new_run_dir(dir, "choose another directory");
  if (!dir_fd) return dir_fd.error();
  nlohmann::json manifest = run.manifest;
  nlohmann::json files = nlohmann::json::object();
  // The levels written, whatever the stored manifest says (a damaged one must not make the export
  // unreadable).
  nlohmann::json levels = nlohmann::json::array();
  std::string text;
  for (const LevelTable& t : run.levels) {
    const std::string name = fmt::format("perf_{}.csv", level_name(t.level));
    text.clear();
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (i) text += ',';
      text += t.columns[i];
    }
    text += '\n';
    for (const auto& row : t.rows) {
      // As RunDirSink writes them: time and values with 10 significant digits, wallclock in µs.
      for (std::size_t i = 0; i < row.size(); ++i) {
        if (i) text += ',';
        if (i == 1)
          fmt::format_to(std::back_inserter(text), "{:.6f}", row[i]);
        else
          append_number(text, row[i], "");
      }
      text += '\n';
    }
    if (auto ok = replace_file_in(dir_fd->get(), name, text, dir + "/" + name); !ok)
      return ok.error();
    files[std::string(level_name(t.level))] = name;
    levels.push_back(std::string(level_name(t.level)));
  }
  manifest["levels"] = levels;
  manifest["files"] = files;
  manifest["exported_from"] = run.source;
  return replace_file_in(dir_fd->get(), "manifest.json", manifest.dump(2) + "\n",
                         dir + "/manifest.json");
}

}  // namespace sonde
