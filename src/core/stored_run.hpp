#pragma once
// A stored run as data: its manifest, one table of rows per level and the cells of a Jupyter
// session. The readers (sinks/run_data.hpp, sinks/sqlite.hpp) fill it; the summary
// (core/summary.hpp), `sonde report` and the Jupyter package read it.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"

namespace sonde {

struct LevelTable {
  Level level = Level::system;
  /// Every column of the level's rows, `time` and `wallclock` first, as in perf_<level>.csv.
  std::vector<std::string> columns;
  /// One row per tick; a missing value (empty CSV field, SQL NULL) is NaN.
  std::vector<std::vector<double>> rows;
  /// Index of `name` in `columns`, or nullopt.
  std::optional<std::size_t> find(const std::string& name) const {
    for (std::size_t i = 0; i < columns.size(); ++i)
      if (columns[i] == name) return i;
    return std::nullopt;
  }
};

/// One executed notebook cell (cell_history.csv of a Jupyter session).
///
/// cell_history.csv (written by the Jupyter package next to manifest.json) is RFC 4180 CSV with
/// the header `index,start_wallclock,end_wallclock,code`: the execution count (integer), the
/// cell's start and end as epoch seconds, and its source code, quoted with `"` (a `"` inside is
/// doubled; newlines allowed inside the quotes). A truncated last record is skipped.
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
  const LevelTable* find(Level level) const {
    for (const auto& t : levels)
      if (t.level == level) return &t;
    return nullptr;
  }
};

}  // namespace sonde
