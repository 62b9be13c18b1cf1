#pragma once
// SqliteSink: writes one run into a shared SQLite database, one short transaction per tick.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/result.hpp"
#include "core/summary.hpp"
#include "sinks/sqlite_db.hpp"

namespace sonde {

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

}  // namespace sonde
