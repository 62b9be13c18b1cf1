#pragma once
// The run directory: manifest.json and perf_<level>.csv. Each tick's row is written with one
// write() per file, so after a crash or SIGKILL every complete line is valid; the manifest says
// `complete: false` until the run ends cleanly.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/fs.hpp"
#include "core/live_summary.hpp"
#include "sinks/run_csv.hpp"

namespace sonde {

class RunDirSink {
 public:
  /// Creates `dir` (parents too). Refuses a directory that already holds a run, a link, and a
  /// directory owned by another user than the effective one or root (Errc::config). Every file
  /// is created new in it (O_EXCL|O_NOFOLLOW through the directory's fd), so an entry another
  /// user planted (a link to a file of root's) is an error, never written through.
  static Result<std::unique_ptr<RunDirSink>> create(const std::string& dir, const Engine& engine,
                                                    nlohmann::json meta);
  ~RunDirSink();
  RunDirSink(const RunDirSink&) = delete;
  RunDirSink& operator=(const RunDirSink&) = delete;

  /// Appends one row per level. A write error (disk full) is reported once; later rows are
  /// dropped and the run goes on.
  void write(const Engine::Tick& tick);
  /// Rewrites the manifest with the end of the run (`complete: true`).
  void finish(const RunOutcome& outcome, const nlohmann::json& summary, std::uint64_t ticks,
              std::uint64_t ticks_missed);
  /// Sets a manifest key and rewrites the manifest.
  void update(const std::string& key, nlohmann::json value);
  const std::string& dir() const { return dir_; }
  /// A write failed (reported once): later rows are dropped.
  bool failed() const { return failed_; }
  /// Chooses a new directory under `parent` named after the time and the command.
  static std::string default_dir(const std::string& parent,
                                 const std::vector<std::string>& command);

 private:
  RunDirSink() = default;
  Result<void> write_manifest();

  const Engine* engine_ = nullptr;
  std::string dir_;
  nlohmann::json manifest_;
  UniqueFd dir_fd_;
  std::array<RunCsvFile, kNumLevels> files_;
  bool failed_ = false;
};

}  // namespace sonde
