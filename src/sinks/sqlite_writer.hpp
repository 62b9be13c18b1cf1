#pragma once
// SqliteSink: writes one run into a shared SQLite database, one short transaction per tick.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/live_summary.hpp"
#include "core/result.hpp"
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
  // ---- multi-node runs (docs/sqlite.md "Multi-node runs") -------------------------------------
  // A multi-node head learns its nodes as their agents report: it creates the run as above (the
  // manifest with `multinode`; `levels`/`columns` its own levels: the head command's process
  // level, and the aggregate levels, node ''), then, per node, add_node once and
  // write_node_row for each of its rows, and end_tick once per tick of the head: every row
  // queued since the last end_tick goes in one transaction, with the same lock handling as
  // write(). Node '' is the aggregate (the run's own rows): add_node("") is not needed for the
  // levels given to create(). Rows of one node and level are numbered (`tick`) in the order
  // written. The manifest's `nodes` is set with update("nodes", ...).

  /// Adds the columns (without time/wallclock) of a node's levels; `columns[level_index(l)]`
  /// empty: the node does not record `l`. A node's levels may be added in several calls; a
  /// level added twice, or a level of node '' that create() had, is an error (Errc::config); a
  /// write failure is Errc::io (and reported like write()'s). Node '' adds aggregate levels whose
  /// columns were not known at create() (rows with write_node_row("", ...)).
  Result<void> add_node(const std::string& node,
                        const std::array<std::vector<std::string>, kNumLevels>& columns);
  /// Queues one row of `node` ("" = the aggregate) at `level`: its time and wallclock (the
  /// node's own clocks) and one value per column given to add_node (NaN = not measured).
  void write_node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                      const std::vector<double>& values);
  /// Writes the rows queued by write_node_row in one transaction (kept for the next tick when
  /// another writer holds the lock).
  void end_tick();

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
    std::string node;
    Level level;
    std::uint64_t tick;
    double time_s, wallclock_s;
    std::string values;
  };
  std::vector<Pending> pending_;
  /// Rows written per node and level (write_node_row), for their `tick`; the columns they have.
  std::map<std::pair<std::string, Level>, std::uint64_t> node_ticks_;
  bool failed_ = false;
  bool warned_busy_ = false;
  int tick_timeout_ms_ = 0;
};

}  // namespace sonde
