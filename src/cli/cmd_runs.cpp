// sonde runs list|show|export: the runs stored in a SQLite database (src/sinks/sqlite.hpp); `list`
// also lists the run directories (CSV) under the output directory.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

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
#include "sinks/run_data.hpp"
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

/// A run directory as `runs list` shows it, from its manifest.
struct DirRun {
  std::string dir;
  nlohmann::json manifest;
  double start = 0;
};

double number_or(const nlohmann::json& m, const char* key, double fallback) {
  return m.contains(key) && m[key].is_number() ? m[key].get<double>() : fallback;
}

/// The command a run directory's manifest names: the command of `sonde run`, else the process
/// `record --pid` watched, else none.
std::vector<std::string> manifest_command(const nlohmann::json& m) {
  for (const char* key : {"command", "target_command"}) {
    if (!m.contains(key) || !m[key].is_array() || m[key].empty()) continue;
    std::vector<std::string> out;
    for (const auto& a : m[key])
      if (a.is_string()) out.push_back(a.get<std::string>());
    return out;
  }
  return {};
}

/// The run directories directly under `parent` (those with a manifest.json), oldest first. A
/// directory whose manifest cannot be read is skipped with one warning naming it.
std::vector<DirRun> run_directories(const std::string& parent) {
  namespace fs = std::filesystem;
  std::vector<DirRun> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    std::error_code ec2;
    if (!entry.is_directory(ec2) || entry.is_symlink(ec2)) continue;
    const std::string dir = entry.path().string();
    UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd || ::faccessat(fd.get(), "manifest.json", F_OK, AT_SYMLINK_NOFOLLOW) != 0) continue;
    auto m = read_run_manifest(fd.get(), dir);
    if (!m || !m->is_object()) {
      std::cerr << "sonde: warning: "
                << (m ? dir + "/manifest.json: expected a JSON object" : m.error().message)
                << " (skipped)\n";
      continue;
    }
    DirRun r{dir, std::move(*m), 0};
    r.start = number_or(r.manifest, "start_wallclock", 0);
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const DirRun& a, const DirRun& b) {
    return a.start != b.start ? a.start < b.start : a.dir < b.dir;
  });
  return out;
}

nlohmann::json dir_run_json(const DirRun& r) {
  const auto& m = r.manifest;
  const double end = number_or(m, "end_wallclock", r.start);
  nlohmann::json j{{"dir", r.dir},
                   {"host", m.value("host", std::string())},
                   {"command", manifest_command(m)},
                   {"start_wallclock", r.start},
                   {"duration_s", end - r.start},
                   {"exit_status", m.contains("exit_status") ? m["exit_status"] : nlohmann::json()},
                   {"complete", m.value("complete", false)},
                   {"ticks", static_cast<std::int64_t>(number_or(m, "ticks", 0))}};
  if (m.contains("nodes") && m["nodes"].is_array()) j["nodes"] = m["nodes"].size();
  return j;
}

/// `runs list` of the run directories under `parent`: one line each, or JSON.
void print_run_directories(const std::vector<DirRun>& runs) {
  std::size_t width = 13;
  for (const auto& r : runs) width = std::max(width, r.dir.size());
  std::cout << fmt::format("{:<{}}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {}\n", "RUN DIRECTORY",
                           width, "START", "DURATION", "TICKS", "EXIT", "COMPLETE", "COMMAND");
  for (const auto& r : runs) {
    const nlohmann::json j = dir_run_json(r);
    const auto cmd = manifest_command(r.manifest);
    std::string what = cmd.empty() ? std::string("(node)") : command_text(cmd);
    const auto& given = r.manifest.contains("command") ? r.manifest["command"] : nlohmann::json();
    if (!cmd.empty() && (!given.is_array() || given.empty()))  // record --pid: the process's
      what = fmt::format("pid {}: {}", number_or(r.manifest, "target_pid", 0), what);
    std::cout << fmt::format(
        "{:<{}}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {}\n", r.dir, width,
        r.start > 0 ? calendar_time(r.start, false) : std::string("-"),
        duration_text(j["duration_s"].get<double>()), j["ticks"].get<std::int64_t>(),
        j["exit_status"].is_number_integer() ? std::to_string(j["exit_status"].get<int>()) : "-",
        j["complete"].get<bool>() ? "yes" : "no", what);
  }
}

