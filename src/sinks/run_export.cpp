#include "sinks/run_export.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/run_csv.hpp"

namespace sonde {

namespace {
/// perf_<level>.csv of each table into `dir_fd` (shown as `dir`); `files`/`levels` get them.
Result<void> write_levels(int dir_fd, const std::string& dir, const std::vector<LevelTable>& tables,
                          nlohmann::json* files, nlohmann::json* levels) {
  std::string text;
  for (const LevelTable& t : tables) {
    const std::string name = fmt::format("perf_{}.csv", level_name(t.level));
    text.clear();
    // Every row and the columns hold time and wallclock first (both readers make sure of it).
    append_run_header(text, std::span<const std::string>(t.columns).subspan(
                                std::min<std::size_t>(2, t.columns.size())));
    for (const auto& row : t.rows)
      append_run_row(text, row[0], row[1], std::span<const double>(row).subspan(2));
    if (auto ok = replace_file_in(dir_fd, name, text, dir + "/" + name); !ok) return ok.error();
    if (files) (*files)[std::string(level_name(t.level))] = name;
    if (levels) levels->push_back(std::string(level_name(t.level)));
  }
  return {};
}

/// A new directory `name` inside `parent_fd` (shown as `shown`), opened without following links.
Result<UniqueFd> make_dir_in(int parent_fd, const std::string& name, const std::string& shown) {
  if (!is_plain_name(name))
    return make_error(Errc::parse, fmt::format("{}: not a plain name for a directory", shown));
  if (::mkdirat(parent_fd, name.c_str(), 0755) != 0 && errno != EEXIST)
    return make_error(Errc::io, fmt::format("cannot create {}: {}", shown, std::strerror(errno)));
  UniqueFd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd)
    return make_error(Errc::io, fmt::format("cannot open {}: {}", shown, std::strerror(errno)));
  return fd;
}
}  // namespace

Result<void> write_run_dir(const RunData& run, const std::string& dir) {
  auto dir_fd = open_new_run_dir(dir, "choose another directory");
  if (!dir_fd) return dir_fd.error();
  nlohmann::json manifest = run.manifest;
  nlohmann::json files = nlohmann::json::object();
  // The levels written, whatever the stored manifest says (a damaged one must not make the export
  // unreadable).
  nlohmann::json levels = nlohmann::json::array();
  if (auto ok = write_levels(dir_fd->get(), dir, run.levels, &files, &levels); !ok)
    return ok.error();
  if (!run.nodes.empty()) {
    // A multi-node run: nodes/<node>/perf_<level>.csv, and the manifest's `nodes` for every node
    // written (an entry kept from the stored manifest where there is one).
    auto nodes_fd = make_dir_in(dir_fd->get(), "nodes", dir + "/nodes");
    if (!nodes_fd) return nodes_fd.error();
    nlohmann::json entries = nlohmann::json::array();
    for (const RunData& n : run.nodes) {
      const std::string shown = dir + "/nodes/" + n.node;
      auto node_fd = make_dir_in(nodes_fd->get(), n.node, shown);
      if (!node_fd) return node_fd.error();
      if (auto ok = write_levels(node_fd->get(), shown, n.levels, nullptr, nullptr); !ok)
        return ok.error();
      nlohmann::json entry = n.manifest.contains("node") && n.manifest["node"].is_object()
                                 ? n.manifest["node"]
                                 : nlohmann::json::object();
      entry["name"] = n.node;
      entries.push_back(entry);
    }
    manifest["nodes"] = entries;
  }
  manifest["levels"] = levels;
  manifest["files"] = files;
  manifest["exported_from"] = run.source;
  return replace_file_in(dir_fd->get(), "manifest.json", json_text(manifest, 2) + "\n",
                         dir + "/manifest.json");
}

}  // namespace sonde
