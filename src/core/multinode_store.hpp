#pragma once
// Where the multi-node head writes: the interface its outputs implement (the CSV run directory,
// sinks/multinode_csv.hpp; SQLite, sinks/multinode_sqlite.hpp).
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde::multinode {

/// The seam between the head and its output: the CSV run directory (make_csv_store,
/// sinks/multinode_csv.hpp); a SQLite
/// store implements the same calls (node rows with their node's name, aggregate rows with '').
class Store {
 public:
  virtual ~Store() = default;
  /// Creates `node`'s table for `level` (CSV: nodes/<node>/perf_<level>.csv with its header).
  virtual Result<void> begin_node(const std::string& node, Level level,
                                  const std::vector<std::string>& columns) = 0;
  /// One row of `node` as the node sent it: its own monotonic `time` and realtime `wallclock`.
  virtual void node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                        std::span<const double> values) = 0;
  /// Creates the aggregate table of `level` (CSV: perf_<level>.csv).
  virtual Result<void> begin_aggregate(Level level, const std::vector<std::string>& columns) = 0;
  /// One aggregate row on the head's grid (head monotonic `time`, head realtime `wallclock`).
  virtual void aggregate_row(Level level, double time_s, double wallclock_s,
                             std::span<const double> values) = 0;
  /// Sets a key of the run's manifest ("multinode", "nodes", "levels", ...) and rewrites it.
  virtual void set_manifest(const std::string& key, nlohmann::json value) = 0;
  /// The manifest key's value as last set (null when never).
  virtual nlohmann::json manifest(const std::string& key) const = 0;
  /// A write failed (reported once); later rows are dropped.
  virtual bool failed() const = 0;
};

}  // namespace sonde::multinode
