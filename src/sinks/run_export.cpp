#include "sinks/run_export.hpp"

#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/fs.hpp"
#include "sinks/format.hpp"

namespace sonde {

Result<void> write_run_dir(const RunData& run, const std::string& dir) {
  auto dir_fd = open_new_run_dir(dir, "choose another directory");
  if (!dir_fd) return dir_fd.error();
  nlohmann::json manifest = run.manifest;
  nlohmann::json files = nlohmann::json::object();
  // The levels written, whatever the stored manifest says (a damaged one must not make the export
  // unreadable).
  nlohmann::json levels = nlohmann::json::array();
  std::string text;
  for (const LevelTable& t : run.levels) {
    const std::string name = fmt::format("perf_{}.csv", level_name(t.level));
    text.clear();
    for (std::size_t i = 0; i < t.columns.size(); ++i) {
      if (i) text += ',';
      text += t.columns[i];
    }
    text += '\n';
    // Every row holds time and wallclock first (both readers make sure of it).
    for (const auto& row : t.rows)
      append_run_row(text, row[0], row[1], std::span<const double>(row).subspan(2));
    if (auto ok = replace_file_in(dir_fd->get(), name, text, dir + "/" + name); !ok)
      return ok.error();
    files[std::string(level_name(t.level))] = name;
    levels.push_back(std::string(level_name(t.level)));
  }
  manifest["levels"] = levels;
  manifest["files"] = files;
  manifest["exported_from"] = run.source;
  return replace_file_in(dir_fd->get(), "manifest.json", manifest.dump(2) + "\n",
                         dir + "/manifest.json");
}

}  // namespace sonde
