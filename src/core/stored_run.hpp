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
/// the header `index,start_wallclock,end_wallclock,code`: the cell number (integer: JUmPER's
/// cell_index, the position from 0, whose execution counts are the manifest's
/// cell_execution_counts; the execution count itself in sessions exported before the magics
/// numbered cells as JUmPER), the cell's start and end as epoch seconds, and its source code,
/// quoted with `"` (a `"` inside is doubled; newlines allowed inside the quotes). A truncated
/// last record is skipped.
struct CellRecord {
  int index = 0;  ///< cell_index (older sessions: the execution count)
  double start_wallclock = 0, end_wallclock = 0;
  std::string code;
};

struct RunData {
  nlohmann::json manifest;         ///< as written by RunDirSink (keys: levels, interval, ...)
  std::vector<LevelTable> levels;  ///< in the manifest's level order
  std::vector<CellRecord> cells;   ///< empty outside Jupyter sessions
  std::string source;              ///< the directory, or "FILE.sqlite#ID"
  /// A multi-node run (manifest `multinode` and `nodes`, docs/report.md "Multi-node runs"): the
  /// run itself holds the aggregate levels (and the head's process level); `nodes` holds one
  /// RunData per node, in the manifest's order, each a single-node run as far as its readers
  /// know: its manifest is node_manifest() of the run's, its levels the node's own rows (the
  /// node's clocks). Empty for a single-node run. An entry of `nodes` has `node` set to its name.
  std::vector<RunData> nodes;
  std::string node;  ///< the node's name in an entry of `nodes`; empty otherwise
  bool multinode() const { return !nodes.empty() || manifest.contains("multinode"); }
  const LevelTable* find(Level level) const {
    for (const auto& t : levels)
      if (t.level == level) return &t;
    return nullptr;
  }
  /// The node called `name`, or nullptr.
  const RunData* find_node(const std::string& name) const {
    for (const auto& n : nodes)
      if (n.node == name) return &n;
    return nullptr;
  }
};

/// Whether `name` names a multi-node run's aggregate rather than a node: "aggregate",
/// "<Aggregated>" (JUmPER's name in its node menu), "aggregated", "all" (any case).
inline bool is_aggregate_node_name(const std::string& name) {
  std::string l;
  for (char c : name) l += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return l == "aggregate" || l == "<aggregated>" || l == "aggregated" || l == "all";
}

/// The manifest of one node of a multi-node run, built from the run's manifest and its entry in
/// `nodes` ({name, head, node_info, clock_offset_s, status, reason, first_wallclock,
/// last_wallclock, rows, columns_by_level}): the run's keys without `nodes`, `multinode`,
/// `files` and `summary` (the head command's figures); `node_info` and `host` of the node;
/// `start_wallclock`/`end_wallclock` moved onto the node's clock (+ clock_offset_s), so that a
/// node's rows and the run's start compare; `node` = the entry; `levels` = `level_names`.
inline nlohmann::json node_manifest(const nlohmann::json& run_manifest, const nlohmann::json& entry,
                                    const std::vector<std::string>& level_names) {
  nlohmann::json m = run_manifest.is_object() ? run_manifest : nlohmann::json::object();
  for (const char* k : {"nodes", "multinode", "files", "summary"}) m.erase(k);
  const std::string name = entry.value("name", std::string());
  m["host"] = name;
  m["node_info"] = entry.contains("node_info") && entry["node_info"].is_object()
                       ? entry["node_info"]
                       : nlohmann::json::object();
  const double offset = entry.contains("clock_offset_s") && entry["clock_offset_s"].is_number()
                            ? entry["clock_offset_s"].get<double>()
                            : 0.0;
  for (const char* k : {"start_wallclock", "end_wallclock"})
    if (m.contains(k) && m[k].is_number()) m[k] = m[k].get<double>() + offset;
  m["node"] = entry;
  m["levels"] = level_names;
  return m;
}

}  // namespace sonde
