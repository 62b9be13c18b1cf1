#include "sinks/multinode_sqlite.hpp"

#include <utility>

namespace sonde::multinode {

namespace {
nlohmann::json object_or_empty(nlohmann::json j) {
  return j.is_object() ? std::move(j) : nlohmann::json::object();
}
std::array<std::vector<std::string>, kNumLevels> one_level(Level level,
                                                           const std::vector<std::string>& cols) {
  std::array<std::vector<std::string>, kNumLevels> out;
  out[level_index(level)] = cols;
  return out;
}
}  // namespace

SqliteStore::SqliteStore(SqliteSink& sink, nlohmann::json manifest)
    : sink_(sink), manifest_(object_or_empty(std::move(manifest))) {}

SqliteStore::SqliteStore(std::unique_ptr<SqliteSink> sink, nlohmann::json manifest)
    : owned_(std::move(sink)), sink_(*owned_), manifest_(object_or_empty(std::move(manifest))) {}

Result<void> SqliteStore::begin_node(const std::string& node, Level level,
                                     const std::vector<std::string>& columns) {
  if (node.empty()) return make_error(Errc::io, "a node without a name cannot be stored");
  // After a write error (reported once) the rows are dropped: nothing more to say per node.
  if (sink_.failed()) return {};
  return sink_.add_node(node, one_level(level, columns));
}

void SqliteStore::node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                           std::span<const double> values) {
  row_.assign(values.begin(), values.end());
  sink_.write_node_row(node, level, time_s, wallclock_s, row_);
}

Result<void> SqliteStore::begin_aggregate(Level level, const std::vector<std::string>& columns) {
  if (sink_.failed()) return {};
  return sink_.add_node("", one_level(level, columns));
}

void SqliteStore::aggregate_row(Level level, double time_s, double wallclock_s,
                                std::span<const double> values) {
  row_.assign(values.begin(), values.end());
  sink_.write_node_row("", level, time_s, wallclock_s, row_);
  // The nodes' rows since the last tick and this aggregate row: one transaction.
  sink_.end_tick();
}

void SqliteStore::set_manifest(const std::string& key, nlohmann::json value) {
  manifest_[key] = value;
  sink_.update(key, std::move(value));
}

nlohmann::json SqliteStore::manifest(const std::string& key) const {
  return manifest_.contains(key) ? manifest_[key] : nlohmann::json();
}

Result<std::unique_ptr<SqliteStore>> make_sqlite_store(const std::string& path,
                                                       nlohmann::json manifest) {
  auto sink = SqliteSink::create(path, manifest, {}, {});
  if (!sink) return sink.error();
  return std::make_unique<SqliteStore>(std::move(*sink), std::move(manifest));
}

}  // namespace sonde::multinode
