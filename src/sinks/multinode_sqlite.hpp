#pragma once
// The multi-node head's store in a SQLite database (docs/sqlite.md "Multi-node runs"): the
// nodes' rows with their node's name, the aggregate rows with node '', the manifest with its
// `nodes`, through a SqliteSink (src/sinks/sqlite_writer.hpp).
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/multinode_store.hpp"
#include "core/result.hpp"
#include "sinks/sqlite_writer.hpp"

namespace sonde::multinode {

class SqliteStore final : public Store {
 public:
  /// Writes through `sink`, which the run's own sink owns (run --slurm: the head command's
  /// levels are its rows). `manifest`'s keys are the base that manifest() returns.
  SqliteStore(SqliteSink& sink, nlohmann::json manifest);
  /// Owns `sink` (record --slurm-job: the run has no level of its own).
  SqliteStore(std::unique_ptr<SqliteSink> sink, nlohmann::json manifest);

  Result<void> begin_node(const std::string& node, Level level,
                          const std::vector<std::string>& columns) override;
  void node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                std::span<const double> values) override;
  Result<void> begin_aggregate(Level level, const std::vector<std::string>& columns) override;
  void aggregate_row(Level level, double time_s, double wallclock_s,
                     std::span<const double> values) override;
  void set_manifest(const std::string& key, nlohmann::json value) override;
  nlohmann::json manifest(const std::string& key) const override;
  bool failed() const override { return sink_.failed(); }

  SqliteSink& sink() { return sink_; }

 private:
  std::unique_ptr<SqliteSink> owned_;
  SqliteSink& sink_;
  nlohmann::json manifest_;
  std::vector<double> row_;
};

/// record --slurm-job: creates the run in the database `path` with `manifest` (no level of its
/// own; the aggregate levels are added when the head knows their columns).
Result<std::unique_ptr<SqliteStore>> make_sqlite_store(const std::string& path,
                                                       nlohmann::json manifest);

}  // namespace sonde::multinode
