#include "sinks/sqlite_reader.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_text.hpp"
#include "sinks/run_data.hpp"
#include "sinks/sqlite_values.hpp"

namespace sonde {
using sqlite_detail::column_opt_double;
using sqlite_detail::column_text;
using sqlite_detail::parse_values;

Result<std::pair<std::string, std::optional<std::int64_t>>> parse_sqlite_location(
    const std::string& text) {
  const std::size_t hash = text.rfind('#');
  if (hash == std::string::npos) return std::pair{text, std::optional<std::int64_t>()};
  const std::string file = text.substr(0, hash), id = text.substr(hash + 1);
  std::int64_t v = 0;
  const auto [p, ec] = std::from_chars(id.data(), id.data() + id.size(), v);
  if (ec != std::errc() || p != id.data() + id.size() || v <= 0)
    return make_error(Errc::config, fmt::format("{}: expected FILE#ID with a run id (a positive "
                                                "integer) after '#', got '{}'",
                                                text, id));
  return std::pair{file, std::optional<std::int64_t>(v)};
}

namespace {
Result<SqliteStmt> prepare_read(const SqliteDb& db, const char* sql) {
  return db.prepare(sql, "cannot read");
}
}  // namespace

Result<void> check_sqlite_integrity(const SqliteDb& db) {
  // quick_check reads every page once (no index cross-check): a damaged file is an error rather
  // than a listing with wrong counts.
  auto q = prepare_read(db, "PRAGMA quick_check(1)");
  if (!q) return make_error(Errc::io, q.error().message + " (the database may be corrupt)");
  const int rc = sqlite3_step(q->get());
  if (rc != SQLITE_ROW)
    return make_error(Errc::io, db.error_text("the database is corrupt (quick_check failed)"));
  std::string verdict = column_text(q->get(), 0);
  for (char& c : verdict)
    if (c == '\n') c = ' ';
  if (verdict != "ok")
    return make_error(Errc::io,
                      fmt::format("{}: the database is corrupt (SQLite quick_check: {}); restore "
                                  "it from a backup",
                                  db.path(), verdict.substr(0, 200)));
  return {};
}

Result<std::vector<StoredRun>> list_runs_sqlite(const std::string& path) {
  auto db = SqliteDb::open(path, SqliteDb::Mode::read);
  if (!db) return db.error();
  if (auto ok = check_sqlite_integrity(**db); !ok) return ok.error();
  auto q = prepare_read(**db,
                        "SELECT id, host, command, start_wallclock, end_wallclock, exit_status, "
                        "interval_s, complete, ticks FROM runs ORDER BY id");
  if (!q) return q.error();
  const bool has_node = (*db)->schema_version() >= 2;
  auto last = prepare_read(**db, has_node ? "SELECT count(*), max(wallclock) FROM samples WHERE "
                                            "run_id = ?1 AND node = '' AND level = (SELECT level "
                                            "FROM columns WHERE run_id = ?1 AND node = '' LIMIT 1)"
                                          : "SELECT count(*), max(wallclock) FROM samples WHERE "
                                            "run_id = ?1 AND level = (SELECT level FROM columns "
                                            "WHERE run_id = ?1 LIMIT 1)");
  if (!last) return last.error();
  auto nodes = prepare_read(**db, has_node ? "SELECT DISTINCT node FROM columns WHERE run_id = ? "
                                             "AND node != '' ORDER BY node"
                                           : "SELECT '' WHERE 0");
  if (!nodes) return nodes.error();
  std::vector<StoredRun> out;
  int rc = 0;
  while ((rc = sqlite3_step(q->get())) == SQLITE_ROW) {
    sqlite3_stmt* s = q->get();
    StoredRun r;
    r.id = sqlite3_column_int64(s, 0);
    r.host = column_text(s, 1);
    const auto cmd = parse_json_bounded(column_text(s, 2));
    if (cmd.is_array())
      for (const auto& a : cmd)
        if (a.is_string()) r.command.push_back(a.get<std::string>());
    r.start_wallclock = sqlite3_column_double(s, 3);
    r.end_wallclock = column_opt_double(s, 4);
    if (sqlite3_column_type(s, 5) != SQLITE_NULL) r.exit_status = sqlite3_column_int(s, 5);
    r.interval_s = sqlite3_column_double(s, 6);
    r.complete = sqlite3_column_int(s, 7) != 0;
    sqlite3_stmt* l = last->get();
    sqlite3_reset(l);
    sqlite3_bind_int64(l, 1, r.id);
    if (sqlite3_step(l) != SQLITE_ROW)
      return make_error(Errc::io,
                        (*db)->error_text(fmt::format("cannot count the ticks of run {}", r.id)));
    r.ticks = static_cast<std::uint64_t>(sqlite3_column_int64(l, 0));
    r.last_wallclock = column_opt_double(l, 1);
    sqlite3_stmt* n = nodes->get();
    sqlite3_reset(n);
    if (has_node) sqlite3_bind_int64(n, 1, r.id);
    int nrc = 0;
    while ((nrc = sqlite3_step(n)) == SQLITE_ROW) r.nodes.push_back(column_text(n, 0));
    if (nrc != SQLITE_DONE)
      return make_error(Errc::io,
                        (*db)->error_text(fmt::format("cannot read the nodes of run {}", r.id)));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return make_error(Errc::io, (*db)->error_text("cannot read the runs"));
  return out;
}

Result<RunData> read_run_sqlite(const std::string& path, std::optional<std::int64_t> id) {
  auto dbr = SqliteDb::open(path, SqliteDb::Mode::read);
  if (!dbr) return dbr.error();
  const SqliteDb& db = **dbr;
  if (!id) {
    auto q = prepare_read(db, "SELECT max(id) FROM runs");
    if (!q) return q.error();
    if (sqlite3_step(q->get()) != SQLITE_ROW)
      return make_error(Errc::io, db.error_text("cannot read the runs"));
    if (sqlite3_column_type(q->get(), 0) == SQLITE_NULL)
      return make_error(Errc::config, fmt::format("{} holds no runs yet", path));
    id = sqlite3_column_int64(q->get(), 0);
  }
  auto q = prepare_read(db, "SELECT manifest, summary FROM runs WHERE id = ?");
  if (!q) return q.error();
  sqlite3_bind_int64(q->get(), 1, *id);
  const int rc = sqlite3_step(q->get());
  if (rc == SQLITE_DONE) {
    std::string ids;
    auto all = prepare_read(db, "SELECT min(id), max(id), count(*) FROM runs");
    if (all && sqlite3_step(all->get()) == SQLITE_ROW) {
      const auto n = sqlite3_column_int64(all->get(), 2);
      ids = n == 0 ? std::string("it holds no runs")
                   : fmt::format("it holds {} run{}, ids {} to {}; see `sonde runs list {}`", n,
                                 n == 1 ? "" : "s", sqlite3_column_int64(all->get(), 0),
                                 sqlite3_column_int64(all->get(), 1), path);
    }
    return make_error(Errc::config, fmt::format("{} has no run with id {} ({})", path, *id, ids));
  }
  if (rc != SQLITE_ROW) return make_error(Errc::io, db.error_text("cannot read the run"));
  RunData run;
  run.source = fmt::format("{}#{}", path, *id);
  run.manifest = parse_json_bounded(column_text(q->get(), 0));
  if (!run.manifest.is_object())
    return make_error(Errc::parse, fmt::format("{}: the manifest of run {} is not a JSON object "
                                               "(or is nested deeper than 64 levels)",
                                               path, *id));
  if (sqlite3_column_type(q->get(), 1) != SQLITE_NULL && !run.manifest.contains("summary")) {
    auto summary = parse_json_bounded(column_text(q->get(), 1));
    if (!summary.is_discarded()) run.manifest["summary"] = std::move(summary);
  }

  // Levels in the manifest's order; their columns from `columns`. Schema 2: per node ('' = the
  // run's own rows, the aggregate of a multi-node run); schema 1 has no node.
  const bool has_node = db.schema_version() >= 2;
  std::vector<Level> levels;
  if (run.manifest.contains("levels") && run.manifest["levels"].is_array())
    for (const auto& n : run.manifest["levels"])
      if (n.is_string())
        if (auto l = parse_level(n.get<std::string>())) levels.push_back(*l);
  auto cols = prepare_read(db, has_node ? "SELECT level, name, node FROM columns WHERE run_id = ? "
                                          "ORDER BY node, level, position"
                                        : "SELECT level, name, '' FROM columns WHERE run_id = ? "
                                          "ORDER BY level, position");
  if (!cols) return cols.error();
  sqlite3_bind_int64(cols->get(), 1, *id);
  struct NodeColumns {
    std::array<std::vector<std::string>, kNumLevels> names;
    std::vector<Level> levels;
  };
  std::map<std::string, NodeColumns> by_node;
  by_node[""].levels = levels;
  std::size_t column_count = 0;
  int crc = 0;
  while ((crc = sqlite3_step(cols->get())) == SQLITE_ROW) {
    const auto l = parse_level(column_text(cols->get(), 0));
    if (!l)
      return make_error(Errc::parse, fmt::format("{}: run {} has an unknown level '{}'", path, *id,
                                                 column_text(cols->get(), 0)));
    if (++column_count > kMaxRunLineBytes)
      return make_error(Errc::parse, fmt::format("{}: run {} has more than {} columns", path, *id,
                                                 kMaxRunLineBytes));
    // A column name is written back as a CSV header field (runs export, report): one that CSV
    // cannot hold as it is (empty, a comma, a quote, a control character) is a damaged run.
    const std::string name = column_text(cols->get(), 1);
    if (name.empty() || std::any_of(name.begin(), name.end(), [](char c) {
          return c == ',' || c == '"' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
        }))
      return make_error(
          Errc::parse, fmt::format("{}: run {} has a column name that is not a name: {}", path, *id,
                                   json_text(nlohmann::json(name))));
    NodeColumns& nc = by_node[column_text(cols->get(), 2)];
    nc.names[level_index(*l)].push_back(name);
    if (std::find(nc.levels.begin(), nc.levels.end(), *l) == nc.levels.end())
      nc.levels.push_back(*l);
  }
  if (crc != SQLITE_DONE) return make_error(Errc::io, db.error_text("cannot read the columns"));

  auto rows = prepare_read(db, has_node ? "SELECT tick, time, wallclock, vals FROM samples WHERE "
                                          "run_id = ? AND level = ? AND node = ? ORDER BY tick"
                                        : "SELECT tick, time, wallclock, vals FROM samples WHERE "
                                          "run_id = ? AND level = ? AND ? = '' ORDER BY tick");
  if (!rows) return rows.error();
  std::vector<double> values;
  std::uint64_t values_left = kMaxRunValues;  // the bounds of a run directory (run_data.hpp)
  auto read_levels = [&](const std::string& node, const NodeColumns& nc,
                         std::vector<LevelTable>& out) -> Result<void> {
    const std::string where = node.empty() ? std::string() : ", node " + node;
    for (Level l : nc.levels) {
      const auto& names = nc.names[level_index(l)];
      LevelTable t;
      t.level = l;
      t.columns = {"time", "wallclock"};
      for (const auto& n : names) t.columns.push_back(n);
      sqlite3_stmt* s = rows->get();
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, *id);
      const std::string_view ln = level_name(l);
      sqlite3_bind_text(s, 2, ln.data(), static_cast<int>(ln.size()), SQLITE_STATIC);
      sqlite3_bind_text(s, 3, node.data(), static_cast<int>(node.size()), SQLITE_STATIC);
      int src = 0;
      while ((src = sqlite3_step(s)) == SQLITE_ROW) {
        const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
        const std::string_view v(text ? text : "",
                                 static_cast<std::size_t>(sqlite3_column_bytes(s, 3)));
        if (v.size() > kMaxRunLineBytes || values_left < t.columns.size())
          return make_error(Errc::parse,
                            fmt::format("{}: run {}{}, level {}, tick {}: more than sonde reads "
                                        "of one run ({} bytes a row, {} values in all)",
                                        path, *id, where, ln, sqlite3_column_int64(s, 0),
                                        kMaxRunLineBytes, kMaxRunValues));
        values_left -= t.columns.size();
        if (!parse_values(v, values) || values.size() != names.size())
          return make_error(
              Errc::parse,
              fmt::format("{}: run {}{}, level {}, tick {}: expected a JSON array "
                          "of {} numbers or nulls",
                          path, *id, where, ln, sqlite3_column_int64(s, 0), names.size()));
        std::vector<double> row;
        row.reserve(values.size() + 2);
        row.push_back(sqlite3_column_double(s, 1));
        row.push_back(sqlite3_column_double(s, 2));
        row.insert(row.end(), values.begin(), values.end());
        t.rows.push_back(std::move(row));
      }
      if (src != SQLITE_DONE) return make_error(Errc::io, db.error_text("cannot read the samples"));
      out.push_back(std::move(t));
    }
    return {};
  };
  if (auto ok = read_levels("", by_node[""], run.levels); !ok) return ok.error();

  // A multi-node run: the nodes in the manifest's order (then any other node stored).
  std::vector<std::string> order;
  std::map<std::string, nlohmann::json> entries;
  if (run.manifest.contains("nodes") && run.manifest["nodes"].is_array())
    for (const auto& e : run.manifest["nodes"])
      if (e.is_object() && e.contains("name") && e["name"].is_string() &&
          !e["name"].get<std::string>().empty() && !entries.count(e["name"].get<std::string>())) {
        order.push_back(e["name"].get<std::string>());
        entries[order.back()] = e;
      }
  for (const auto& [name, nc] : by_node)
    if (!name.empty() && !entries.count(name)) {
      order.push_back(name);
      entries[name] = {{"name", name}};
    }
  for (const std::string& name : order) {
    RunData node;
    node.node = name;
    node.source = run.source + " node " + name;
    const auto it = by_node.find(name);
    std::vector<std::string> level_names;
    if (it != by_node.end()) {
      if (auto ok = read_levels(name, it->second, node.levels); !ok) return ok.error();
      for (const auto& t : node.levels) level_names.emplace_back(level_name(t.level));
    }
    node.manifest = node_manifest(run.manifest, entries[name], level_names);
    run.nodes.push_back(std::move(node));
  }
  return run;
}

}  // namespace sonde
