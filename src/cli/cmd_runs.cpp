// sonde runs list|show|export: the runs stored in a SQLite database (src/sinks/sqlite.hpp).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "core/stored_summary.hpp"
#include "core/time_text.hpp"
#include "sinks/sqlite.hpp"

namespace sonde::cli {
namespace {

std::string duration_text(double s) {
  if (!(s >= 0)) return "-";
  if (s < 60) return fmt::format("{:.1f} s", s);
  if (s < 3600)
    return fmt::format("{}m{:02d}s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return fmt::format("{}h{:02d}m", static_cast<int>(s) / 3600, static_cast<int>(s) % 3600 / 60);
}

std::string command_text(const std::vector<std::string>& command) {
  if (command.empty()) return "(node)";
  std::string out;
  for (const auto& a : command) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?&;|<>()") == std::string::npos;
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  for (char& c : out)
    if (c == '\n') c = ' ';
  return out;
}

int fail(const Error& e) {
  print_error(e.message);
  return error_exit_status(e);
}

}  // namespace

std::string default_sqlite_path(const std::string& out_dir) {
  return out_dir + "/runs.sqlite";
}

int cmd_runs(const RunsOptions& o) {
  std::string db = o.db;
  if (db.empty()) {
    ConfigSearch search;
    auto cfg = load_config(search);
    db = default_sqlite_path(cfg ? cfg->out_dir : std::string("sonde-runs"));
  }
  // "runs show FILE#ID" is accepted as well as "runs show FILE ID".
  std::optional<std::int64_t> id = o.id;
  if (db.find('#') != std::string::npos) {
    auto loc = parse_sqlite_location(db);
    if (!loc) return fail(loc.error());
    db = loc->first;
    if (loc->second) id = loc->second;
  }
  if (id && *id <= 0) return fail(make_error(Errc::config, "run id: expected a positive integer"));

  if (o.action == RunsOptions::Action::list) {
    auto runs = list_runs_sqlite(db);
    if (!runs) return fail(runs.error());
    if (o.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : *runs) {
        const double end = r.end_wallclock.value_or(r.last_wallclock.value_or(r.start_wallclock));
        j.push_back(
            {{"id", r.id},
             {"host", r.host},
             {"command", r.command},
             {"start_wallclock", r.start_wallclock},
             {"duration_s", end - r.start_wallclock},
             {"exit_status", r.exit_status ? nlohmann::json(*r.exit_status) : nlohmann::json()},
             {"complete", r.complete},
             {"ticks", r.ticks},
             {"nodes", r.nodes}});
      }
      std::cout << json_text(j, 2) << "\n";
      return kExitOk;
    }
    if (runs->empty()) {
      std::cout << db << ": no runs\n";
      return kExitOk;
    }
    std::cout << fmt::format("{:>4}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {:>5}  {}\n", "ID",
                             "START", "DURATION", "TICKS", "EXIT", "COMPLETE", "NODES", "COMMAND");
    for (const auto& r : *runs) {
      const double end = r.end_wallclock.value_or(r.last_wallclock.value_or(r.start_wallclock));
      std::cout << fmt::format(
          "{:>4}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {:>5}  {}\n", r.id,
          calendar_time(r.start_wallclock, false), duration_text(end - r.start_wallclock), r.ticks,
          r.exit_status ? std::to_string(*r.exit_status) : "-", r.complete ? "yes" : "no",
          r.nodes.empty() ? std::size_t{1} : r.nodes.size(), command_text(r.command));
    }
    return kExitOk;
  }

  auto run = read_run_sqlite(db, id);
  if (!run) return fail(run.error());
  const std::int64_t run_id = run->manifest.contains("sqlite")
                                  ? run->manifest["sqlite"].value("run_id", std::int64_t{0})
                                  : id.value_or(0);

  if (o.action == RunsOptions::Action::show) {
    nlohmann::json ticks = nlohmann::json::object();
    for (const auto& t : run->levels) ticks[std::string(level_name(t.level))] = t.rows.size();
    const nlohmann::json summary =
        run->manifest.contains("summary") ? run->manifest["summary"] : nlohmann::json();
    // A multi-node run: per node its stored rows and figures (summarize_run's `nodes`).
    nlohmann::json nodes = nlohmann::json::array();
    std::string node_level;
    if (!run->nodes.empty()) {
      const nlohmann::json stored = summarize_run(*run);
      node_level = stored.value("node_level", std::string());
      for (std::size_t i = 0; i < run->nodes.size(); ++i) {
        nlohmann::json n = stored["nodes"][i];
        nlohmann::json nt = nlohmann::json::object();
        for (const auto& t : run->nodes[i].levels)
          nt[std::string(level_name(t.level))] = t.rows.size();
        n["stored_ticks"] = nt;
        nodes.push_back(n);
      }
    }
    if (o.json) {
      nlohmann::json j{{"id", run_id},
                       {"source", run->source},
                       {"stored_ticks", ticks},
                       {"manifest", run->manifest},
                       {"summary", summary}};
      if (!run->nodes.empty()) j["nodes"] = nodes;
      std::cout << json_text(j, 2) << "\n";
      return kExitOk;
    }
    std::cout << fmt::format("run {} in {}\n", run_id, db);
    std::cout << fmt::format("  stored ticks  {}\n", json_text(ticks));
    if (summary.is_object()) {
      std::cout << summary_text(summary);
    } else {
      std::cout << "  (no summary: the run has not finished, or it was killed)\n";
    }
    if (!nodes.empty())
      std::cout << summary_nodes_text({{"nodes", nodes}, {"node_level", node_level}});
    std::cout << "manifest:\n" << json_text(run->manifest, 2) << "\n";
    return kExitOk;
  }

  // export
  if (o.format == "json") {
    nlohmann::json levels = nlohmann::json::object();
    for (const auto& t : run->levels)
      levels[std::string(level_name(t.level))] = {{"columns", t.columns}, {"rows", t.rows}};
    nlohmann::json doc{{"source", run->source}, {"manifest", run->manifest}, {"levels", levels}};
    if (!run->nodes.empty()) {
      // A multi-node run: {node: {LEVEL: {columns, rows}}} beside the aggregate's levels.
      nlohmann::json nodes = nlohmann::json::object();
      for (const auto& n : run->nodes) {
        nlohmann::json nl = nlohmann::json::object();
        for (const auto& t : n.levels)
          nl[std::string(level_name(t.level))] = {{"columns", t.columns}, {"rows", t.rows}};
        nodes[n.node] = nl;
      }
      doc["nodes"] = nodes;
    }
    const std::string text = json_text(doc) + "\n";
    if (o.out.empty() || o.out == "-") {
      std::cout << text;
      return kExitOk;
    }
    if (auto ok = write_file_atomic(o.out, text); !ok) return fail(ok.error());
    std::cerr << fmt::format("sonde: run {} exported to {}\n", run->source, o.out);
    return kExitOk;
  }
  const std::string dir =
      !o.out.empty() ? o.out
                     : fmt::format("{}-{}", std::filesystem::path(db).stem().string(), run_id);
  if (auto ok = write_run_dir(*run, dir); !ok) return fail(ok.error());
  std::cerr << fmt::format("sonde: run {} exported to {}\n", run->source, dir);
  return kExitOk;
}

}  // namespace sonde::cli
