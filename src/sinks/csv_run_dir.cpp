#include "sinks/csv_run_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "sinks/format.hpp"

namespace sonde {

std::string RunDirSink::default_dir(const std::string& parent,
                                    const std::vector<std::string>& command) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  std::string name = command.empty() ? std::string("system")
                                     : std::filesystem::path(command[0]).filename().string();
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  std::string base = fmt::format("{}/{}-{}", parent, stamp, name);
  std::string dir = base;
  for (int i = 2; std::filesystem::exists(dir); ++i) dir = fmt::format("{}-{}", base, i);
  return dir;
}

Result<std::unique_ptr<RunDirSink>> RunDirSink::create(const std::string& dir, const Engine& engine,
                                                       nlohmann::json meta) {
  auto dir_fd = open_new_run_dir(dir, "choose another --out");
  if (!dir_fd) return dir_fd.error();
  std::unique_ptr<RunDirSink> s(new RunDirSink());
  s->engine_ = &engine;
  s->dir_ = dir;
  s->dir_fd_ = std::move(*dir_fd);
  s->manifest_ = std::move(meta);
  s->manifest_["sonde_version"] = SONDE_VERSION;
  s->manifest_["host"] = engine.node_info().hostname;
  s->manifest_["kernel"] = engine.node_info().kernel;
  s->manifest_["interval"] = engine.interval_s();
  s->manifest_["levels"] = levels_json(engine);
  s->manifest_["columns_by_level"] = columns_by_level_json(engine);
  s->manifest_["node_info"] = node_info_json(engine);
  s->manifest_["end_wallclock"] = nullptr;
  s->manifest_["exit_status"] = nullptr;
  s->manifest_["complete"] = false;
  s->manifest_["ticks"] = 0;
  nlohmann::json files = nlohmann::json::object();
  for (Level l : engine.levels()) {
    const std::string name = fmt::format("perf_{}.csv", level_name(l));
    const std::string path = dir + "/" + name;
    auto file = RunCsvFile::create(s->dir_fd_.get(), name, path, engine.columns(l));
    if (!file) return file.error();
    s->files_[level_index(l)] = std::move(*file);
    files[std::string(level_name(l))] = name;
  }
  s->manifest_["files"] = files;
  if (auto ok = s->write_manifest(); !ok) return ok.error();
  return s;
}

RunDirSink::~RunDirSink() = default;

Result<void> RunDirSink::write_manifest() {
  return replace_file_in(dir_fd_.get(), "manifest.json", json_text(manifest_, 2) + "\n",
                         dir_ + "/manifest.json");
}

void RunDirSink::update(const std::string& key, nlohmann::json value) {
  manifest_[key] = std::move(value);
  if (auto ok = write_manifest(); !ok) std::cerr << "sonde: error: " << ok.error().message << "\n";
}

void RunDirSink::write(const Engine::Tick& tick) {
  if (failed_) return;
  for (Level l : engine_->levels()) {
    if (!files_[level_index(l)].append(tick.ctx.time_s, tick.ctx.wallclock_s,
                                       tick.rows[level_index(l)])) {
      failed_ = true;
      std::cerr << fmt::format(
          "sonde: error: writing perf_{}.csv in {} failed: {}; no more rows are written, the "
          "program keeps running and the rows already written stay valid\n",
          level_name(l), dir_, std::strerror(errno));
      return;
    }
  }
}

void RunDirSink::finish(const RunOutcome& outcome, const nlohmann::json& summary,
                        std::uint64_t ticks, std::uint64_t ticks_missed) {
  set_manifest_end(manifest_, wallclock_now(), outcome, !failed_, summary, ticks, ticks_missed);
  for (RunCsvFile& f : files_) f.sync_and_close();
  if (auto ok = write_manifest(); !ok) std::cerr << "sonde: error: " << ok.error().message << "\n";
}

}  // namespace sonde
