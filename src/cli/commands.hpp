#pragma once
// The subcommands. main() only calls run_cli; everything else lives in the library.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collector.hpp"
#include "core/config.hpp"
#include "core/engine.hpp"
#include "core/fs.hpp"
#include "core/level.hpp"
#include "views/report_charts.hpp"

namespace sonde::cli {

/// Options shared by the sampling subcommands.
struct CommonOptions {
  std::string config_file;
  std::optional<double> interval_s;
  std::string levels;  ///< comma-separated, empty: from the configuration
  std::string out;
  bool quiet = false;
  std::string summary_json;
  /// --report [FILE]: write the HTML report at the end (empty file: RUN_DIR/report.html).
  bool report = false;
  std::string report_file;
  std::vector<std::string> charts;  ///< --charts FILE (chart configuration, repeatable)
};

/// Exit statuses of sonde itself (a `run` otherwise exits with its command's status).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;  ///< malformed configuration or flags; nothing was started

/// Loads the layered configuration and applies the flags; prints the error and returns nullopt
/// on bad input.
std::optional<Config> load(const CommonOptions& common);
/// Parses "process,user" (unknown names and duplicates are errors).
Result<std::vector<Level>> parse_levels(const std::string& text);
/// Roots from $SONDE_PROC_ROOT / $SONDE_SYS_ROOT (for tests), else /proc and /sys.
Roots roots_from_env();
void print_error(const std::string& message);
/// The registry of every collector target: built-ins and the plugin factories.
Registry make_registry();

/// Builds the engine as it would run for a program started from this shell (sonde stands in
/// for the target), printing the error. `exit_status` gets 2 for configuration errors, else 1.
std::unique_ptr<Engine> engine_for_shell(const Config& cfg, const Registry& registry,
                                         int& exit_status);

struct SessionOptions {
  enum class Mode { run, record, stream } mode = Mode::run;
  std::vector<std::string> command;  ///< run
  int pid = 0;                       ///< record --pid, stream --target-pid
  bool system_only = false;          ///< record --system
  std::optional<double> duration_s;  ///< record --duration
};
int run_session(const CommonOptions& common, const SessionOptions& session);

int cmd_collectors(const CommonOptions& common, bool timing);
int cmd_config_show(const CommonOptions& common, bool defaults);
int cmd_config_check(const std::string& file);

/// The shipped charts, then $XDG_CONFIG_HOME/sonde/charts.yaml when present, then `files`.
Result<std::vector<ChartRule>> load_chart_rules(const std::vector<std::string>& files);
/// `sonde report`: reads a stored run (read_run) and writes its HTML report to `output`
/// (empty: RUN/report.html for a run directory, else ./report.html). `chart_files` are merged
/// over the shipped charts; `compress`: the data gzip+base64, else plain JSON. Exit 2 for
/// malformed input.
int write_run_report(const std::string& run_spec, const std::string& output,
                     const std::vector<std::string>& chart_files, bool compress = true);

int run_cli(int argc, char** argv);

}  // namespace sonde::cli
