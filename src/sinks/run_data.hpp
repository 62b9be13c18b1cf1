#pragma once
// A stored run, read back: from a run directory (manifest.json + perf_<level>.csv, and the
// cell_history.csv of a Jupyter session) or from a SQLite database (src/sinks/sqlite.hpp). What
// `sonde report`, `sonde runs` and the Jupyter package read.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde {

struct LevelTable {
  Level level = Level::system;
  /// Every column of the level's rows, `time` and `wallclock` first, as in perf_<level>.csv.
  std::vector<std::string> columns;
  /// One row per tick; a missing value (empty CSV field, SQL NULL) is NaN.
  std::vector<std::vector<double>> rows;
  /// Index of `name` in `columns`, or nullopt.
  std::optional<std::size_t> find(const std::string& name) const;
};

/// One executed notebook cell (cell_history.csv of a Jupyter session).
struct CellRecord {
  int index = 0;  ///< execution count
  double start_wallclock = 0, end_wallclock = 0;
  std::string code;
};

struct RunData {
  nlohmann::json manifest;         ///< as written by RunDirSink (keys: levels, interval, ...)
  std::vector<LevelTable> levels;  ///< in the manifest's level order
  std::vector<CellRecord> cells;   ///< empty outside Jupyter sessions
  std::string source;              ///< the directory, or "FILE.sqlite#ID"
  const LevelTable* find(Level level) const;
};

/// Reads a run directory. A truncated last line (the run was killed) is skipped; a malformed
/// file is an error naming the file and line.
Result<RunData> read_run_dir(const std::string& dir);

/// The summary of a stored run, or of the rows whose wallclock lies in `window` (a notebook
/// cell): per level and per metric group (CPU, memory, GPU utilisation, GPU memory, ...) the
/// mean/min/max and the limit, plus the bottleneck tags, with the same keys and tag rules as
/// summary_json (core/summary.hpp) where they overlap.
nlohmann::json summarize_run(const RunData& run,
                             std::optional<std::pair<double, double>> window = std::nullopt);

}  // namespace sonde
