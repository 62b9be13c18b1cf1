#include "sinks/sqlite_writer.hpp"

#include <algorithm>
#include <iostream>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/sqlite_values.hpp"

namespace sonde {
using sqlite_detail::append_values;
using sqlite_detail::bind_text;
using sqlite_detail::busy_ms;

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
    auto stmt = s->db_->prepare(sql, "cannot prepare a statement", SQLITE_PREPARE_PERSISTENT);
    if (!stmt) return stmt.error();
    out = std::move(*stmt);
    return {};
  };
  SqliteStmt insert_run, insert_column;
  for (auto [sql, stmt] : {std::pair{"BEGIN IMMEDIATE", &s->begin_},
                           std::pair{"COMMIT", &s->commit_}, std::pair{"ROLLBACK", &s->rollback_},
                           std::pair{"INSERT INTO samples (run_id, level, tick, time, wallclock, "
                                     "vals, node) VALUES (?, ?, ?, ?, ?, ?, ?)",
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
  bind_text(r, 2, json_text(m.value("command", nlohmann::json::array())));
  bind_text(r, 3, m.value("mode", std::string()));
  sqlite3_bind_double(r, 4, m.value("start_wallclock", wallclock_now()));
  sqlite3_bind_double(r, 5, m.value("interval", 0.0));
  bind_text(r, 6, json_text(m));
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
    bind_text(upd.get(), 1, json_text(s->manifest_));
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
    Pending p{{}, l, tick_, time_s, wallclock_s, {}};
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
    sqlite3_bind_text(ins, 7, p.node.data(), static_cast<int>(p.node.size()), SQLITE_STATIC);
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

Result<void> SqliteSink::add_node(const std::string& node,
                                  const std::array<std::vector<std::string>, kNumLevels>& columns) {
  // A node's levels may come in several calls (each level once); node '' (the aggregate) may
  // add levels that create() did not have (a multi-node head learns their columns late).
  for (Level l : kAllLevels) {
    if (columns[level_index(l)].empty()) continue;
    if (node.empty() && std::find(levels_.begin(), levels_.end(), l) != levels_.end())
      return make_error(Errc::config, fmt::format("{}: level {} of run {} already has its columns",
                                                  db_->path(), level_name(l), run_id_));
    if (node_ticks_.contains({node, l}))
      return make_error(Errc::config, fmt::format("{}: node {} added twice to run {} (level {})",
                                                  db_->path(), node, run_id_, level_name(l)));
  }
  if (failed_) return make_error(Errc::io, fmt::format("{}: the run's writes failed", db_->path()));
  // Rows queued before (other nodes' first rows) go first: one transaction at a time.
  (void)flush();
  auto ins = db_->prepare(
      "INSERT INTO columns (run_id, node, level, position, name) VALUES (?, ?, ?, ?, ?)",
      "cannot add a node");
  if (!ins) return ins.error();
  sqlite3_stmt* raw = ins->get();
  if (sqlite3_step(begin_.get()) != SQLITE_DONE) {
    sqlite3_reset(begin_.get());
    return make_error(Errc::io, db_->error_text("cannot add a node"));
  }
  sqlite3_reset(begin_.get());
  for (Level l : kAllLevels) {
    const auto& cols = columns[level_index(l)];
    if (cols.empty()) continue;
    for (std::size_t i = 0; i < cols.size(); ++i) {
      sqlite3_reset(raw);
      sqlite3_bind_int64(raw, 1, run_id_);
      bind_text(raw, 2, node);
      sqlite3_bind_text(raw, 3, level_name(l).data(), static_cast<int>(level_name(l).size()),
                        SQLITE_STATIC);
      sqlite3_bind_int64(raw, 4, static_cast<sqlite3_int64>(i));
      bind_text(raw, 5, cols[i]);
      if (sqlite3_step(raw) != SQLITE_DONE) {
        const Error e = make_error(Errc::io, db_->error_text("cannot add node " + node));
        sqlite3_step(rollback_.get());
        sqlite3_reset(rollback_.get());
        return e;
      }
    }
    node_ticks_[{node, l}] = 0;
  }
  if (sqlite3_step(commit_.get()) != SQLITE_DONE) {
    const Error e = make_error(Errc::io, db_->error_text("cannot add node " + node));
    sqlite3_reset(commit_.get());
    sqlite3_step(rollback_.get());
    sqlite3_reset(rollback_.get());
    return e;
  }
  sqlite3_reset(commit_.get());
  return {};
}

void SqliteSink::write_node_row(const std::string& node, Level level, double time_s,
                                double wallclock_s, const std::vector<double>& values) {
  if (failed_) return;
  std::uint64_t tick = 0;
  if (node.empty()) {
    // The aggregate: the run's own levels, numbered apart from write()'s ticks.
    tick = node_ticks_[{node, level}]++;
  } else {
    const auto it = node_ticks_.find({node, level});
    if (it == node_ticks_.end()) {
      std::cerr << fmt::format(
          "sonde: warning: {}: a row of node {} at level {} before add_node; dropped\n",
          db_->path(), node, level_name(level));
      return;
    }
    tick = it->second++;
  }
  Pending p{node, level, tick, time_s, wallclock_s, {}};
  append_values(p.values, values);
  pending_.push_back(std::move(p));
  if (pending_.size() > 1000000) {
    std::cerr << fmt::format(
        "sonde: error: {}: {} rows could not be written (the file is locked by another "
        "process); no more rows are written, the program keeps running\n",
        db_->path(), pending_.size());
    failed_ = true;
    pending_.clear();
  }
}

void SqliteSink::end_tick() {
  flush();
}

void SqliteSink::store_manifest() {
  auto upd = db_->prepare("UPDATE runs SET manifest = ? WHERE id = ?", "cannot update the run");
  if (!upd) {
    std::cerr << "sonde: error: " << upd.error().message << "\n";
    return;
  }
  sqlite3_stmt* raw = upd->get();
  bind_text(raw, 1, json_text(manifest_));
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
  auto upd = db_->prepare(
      "UPDATE runs SET end_wallclock = ?, exit_status = ?, complete = ?, ticks = ?, manifest = ?, "
      "summary = ? WHERE id = ?",
      "cannot finish the run");
  if (!upd) {
    std::cerr << "sonde: error: " << upd.error().message << "\n";
    return;
  }
  sqlite3_stmt* raw = upd->get();
  sqlite3_bind_double(raw, 1, end);
  if (outcome.exit_status)
    sqlite3_bind_int(raw, 2, *outcome.exit_status);
  else
    sqlite3_bind_null(raw, 2);
  sqlite3_bind_int(raw, 3, failed_ ? 0 : 1);
  sqlite3_bind_int64(raw, 4, static_cast<sqlite3_int64>(ticks));
  bind_text(raw, 5, json_text(manifest_));
  bind_text(raw, 6, json_text(summary));
  sqlite3_bind_int64(raw, 7, run_id_);
  // After a reported write error this is a last try (the run's row keeps complete = 0 anyway);
  // its failure is not reported a second time.
  if (sqlite3_step(raw) != SQLITE_DONE && !failed_)
    std::cerr << "sonde: error: " << db_->error_text("cannot finish the run") << "\n";
}

}  // namespace sonde
