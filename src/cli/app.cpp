#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/arg_check.hpp"
#include "cli/commands.hpp"
#include "cli/completion.hpp"
#include "plugins/plugins.hpp"

namespace sonde::cli {

void print_error(const std::string& message) {
  std::cerr << "sonde: error: " << message << "\n";
}

Registry make_registry() {
  Registry registry;
  register_builtin_collectors(registry);
  plugins::register_plugin_factories(registry);
  return registry;
}

std::unique_ptr<Engine> engine_for_shell(const Config& cfg, const Registry& registry,
                                         int& exit_status) {
  const Roots roots = roots_from_env();
  auto target = discover_target(roots, ::getpid());
  if (!target) {
    print_error(target.error().message);
    exit_status = kExitFailure;
    return nullptr;
  }
  target->pid = ::getpid();
  EngineOptions eo;
  eo.roots = roots;
  eo.target = *target;
  auto engine = Engine::create(cfg, eo, registry);
  if (!engine) {
    print_error(engine.error().message);
    exit_status = error_exit_status(engine.error());
    return nullptr;
  }
  return std::move(*engine);
}

std::optional<Config> load(const CommonOptions& common) {
  ConfigSearch search;
  search.explicit_file = common.config_file;
  auto cfg = load_config(search);
  if (!cfg) {
    print_error(cfg.error().message);
    return std::nullopt;
  }
  // Plugins in the plugin directories that the configuration does not name yet; a refused or
  // broken one is reported and left out.
  plugins::discover_plugins(*cfg, plugins::plugin_dirs(), [](const std::string& m) {
    std::cerr << "sonde: warning: " << m << "\n";
  });
  if (common.interval_s) {
    // Also checked when parsed (in_range); this keeps callers that fill CommonOptions honest.
    const NumericRange& range = numeric_range("interval");
    if (!(*common.interval_s >= range.min && *common.interval_s <= range.max)) {
      print_error(
          fmt::format("--interval: {}, got {}", range_expectation(range), *common.interval_s));
      return std::nullopt;
    }
    cfg->interval_s = *common.interval_s;
  }
  if (!common.out.empty()) cfg->out_dir = common.out;
  return std::move(*cfg);
}

namespace {
/// A finite number within the range the settings table gives `name` (inf, nan, 1e308 refused).
CLI::Validator in_range(const char* name, bool integer = false) {
  const NumericRange& range = numeric_range(name);
  return CLI::Validator(
      [&range, integer](std::string& text) -> std::string {
        auto v = parse_in_range(range, text, integer);
        return v ? std::string() : v.error().message;
      },
      fmt::format("{}..{}", range.min, range.max), std::string("in_range ") + name);
}

void add_common(CLI::App* app, CommonOptions& o, bool outputs) {
  app->add_option("--config", o.config_file, "configuration file, merged last");
  app->add_option("--interval", o.interval_s, "sampling interval in seconds")
      ->check(in_range("interval"));
  app->add_option("--levels", o.levels, "comma-separated levels: process,user,slurm,system");
  if (outputs) {
    app->add_option("--out", o.out,
                    "run directory (default: a new one under ./sonde-runs/), or a SQLite "
                    "database shared by many runs (a name ending in .sqlite, .sqlite3 or .db)");
    app->add_option("--format", o.format,
                    "csv: a run directory; sqlite: a database (--out FILE, default "
                    "./sonde-runs/runs.sqlite)")
        ->check(CLI::IsMember({"csv", "sqlite"}));
    app->add_flag("--quiet", o.quiet, "print no summary");
    app->add_option("--summary-json", o.summary_json,
                    "also write the summary as JSON to this file");
    // A flag that takes a value only as --report=FILE: `--report -- CMD` must not eat CMD.
    app->add_flag("--report{-}", o.report_file,
                  "write the HTML report at the end (--report=FILE; default: RUN_DIR/report.html)");
    // One file per --charts (repeatable): a greedy list would swallow `-- CMD`.
    app->add_option("--charts", o.charts, "chart configuration for --report (repeatable)")
        ->allow_extra_args(false);
  }
}
}  // namespace

int run_cli(int argc, char** argv) {
  // `sonde status|gpustat ...`, and sonde run through a link named `gpustat`: a parser of their
  // own, to which the status plugins add options (src/cli/cmd_status.cpp).
  if (argc >= 1 &&
      std::string_view(argv[0]).substr(std::string_view(argv[0]).rfind('/') + 1) == "gpustat")
    return cmd_status(argc, argv, true);
  if (argc >= 2 &&
      (std::string_view(argv[1]) == "status" || std::string_view(argv[1]) == "gpustat"))
    return cmd_status(argc - 1, argv + 1, std::string_view(argv[1]) == "gpustat");
  // `sonde top ...`: the status plugins add options too (src/cli/cmd_top.cpp).
  if (argc >= 2 && std::string_view(argv[1]) == "top") return cmd_top(argc - 1, argv + 1);
  CLI::App app{"sonde: a fast, pluggable performance monitor for Linux nodes"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("sonde ") + SONDE_VERSION);
  CommonOptions common;
  SessionOptions session;

  auto* run = app.add_subcommand("run", "run a command and record what it used");
  add_common(run, common, true);
  run->add_option("command", session.command, "the command and its arguments (after --)")
      ->required();
  run->add_flag("--no-cgroup", session.no_cgroup,
                "do not make a cgroup for the command, nor read the job's (the process and slurm "
                "levels then come from /proc only; docs/accuracy.md)");

  auto* record = app.add_subcommand("record", "record a running process, or the node");
  add_common(record, common, true);
  auto* pid_opt =
      record->add_option("--pid", session.pid, "process to record (with its descendants)")
          ->check(in_range("--pid", true));
  auto* sys_opt = record->add_flag("--system", session.system_only, "record the node only");
  record->add_flag("--no-cgroup", session.no_cgroup,
                   "the slurm level from /proc only, not from the job's cgroup (docs/accuracy.md)");
  pid_opt->excludes(sys_opt);
  record->add_option("--duration", session.duration_s, "stop after this many seconds")
      ->check(in_range("--duration"));
  auto* job_opt = record->add_option(
      "--slurm-job", session.slurm_job,
      "record every node of this running Slurm job (from a login node; docs/multinode.md)");
  job_opt->excludes(pid_opt)->excludes(sys_opt);
  run->add_flag("--slurm", session.slurm,
                "inside a Slurm allocation: also record every node of it (agents started with "
                "srun; docs/multinode.md)");

  AgentOptions agent_opts;
  auto* agent = app.add_subcommand(
      "agent", "one node of a multi-node run: JSON lines on stdout (started by run --slurm)");
  agent->add_option("--config", common.config_file, "configuration file, merged last");
  agent->add_option("--interval", common.interval_s, "sampling interval in seconds")
      ->check(in_range("interval"));
  agent->add_option("--levels", common.levels, "comma-separated levels: slurm,system (default)");
  agent->add_option("--job", agent_opts.job, "the Slurm job id")->required();
  agent->add_option("--duration", agent_opts.duration_s, "stop after this many seconds")
      ->check(in_range("--duration"));
  agent->add_flag("--end-on-stdin-eof", agent_opts.end_on_stdin_eof,
                  "end when stdin reaches its end (how the head ends its agents)");
  agent
      ->add_option("--head", agent_opts.head,
                   "HOST:PID of the head, left out of the job on its host (set by the head)")
      ->group("");
  // Tests and benches: several agents on one machine, each a node of its own name.
  agent->add_option("--node-name", agent_opts.node_name, "node name instead of the hostname")
      ->group("");

  auto* stream =
      app.add_subcommand("stream", "JSON lines on stdout (JUmPER's native-collector protocol)");
  add_common(stream, common, false);
  stream
      ->add_option("--target-pid", session.pid, "process to monitor (default: the parent process)")
      ->check(in_range("--pid", true));
  // JUmPER's older protocol (src/sinks/json_stream_v1.hpp) for its multinode/node-layer branches.
  std::string stream_protocol = "v2";
  stream
      ->add_option("--protocol", stream_protocol,
                   "v2 (default: JUmPER's current protocol) or v1 (JUmPER's multinode and "
                   "node-layer branches)")
      ->check(CLI::IsMember({"v1", "v2", "1", "2"}));

  ServeOptions serve_opts;
  auto* serve = app.add_subcommand("serve", "Prometheus/OpenMetrics exporter of the node");
  serve->add_option("--config", common.config_file, "configuration file, merged last");
  serve->add_option("--interval", common.interval_s, "sampling interval in seconds")
      ->check(in_range("interval"));
  serve->add_option("--listen", serve_opts.listen,
                    "HOST:PORT to listen on (default 127.0.0.1:9850; port 0: any free port)");
  serve->add_flag("--per-user", serve_opts.per_user, "CPU, memory and processes per user");
  serve->add_flag("--per-job", serve_opts.per_job,
                  "CPU, memory, I/O, GPUs and processes per Slurm job");
  serve
      ->add_option("--max-series", serve_opts.max_series,
                   "label values per user/job family before the rest is summed as \"other\" "
                   "(default 100)")
      ->check(in_range("--max-series", true));
  serve->add_option("--tls-cert", serve_opts.tls_cert,
                    "serve HTTPS with this PEM certificate (chain); needs --tls-key");
  serve->add_option("--tls-key", serve_opts.tls_key,
                    "the certificate's PEM private key (not readable by others)");
  serve->add_option("--basic-auth-file", serve_opts.basic_auth_file,
                    "require HTTP basic authentication: a file of USER:HASH lines (bcrypt)");

  bool timing = false;
  auto* collectors =
      app.add_subcommand("collectors", "list the configured collectors and their columns");
  collectors->add_option("--config", common.config_file, "configuration file, merged last");
  collectors->add_flag("--timing", timing, "measure the cost per tick of each collector");

  auto* config = app.add_subcommand("config", "show or check the configuration");
  config->require_subcommand(1);
  bool defaults = false;
  auto* show = config->add_subcommand("show", "print the merged configuration as YAML");
  show->add_option("--config", common.config_file, "configuration file, merged last");
  show->add_flag("--defaults", defaults, "print the built-in defaults only");
  std::string check_file;
  auto* check = config->add_subcommand("check", "check a configuration file (exit 2 if malformed)");
  check->add_option("file", check_file, "the file")->required();

  // Listed for --help; run_cli hands them to cmd_status before parsing.
  app.add_subcommand("status", "GPUs, their processes, host CPU and memory, now (-i: watch)");
  app.add_subcommand("gpustat", "gpustat-compatible GPU view (flags and --json of gpustat)");
  app.add_subcommand("top", "live view of the node: CPUs, memory, GPUs, every process (--once)");
  RunsOptions runs_options;
  auto* runs =
      app.add_subcommand("runs", "list stored runs; show and export the runs in a SQLite database");
  runs->require_subcommand(1);
  auto* runs_list = runs->add_subcommand("list", "one line per run (id, start, duration, ...)");
  runs_list->add_option(
      "db", runs_options.db,
      "database, or a directory: its run directories and runs.sqlite (default: ./sonde-runs/)");
  runs_list->add_flag("--json", runs_options.json, "print JSON");
  auto* runs_show = runs->add_subcommand("show", "a run's summary and manifest");
  runs_show->add_option("db", runs_options.db, "database, or DB#ID")->required();
  runs_show->add_option("id", runs_options.id, "run id (default: the latest run)");
  runs_show->add_flag("--json", runs_options.json, "print one JSON document");
  auto* runs_export =
      runs->add_subcommand("export", "write a run as a run directory (CSV) or as JSON");
  runs_export->add_option("db", runs_options.db, "database, or DB#ID")->required();
  runs_export->add_option("id", runs_options.id, "run id (default: the latest run)");
  runs_export->add_option("--format", runs_options.format, "csv (a run directory) or json")
      ->check(CLI::IsMember({"csv", "json"}));
  runs_export->add_option("-o,--out", runs_options.out,
                          "directory (csv; default: DBNAME-ID) or file (json; default: stdout)");

  std::string report_run, report_out;
  std::vector<std::string> report_charts;
  auto* report = app.add_subcommand("report", "write the HTML report of a stored run");
  report->add_option("run", report_run, "run directory, a .zip of one, or DB.sqlite[#ID]");
  // --out as in run and runs export; -o/--output kept.
  report->add_option("--out,-o,--output", report_out,
                     "HTML file (default: RUN/report.html for a run directory)");
  report
      ->add_option("--charts", report_charts,
                   "chart configuration merged over the shipped charts (repeatable)")
      ->allow_extra_args(false);
  bool report_plain = false;
  report->add_flag("--uncompressed", report_plain,
                   "embed the data as plain JSON (larger) instead of gzip + base64");
  std::string report_node;
  report->add_option("--node", report_node,
                     "multi-node run: the report of one node (NAME, or aggregate)");
  // A Slurm job from Prometheus instead of a stored run (src/cli/cmd_prometheus.cpp).
  PrometheusOptions prom;
  std::string prom_run_dir;
  double prom_step = 0;
  add_prometheus_options(report, prom, false);
  report->add_option("--job", prom.job, "with --prometheus: the Slurm job id");
  report->add_option("--run-dir", prom_run_dir,
                     "with --prometheus: keep the job's run directory there (new directory)");
  report->add_option("--step", prom_step,
                     "with --prometheus: query step in seconds (default: "
                     "at most 11,000 points per series)");
  CompareOptions compare_options;
  auto* compare = app.add_subcommand(
      "compare", "two stored runs side by side: wall, CPU, memory, I/O, GPU, energy, tags");
  compare->add_option("run_a", compare_options.run_a, "run A: directory, .zip, DB.sqlite[#ID]")
      ->required();
  compare->add_option("run_b", compare_options.run_b, "run B: directory, .zip, DB.sqlite[#ID]")
      ->required();
  compare->add_flag("--json", compare_options.json, "print one JSON document");
  compare->add_option("--html", compare_options.html,
                      "also write an HTML page with the table and both runs' charts overlaid");
  MarkOptions mark_options;
  auto* mark = app.add_subcommand(
      "mark",
      "under `sonde run`: the program's next phase begins now (shown in the summary and "
      "the report)");
  mark->add_option("name", mark_options.name, "the phase's name")->required();
  mark->add_flag("-q,--quiet", mark_options.quiet,
                 "outside `sonde run` ($SONDE_MARKS not set): say nothing and exit 0");
  JobstatsOptions jobstats_opts;
  PrometheusOptions jobstats_prom;
  auto* jobstats =
      app.add_subcommand("jobstats", "efficiency of a Slurm job from Prometheus (like jobstats)");
  jobstats->add_option("job", jobstats_prom.job, "Slurm job id")->required();
  add_prometheus_options(jobstats, jobstats_prom, true);
  jobstats->add_flag("--json", jobstats_opts.json, "JSON instead of the table");
  jobstats->add_flag("--admin-comment", jobstats_opts.admin_comment,
                     "one line SONDE1:base64(gzip(JSON)) for Slurm's AdminComment");
  jobstats->add_option("--max-bytes", jobstats_opts.max_bytes,
                       "--admin-comment: longest line (default 60000); details are dropped "
                       "to fit");

  std::string host_file;
  auto* host = app.add_subcommand("plugin-host",
                                  "serve a native plugin over the plugin protocol "
                                  "(what isolate: true runs)");
  host->group("");  // internal: hidden from --help
  host->add_option("file", host_file, "plugin library")->required();

  std::string completion_shell;
  auto* completion = app.add_subcommand("completion", "print a shell completion script");
  completion->add_option("shell", completion_shell, "bash, zsh or fish")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));

  // Each word checked before CLI11 sees it, so that an error names the word that is wrong.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (auto bad = check_words(app, args)) {
    print_error(*bad);
    return kExitUsage;
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes a vector last word first
    app.parse(args);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(describe_parse_error(app, e));
    return kExitUsage;
  }

  if (*completion) {
    std::cout << *completion_script(app, completion_shell);
    return 0;
  }

  if (*report && !prom.url.empty()) {
    if (!report_run.empty() || prom.job.empty()) {
      print_error("report --prometheus: give --job ID and no run");
      return kExitUsage;
    }
    return cmd_report_prometheus(prom, report_out, report_charts, !report_plain, prom_run_dir,
                                 prom_step);
  }
  if (*report) {
    if (report_run.empty() || !prom.job.empty() || !prom_run_dir.empty()) {
      print_error("report: give a stored run, or --prometheus URL --job ID");
      return kExitUsage;
    }
    return write_run_report(report_run, report_out, report_charts, !report_plain, report_node);
  }
  if (*jobstats) return cmd_jobstats(jobstats_prom, jobstats_opts);
  if (*compare) return cmd_compare(compare_options);
  if (*mark) return cmd_mark(mark_options);
  for (auto* sub : {run, record})
    if (*sub && sub->get_option("--report")->count() > 0) common.report = true;
  if (common.report_file == "-") common.report_file.clear();
  if ((*run || *record) && !common.charts.empty() && !common.report) {
    print_error("--charts: only with --report");
    return kExitUsage;
  }
  if (common.report) {
    // A malformed chart file is found before the program starts, not after it ran.
    if (auto rules = load_chart_rules(common.charts); !rules) {
      print_error(rules.error().message);
      return kExitUsage;
    }
  }
  if (*run) {
    session.mode = SessionOptions::Mode::run;
    return run_session(common, session);
  }
  if (*record) {
    if (session.pid <= 0 && !session.system_only && session.slurm_job.empty()) {
      print_error("record: give --pid PID, --system or --slurm-job ID");
      return kExitUsage;
    }
    session.mode = SessionOptions::Mode::record;
    return run_session(common, session);
  }
  if (*stream) {
    session.stream_protocol = stream_protocol == "v1" || stream_protocol == "1" ? 1 : 2;
    session.mode = SessionOptions::Mode::stream;
    return run_session(common, session);
  }
  if (*agent) return cmd_agent(common, agent_opts);
  if (*serve) return cmd_serve(common, serve_opts);
  if (*collectors) return cmd_collectors(common, timing);
  if (*runs) {
    runs_options.action = *runs_list   ? RunsOptions::Action::list
                          : *runs_show ? RunsOptions::Action::show
                                       : RunsOptions::Action::exp;
    return cmd_runs(runs_options);
  }
  if (*host) return plugins::run_plugin_host(host_file);
  if (*show) return cmd_config_show(common, defaults);
  if (*check) return cmd_config_check(check_file);
  return kExitUsage;
}

}  // namespace sonde::cli