nlohmann::json sqlite_run_json(const StoredRun& r) {
  const double end = r.end_wallclock.value_or(r.last_wallclock.value_or(r.start_wallclock));
  return {{"id", r.id},
          {"host", r.host},
          {"command", r.command},
          {"start_wallclock", r.start_wallclock},
          {"duration_s", end - r.start_wallclock},
          {"exit_status", r.exit_status ? nlohmann::json(*r.exit_status) : nlohmann::json()},
          {"complete", r.complete},
          {"ticks", r.ticks},
          {"nodes", r.nodes}};
}

void print_sqlite_runs(const std::vector<StoredRun>& runs) {
  std::cout << fmt::format("{:>4}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {:>5}  {}\n", "ID", "START",
                           "DURATION", "TICKS", "EXIT", "COMPLETE", "NODES", "COMMAND");
  for (const auto& r : runs) {
    const double end = r.end_wallclock.value_or(r.last_wallclock.value_or(r.start_wallclock));
    std::cout << fmt::format(
        "{:>4}  {:<19}  {:>9}  {:>6}  {:>4}  {:<8}  {:>5}  {}\n", r.id,
        calendar_time(r.start_wallclock, false), duration_text(end - r.start_wallclock), r.ticks,
        r.exit_status ? std::to_string(*r.exit_status) : "-", r.complete ? "yes" : "no",
        r.nodes.empty() ? std::size_t{1} : r.nodes.size(), command_text(r.command));
  }
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
    // No database named, or a directory: the run directories in it (CSV runs, what `sonde run`
    // writes by default) and its runs.sqlite when there is one.
    std::error_code ec;
    if (o.db.empty() || std::filesystem::is_directory(db, ec)) {
      const std::string parent = std::filesystem::is_directory(db, ec)
                                     ? db
                                     : std::filesystem::path(db).parent_path().string();
      const std::string in_db = default_sqlite_path(parent);
      const bool has_db = std::filesystem::exists(in_db, ec);
      const auto dirs = run_directories(parent);
      std::optional<std::vector<StoredRun>> stored;
      if (has_db) {
        auto r = list_runs_sqlite(in_db);
        if (!r) return fail(r.error());
        stored = std::move(*r);
      }
      if (o.json) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : dirs) j.push_back(dir_run_json(r));
        if (stored)
          for (const auto& r : *stored) {
            nlohmann::json e = sqlite_run_json(r);
            e["db"] = in_db;
            j.push_back(std::move(e));
          }
        std::cout << json_text(j, 2) << "\n";
        return kExitOk;
      }
      if (dirs.empty() && (!stored || stored->empty())) {
        std::cout << fmt::format("{}: no runs (no run directories, no runs.sqlite)\n", parent);
        return kExitOk;
      }
      if (!dirs.empty()) print_run_directories(dirs);
      if (stored && !stored->empty()) {
        if (!dirs.empty()) std::cout << "\n";
        std::cout << in_db << ":\n";
        print_sqlite_runs(*stored);
      }
      return kExitOk;
    }
    auto runs = list_runs_sqlite(db);
    if (!runs) return fail(runs.error());
    if (o.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : *runs) j.push_back(sqlite_run_json(r));
      std::cout << json_text(j, 2) << "\n";
      return kExitOk;
    }
    if (runs->empty()) {
      std::cout << db << ": no runs\n";
      return kExitOk;
    }
    print_sqlite_runs(*runs);
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
