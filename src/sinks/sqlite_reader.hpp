#pragma once
// Reading a SQLite database back: the list of its runs, one run as RunData, its integrity.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.hpp"
#include "core/stored_run.hpp"
#include "sinks/sqlite_db.hpp"

namespace sonde {

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
  std::uint64_t ticks = 0;  ///< stored ticks (of the run's own rows: a multi-node run's aggregate)
  std::vector<std::string> nodes;  ///< a multi-node run's nodes (empty for one node), sorted
};

/// SQLite's quick_check of the whole file: an error naming the file when it is damaged.
Result<void> check_sqlite_integrity(const SqliteDb& db);

/// Every run in the database, oldest first. A damaged database (quick_check, or a failing
/// query) is an error, never a partial listing.
Result<std::vector<StoredRun>> list_runs_sqlite(const std::string& db);

/// Reads one run (the latest when `id` is empty): its manifest (summary included once the run
/// has finished) and every stored row. `source` is "DB#ID". A multi-node run (schema 2, rows
/// with a `node`) gets RunData::nodes, in the order of its manifest's `nodes`. A database of
/// schema 1 is read as it is.
Result<RunData> read_run_sqlite(const std::string& db, std::optional<std::int64_t> id);

/// Splits "FILE.sqlite#ID" into the file and the id ("FILE.sqlite": no id). An id that is not a
/// positive integer is an error.
Result<std::pair<std::string, std::optional<std::int64_t>>> parse_sqlite_location(
    const std::string& text);

}  // namespace sonde
