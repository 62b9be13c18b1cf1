#pragma once
// The subcommands. main() only calls run_cli; everything else lives in the library.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/collector.hpp"
#include "core/config.hpp"
#include "core/engine.hpp"
#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/setup.hpp"
#include "views/report_charts.hpp"

namespace CLI {
class App;
}

namespace sonde::cli {

/// Options shared by the sampling subcommands.
struct CommonOptions {
  std::string config_file;
  std::optional<double> interval_s;
  std::string levels;  ///< comma-separated, empty: from the configuration
  std::string out;
  std::string format;  ///< --format: "csv" (run directory) or "sqlite"; empty: from --out
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
/// The exit status for an error that ends a command: kExitUsage for a configuration error
/// (Errc::config), else kExitFailure.
inline int error_exit_status(const Error& e) {
  return e.code == Errc::config ? kExitUsage : kExitFailure;
}

/// Loads the layered configuration and applies the flags; prints the error and returns nullopt
/// on bad input.
std::optional<Config> load(const CommonOptions& common);
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
  int stream_protocol = 2;           ///< stream --protocol: 2 (current) or 1 (JUmPER's older)
  bool slurm = false;      ///< run --slurm: every node of the allocation (multinode_launcher.hpp)
  std::string slurm_job;   ///< record --slurm-job ID
  bool no_cgroup = false;  ///< --no-cgroup: the process and slurm levels from /proc only
};
int run_session(const CommonOptions& common, const SessionOptions& session);
/// `sonde record --slurm-job ID` (src/cli/cmd_record_slurm.cpp).
int run_multinode_record(const CommonOptions& common, const SessionOptions& so);

/// `sonde agent` (src/cli/cmd_agent.cpp): one node of a multi-node run.
struct AgentOptions {
  std::string job;
  std::string node_name;  ///< --node-name (tests, benches): instead of the hostname
  std::optional<double> duration_s;
  /// --end-on-stdin-eof: end (with the end line) when stdin reaches its end: how the head ends
  /// its agents through srun (`--input=all`), which forwards no signal without killing the step.
  bool end_on_stdin_eof = false;
  /// --head HOST:PID: the head's process. On that host the agent leaves it out of the job (it
  /// inherits SLURM_JOB_ID but is sonde, not the job); its children (the command) stay in.
  std::string head;
};
int cmd_agent(const CommonOptions& common, const AgentOptions& agent);

/// `sonde serve`: the Prometheus/OpenMetrics exporter.
struct ServeOptions {
  std::string listen = "127.0.0.1:9850";  ///< HOST:PORT; port 0 picks a free one
  bool per_user = false;
  bool per_job = false;
  int max_series = 100;           ///< label values per owner family before "other"
  std::string tls_cert, tls_key;  ///< HTTPS when both are given
  std::string basic_auth_file;    ///< "user:sha256hex" lines; empty: no authentication
};
int cmd_serve(const CommonOptions& common, const ServeOptions& serve);

int cmd_collectors(const CommonOptions& common, bool timing);

/// sonde runs list|show|export (src/cli/cmd_runs.cpp).
struct RunsOptions {
  enum class Action { list, show, exp } action = Action::list;
  std::string db;  ///< empty: <out_dir>/runs.sqlite
  std::optional<std::int64_t> id;
  std::string format = "csv";  ///< export: csv (a run directory) or json
  std::string out;             ///< export: the directory (csv) or file (json)
  bool json = false;           ///< list/show: JSON instead of text
};
int cmd_runs(const RunsOptions& options);
/// The database `--format sqlite` writes when no --out is given.
std::string default_sqlite_path(const std::string& out_dir);
/// `sonde compare RUN_A RUN_B` (src/cli/cmd_compare.cpp).
struct CompareOptions {
  std::string run_a, run_b;  ///< run directory, a .zip of one, or DB.sqlite[#ID]
  bool json = false;         ///< one JSON document instead of the table
  std::string html;          ///< also write the HTML page there
};
int cmd_compare(const CompareOptions& options);
/// `sonde mark NAME` (src/cli/cmd_mark.cpp).
struct MarkOptions {
  std::vector<std::string> name;  ///< the phase's name (words joined by spaces)
  bool quiet = false;             ///< outside `sonde run`: no error, exit 0
};
int cmd_mark(const MarkOptions& options);
int cmd_config_show(const CommonOptions& common, bool defaults);
int cmd_config_check(const std::string& file);

/// `sonde status` (gpustat = false) and `sonde gpustat`; argv[0] is the command's name.
int cmd_status(int argc, char** argv, bool gpustat);
/// `sonde top` (src/cli/cmd_top.cpp); argv[0] is "top".
int cmd_top(int argc, char** argv);
/// The shipped charts, then $XDG_CONFIG_HOME/sonde/charts.yaml when present, then `files`.
Result<std::vector<ChartRule>> load_chart_rules(const std::vector<std::string>& files);
/// `sonde report`: reads a stored run (read_run) and writes its HTML report to `output`
/// (empty: RUN/report.html for a run directory, else ./report.html). `chart_files` are merged
/// over the shipped charts; `compress`: the data gzip+base64, else plain JSON. Exit 2 for
/// malformed input. `node` (a multi-node run): the report of that node alone; "" or
/// "aggregate"/"<Aggregated>": the whole run with its node selector.
int write_run_report(const std::string& run_spec, const std::string& output,
                     const std::vector<std::string>& chart_files, bool compress = true,
                     const std::string& node = "");

/// `sonde report --prometheus` and `sonde jobstats` (src/cli/cmd_prometheus.cpp).
struct PrometheusOptions {
  std::string url;                 ///< --prometheus
  std::string user;                ///< --prometheus-user
  std::string password_file;       ///< --prometheus-password-file (else $SONDE_PROMETHEUS_PASSWORD)
  std::string token_file;          ///< --prometheus-token-file (else $SONDE_PROMETHEUS_TOKEN)
  std::string ca_file;             ///< --prometheus-ca
  double timeout_s = 60;           ///< --prometheus-timeout (each request, whole)
  double command_timeout_s = 600;  ///< --prometheus-command-timeout (all requests together)
  double max_body_mib = 256;       ///< --prometheus-max-mib (one answer, decompressed)
  std::string job;                 ///< --job / jobstats' ID
  std::string from, to;            ///< --from, --to as given
  std::optional<double> lookback_s;
  bool costs = false;  ///< --costs: requests, bytes, time on stderr
};
/// Adds the Prometheus options to a subcommand (`required`: --prometheus must be given).
void add_prometheus_options(CLI::App* app, PrometheusOptions& o, bool required);
/// `sonde report --prometheus URL --job ID`: the job's multi-node run directory (into `run_dir`,
/// else a temporary one) rendered as the HTML report at `output` (default report-ID.html).
int cmd_report_prometheus(const PrometheusOptions& o, const std::string& output,
                          const std::vector<std::string>& chart_files, bool compress,
                          const std::string& run_dir, double step);
/// `sonde jobstats ID --prometheus URL [--json | --admin-comment [--max-bytes N]]`.
struct JobstatsOptions {
  bool json = false;
  bool admin_comment = false;  ///< SONDE1:base64(gzip(JSON)), for Slurm's AdminComment
  std::size_t max_bytes = 60000;
};
int cmd_jobstats(const PrometheusOptions& o, const JobstatsOptions& js);

int run_cli(int argc, char** argv);

}  // namespace sonde::cli
