// run / record / stream: one engine, its outputs behind the Sink interface (src/sinks/sink.hpp),
// sampled by the Sampler (src/core/sampler.hpp). `sonde run` also starts the command, is its
// subreaper and reaps it.
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/multinode_launcher.hpp"
#include "cli/slurm_queries.hpp"
#include "core/cgroup.hpp"
#include "core/engine.hpp"
#include "core/helper_children.hpp"
#include "core/json_text.hpp"
#include "core/live_summary.hpp"
#include "core/marks.hpp"
#include "core/phases.hpp"
#include "core/sampler.hpp"
#include "core/spawn.hpp"
#include "sinks/csv_run_dir.hpp"
#include "sinks/format.hpp"
#include "sinks/json_stream.hpp"
#include "sinks/multinode_csv.hpp"
#include "sinks/multinode_sqlite.hpp"
#include "sinks/session_sinks.hpp"
#include "sinks/sink.hpp"
#include "sinks/sqlite.hpp"

extern char** environ;

namespace sonde::cli {
namespace {

using Mode = SessionOptions::Mode;

int status_code(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

double tv_s(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
}

/// The command line of a running process (its /proc/<pid>/cmdline), empty for a kernel thread
/// or one that is gone: what `record --pid` names in the manifest, the summary and the report.
std::vector<std::string> process_command(const std::string& proc_root, int pid) {
  std::vector<std::string> out;
  auto text = read_file(fmt::format("{}/{}/cmdline", proc_root, pid));
  if (!text) return out;
  std::size_t start = 0;
  while (start < text->size()) {
    std::size_t end = text->find('\0', start);
    if (end == std::string::npos) end = text->size();
    out.push_back(text->substr(start, end - start));
    start = end + 1;
  }
  return out;
}

/// The stored output (a run directory or a SQLite database) or the JSON stream, created before
/// the command starts: an unwritable --out starts nothing. Returns an exit status on failure.
/// `target_command`: the command line of the process `record --pid` watches (else empty).
std::optional<int> add_output(const CommonOptions& common, const SessionOptions& so,
                              const Config& cfg, const Engine& engine, int target_pid,
                              const std::vector<std::string>& target_command, SinkSet& sinks,
                              RunDirSink** run_dir = nullptr, SqliteSink** sqlite = nullptr) {
  if (so.mode == Mode::stream) {
    sinks.add(make_json_stream_sink(STDOUT_FILENO, engine, so.stream_protocol));
    return std::nullopt;
  }
  nlohmann::json meta;
  meta["command"] = so.command;
  meta["mode"] = so.mode == Mode::run ? "run" : "record";
  meta["start_wallclock"] = wallclock_now();
  meta["config_sources"] = cfg.sources;
  meta["target_pid"] = target_pid;
  if (!target_command.empty()) meta["target_command"] = target_command;
  if (so.slurm) meta["mode"] = "run --slurm";
  if (common.format == "sqlite" || (common.format.empty() && is_sqlite_path(common.out))) {
    auto sink = SqliteSink::create(
        !common.out.empty() ? common.out : default_sqlite_path(cfg.out_dir), engine, meta);
    if (!sink) {
      print_error(sink.error().message);
      return error_exit_status(sink.error());
    }
    if (sqlite) *sqlite = sink->get();
    sinks.add(make_sqlite_sink(std::move(*sink)));
    return std::nullopt;
  }
  const std::string dir =
      !common.out.empty()
          ? common.out
          : RunDirSink::default_dir(cfg.out_dir, so.command.empty() ? target_command : so.command);
  auto sink = RunDirSink::create(dir, engine, meta);
  if (!sink) {
    print_error(sink.error().message);
    return error_exit_status(sink.error());
  }
  if (run_dir) *run_dir = sink->get();
  sinks.add(make_run_dir_sink(std::move(*sink)));
  return std::nullopt;
}

/// The marks file of a `sonde run`: `dir`/marks.txt, or (no run directory: SQLite output) a
/// private file in $TMPDIR. Made empty and new (never an existing file or link); the command
/// runs as sonde's user and appends to it.
Result<std::string> make_marks_file(const std::string& dir) {
  std::string path;
  int fd = -1;
  if (!dir.empty()) {
    path = dir + "/marks.txt";
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  } else {
    const char* tmp = std::getenv("TMPDIR");
    path =
        std::string(tmp != nullptr && *tmp == '/' && ::getauxval(AT_SECURE) == 0 ? tmp : "/tmp") +
        "/sonde-marks-XXXXXX";
    fd = ::mkostemp(path.data(), O_CLOEXEC);
  }
  if (fd < 0)
    return make_error(Errc::io,
                      fmt::format("cannot make the marks file {}: {}", path, std::strerror(errno)));
  ::close(fd);
  return path;
}

/// Starts the command with sonde's original signal mask and default dispositions. Returns its pid
/// or an exit status (127: not found, 126: not runnable) as a negative number.
/// `why` receives the error.
pid_t spawn_command(const std::vector<std::string>& command, const SignalGuard& signals,
                    const cgroup::RunGroup* group, const std::string& marks_path,
                    std::string& why) {
  SpawnOptions o;  // program "": found in the user's $PATH, as their shell would
  o.sigmask = &signals.original();
  // sonde's environment, and where the command writes its marks (core/marks.hpp).
  std::vector<std::string> env;
  if (!marks_path.empty()) {
    const std::string prefix = std::string(kMarksEnv) + "=";
    for (char** e = environ; *e != nullptr; ++e)
      if (std::string_view(*e).rfind(prefix, 0) != 0) env.emplace_back(*e);
    env.push_back(prefix + marks_path);
    o.env = &env;
  }
  if (group) o.cgroup_procs = group->procs_fds();
  pid_t child = -1;
  const int err = spawn_program(command, o, child);
  if (err != 0) {
    why = fmt::format("cannot run '{}': {}", command[0], std::strerror(err));
    print_error(why);
    return err == ENOENT ? -127 : -126;
  }
  return child;
}

/// sonde may raise its own sampling thread's priority when permitted (never another process's);
/// the command was started before, with the priority sonde was given. What happened goes into the
/// manifest.
nlohmann::json raise_priority(bool wanted_by_config) {
  if (!wanted_by_config) return {{"raised", false}, {"why_not", "raise_priority: false"}};
  errno = 0;
  const int before = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()));
  const int wanted = std::min(before, -10);
  nlohmann::json prio{{"nice_before", before}, {"nice", before}, {"raised", false}};
  if (wanted < before) {
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), wanted) == 0) {
      prio["nice"] = wanted;
      prio["raised"] = true;
    } else {
      prio["why_not"] = std::strerror(errno);
    }
  }
  return prio;
}

}  // namespace

int run_session(const CommonOptions& common, const SessionOptions& so) {
  if (so.mode == Mode::record && !so.slurm_job.empty()) return run_multinode_record(common, so);
  const bool streaming = so.mode == Mode::stream;
  // run --slurm: the allocation, the launcher and the levels are checked before anything starts.
  const bool multinode = so.mode == Mode::run && so.slurm;
  SlurmAllocation alloc;
  std::string launcher_program;
  LevelSplit split;
  if (multinode) {
    auto a = allocation_from_environment();
    if (auto* st = std::get_if<int>(&a)) return *st;
    alloc = std::get<SlurmAllocation>(a);
    auto l = find_launcher("run --slurm");
    if (auto* st = std::get_if<int>(&l)) return *st;
    launcher_program = std::get<std::string>(l);
    auto sp = split_levels(common.levels, false);
    if (auto* st = std::get_if<int>(&sp)) return *st;
    split = std::get<LevelSplit>(sp);
  }
  auto fail = [&](const std::string& msg, int status) {
    print_error(msg);
    if (streaming) JsonStreamSink::error(STDOUT_FILENO, msg);
    return status;
  };

  auto cfg = load(common);
  if (!cfg) {
    if (streaming) JsonStreamSink::error(STDOUT_FILENO, "invalid configuration");
    return kExitUsage;
  }
  std::vector<Level> levels;
  if (multinode) {
    levels = split.local;
  } else if (!common.levels.empty()) {
    auto parsed = parse_levels(common.levels);
    if (!parsed) return fail(parsed.error().message, kExitUsage);
    levels = *parsed;
  }
  if (so.system_only) levels = {Level::system};

  const Roots roots = roots_from_env();
  // The target: the command sonde starts (it inherits sonde's affinity, cgroup, limits and
  // environment, so sonde itself stands in for it until it exists), a given pid, or none.
  int target_pid = 0;
  if (so.mode == Mode::run) target_pid = ::getpid();
  if (so.mode == Mode::record && !so.system_only) target_pid = so.pid;
  if (so.mode == Mode::stream) target_pid = so.pid > 0 ? so.pid : ::getppid();
  TargetInfo target;
  if (target_pid > 0) {
    auto t = discover_target(roots, target_pid);
    if (!t) {
      print_error(fmt::format("cannot watch process {}: {}", target_pid, t.error().message));
      if (streaming) JsonStreamSink::error(STDOUT_FILENO, t.error().message);
      return kExitFailure;
    }
    target = *t;
    target.pid = target_pid;
  } else {
    target.uid = ::getuid();
  }

  EngineOptions eo;
  eo.roots = roots;
  eo.target = target;
  eo.levels = levels;
  // Signals are blocked (and received through the guard's signalfd) before the engine starts any
  // thread: a SIGTERM from scancel, systemd or a time limit always ends the run with its summary.
  // Threads started later block them too (core/threads.hpp).
  SignalGuard signals(/*with_sigchld=*/true);
  const Registry registry = make_registry();
  auto engine_r = Engine::create(*cfg, eo, registry);
  if (!engine_r) return fail(engine_r.error().message, error_exit_status(engine_r.error()));
  Engine& engine = **engine_r;
  engine.scanner().set_job_cgroup_allowed(!so.no_cgroup);

  RunStats stats(engine);
  SinkSet sinks;
  sinks.add(make_stats_sink(stats));
  // Which of the run's processes used what (the summary's table): the process level's members.
  std::unique_ptr<ProcessTable> processes;
  if (engine.active(Level::process) && so.mode != Mode::stream) {
    processes = std::make_unique<ProcessTable>(roots.proc);
    sinks.add(make_process_table_sink(*processes, Level::process));
  }
  RunDirSink* run_dir = nullptr;
  SqliteSink* sqlite = nullptr;
  const std::vector<std::string> target_command = so.mode == Mode::record && target_pid > 0
                                                      ? process_command(roots.proc, target_pid)
                                                      : std::vector<std::string>();
  if (auto status = add_output(common, so, *cfg, engine, target_pid, target_command, sinks,
                               &run_dir, &sqlite))
    return *status;

  // Marks (sonde run): the command appends its phases' names to a file it finds in $SONDE_MARKS,
  // marks.txt of the run directory (kept with the run), else a private file removed at the end.
  Phases phases;
  std::unique_ptr<MarkReader> marks;
  std::string marks_temp;
  if (so.mode == Mode::run) {
    auto made = make_marks_file(run_dir ? run_dir->dir() : std::string());
    if (!made) return fail(made.error().message, kExitFailure);
    if (!run_dir) marks_temp = *made;
    marks = std::make_unique<MarkReader>(*made);
    sinks.add(make_phase_sink(phases, *marks, engine,
                              engine.active(Level::process) ? Level::process : Level::system));
  }

  // run --slurm: the agents' rows go to nodes/<node>/ of the run directory (or with their node's
  // name in the database), the aggregate on this run's grid (a sink after the run's own).
  std::unique_ptr<multinode::Store> mn_store;
  std::unique_ptr<multinode::Head> head;
  std::unique_ptr<AgentLauncher> launcher;
  std::vector<std::string> launcher_args;
  if (multinode && (run_dir || sqlite)) {
    nlohmann::json base;
    base["levels"] = levels_json(engine);
    base["columns_by_level"] = columns_by_level_json(engine);
    nlohmann::json files = nlohmann::json::object();
    for (Level l : engine.levels())
      files[std::string(level_name(l))] = fmt::format("perf_{}.csv", level_name(l));
    if (run_dir) {
      base["files"] = files;
      auto st = multinode::make_csv_store(
          run_dir->dir(),
          [run_dir](const std::string& k, nlohmann::json v) { run_dir->update(k, v); }, base);
      if (!st) return fail(st.error().message, kExitFailure);
      mn_store = std::move(*st);
    } else {
      mn_store = std::make_unique<multinode::SqliteStore>(*sqlite, base);
    }
    launcher_args = launcher_argv(launcher_program, alloc, engine.interval_s(), split.agents,
                                  common.config_file);
    multinode::HeadOptions ho;
    ho.job = alloc.job;
    ho.expected_nodes = alloc.nodes;
    ho.hostnames = alloc.hostnames;
    ho.interval_s = engine.interval_s();
    ho.levels = split.agents;
    ho.launcher = launcher_args;
    ho.head_host = engine.node_info().hostname;
    head = std::make_unique<multinode::Head>(ho, *mn_store);
    sinks.add(make_head_sink(*head));
  }

  if (head) {
    // The agents first, so that they see the command from its start.
    launcher = std::make_unique<AgentLauncher>(*head);
    if (!launcher->start(launcher_args, signals.original(), alloc.job)) return kExitFailure;
    if (!wait_for_agents(*head, signals.fd(), 30) || head->ready_nodes() == 0) {
      launcher->stop();
      head->finish(monotonic_now());
      print_error(fmt::format(
          "run --slurm: {}; the command was not started",
          head->ready_nodes() == 0 ? "no agent started (see the lines above)" : "interrupted"));
      return kExitFailure;
    }
  }
  RunStart start;
  pid_t child = -1;
  std::optional<cgroup::RunGroup> run_group;
  std::string no_cgroup_why;
  // `sonde run` is the child subreaper of its command: a process of the tree whose parent exits
  // before sonde saw it (a daemonized child) is re-parented to sonde instead of init, stays in the
  // tree, and is reaped by sonde after its last read. Only when a level follows the tree.
  const bool adopt =
      so.mode == Mode::run && std::any_of(engine.levels().begin(), engine.levels().end(),
                                          [](Level l) { return l != Level::system; });
  if (so.mode == Mode::run) {
    if (adopt) ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // The first tick, before the command exists: the baseline of every level, so that the first
    // row written (one interval later) holds everything the command did from its start.
    engine.defer_fd_budget();
    engine.tick();
    // The process level from a cgroup made for the command, where sonde may make one (root, or a
    // delegated v2 subtree): the kernel's exact account of everything the command runs.
    const bool process_level = std::find(engine.levels().begin(), engine.levels().end(),
                                         Level::process) != engine.levels().end();
    cgroup::Reading baseline;
    if (process_level && !so.no_cgroup) {
      auto made = cgroup::RunGroup::create(roots, fmt::format("sonde-run-{}", ::getpid()));
      if (made) {
        run_group = std::move(*made);
        baseline = cgroup::read(run_group->group());
      } else {
        no_cgroup_why = made.error().message;
      }
    } else if (process_level) {
      no_cgroup_why = "--no-cgroup";
    }
    const double spawned_at = boottime_now();
    std::string why;
    child = spawn_command(so.command, signals, run_group ? &*run_group : nullptr,
                          marks ? marks->path() : std::string(), why);
    if (child < 0) {
      // The command never ran: the output ends as a finished run without rows that says why
      // (its exit status, a note), not as one cut off (`sonde report` warns on it).
      RunEnd end;
      end.outcome.command = so.command;
      end.outcome.exit_status = -child;
      end.outcome.run_dir = sinks.location();
      end.notes.push_back("the command was not started: " + why);
      sinks.end(end);
      return -child;
    }
    if (run_group)
      engine.scanner().set_level_cgroup(Level::process, run_group->group(), std::move(baseline));
    start.level_sources = level_sources_json(engine, no_cgroup_why);
    engine.set_target_pid(child);
    // sonde started the command: everything it and its descendants do is in scope, from the start.
    engine.scanner().set_count_from(spawned_at);
    if (adopt) engine.scanner().set_adopter(::getpid(), is_helper_child);
    engine.apply_fd_budget();
    target_pid = child;
    start.target_pid = child;
    start.baseline_time = engine.tick_time();
  }

  SamplerOptions sampling;
  sampling.on_signal = so.mode == Mode::run ? SamplerOptions::OnSignal::forward_to_child
                                            : SamplerOptions::OnSignal::stop;
  sampling.target_pid = so.system_only ? 0 : target_pid;
  sampling.target_is_child = so.mode == Mode::run;
  sampling.reap_adopted = adopt;
  sampling.hangup_fd = streaming ? STDOUT_FILENO : -1;
  sampling.duration_s = so.duration_s;
  // `sonde run` took its baseline tick before starting the command: the schedule starts there and
  // the first row comes one interval later.
  sampling.primed = so.mode == Mode::run;
  Sampler sampler(engine, sampling, &signals);

  start.priority = raise_priority(cfg->raise_priority);
  if (!sinks.begin(start)) return kExitOk;  // the stream's reader is gone
  sampler.run(sinks);

  RunOutcome outcome;
  if (so.mode == Mode::run) {
    // The final scan reaped the command when it read it as a zombie; else it is reaped here.
    if (const auto& reaped = engine.scanner().target_reaped()) {
      outcome.exit_status = status_code(reaped->wstatus);
      outcome.user_cpu_s = reaped->user_cpu_s;
      outcome.system_cpu_s = reaped->system_cpu_s;
      outcome.max_rss_bytes = reaped->max_rss_bytes;
    } else {
      int wstatus = 0;
      rusage usage{};
      while (::wait4(child, &wstatus, 0, &usage) < 0 && errno == EINTR) {
      }
      outcome.exit_status = status_code(wstatus);
      outcome.user_cpu_s = tv_s(usage.ru_utime);
      outcome.system_cpu_s = tv_s(usage.ru_stime);
      outcome.max_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
    }
  }
  if (head) {
    // The agents end with the command; the nodes' statuses and offsets go into the manifest
    // before the run directory's end.
    launcher->stop();
    head->finish(monotonic_now());
  }
  // The command's cgroup goes once the last tick read it (a process it left behind returns to
  // sonde's own cgroup).
  // The level cgroups' tails (what they ran after the last row); the command's cgroup then goes
  // (a process it left behind returns to sonde's own cgroup).
  engine.scanner().read_cgroup_tail();
  if (run_group) {
    if (const auto peak = cgroup::read(run_group->group()).memory_peak_bytes)
      outcome.cgroup_memory_peak_bytes = static_cast<double>(*peak);
    if (const std::string problem = run_group->remove(); !problem.empty())
      std::cerr << "sonde: warning: " << problem << "\n";
  }
  for (Level l : engine.levels())
    if (const std::string& left = engine.scanner().level_cgroup_left(l); !left.empty())
      std::cerr << "sonde: warning: " << left << ": the " << level_name(l)
                << " level's CPU comes from /proc from then on\n";
  nlohmann::json final_sources = level_sources_json(engine, no_cgroup_why);
  outcome.command = so.command;
  if (!target_command.empty()) {
    outcome.target_command = target_command;
    outcome.target_pid = target_pid;
  }
  outcome.wall_s = monotonic_now() - sampler.start_time();
  outcome.run_dir = sinks.location();
  if (processes) outcome.processes = processes->json();
  if (marks) {
    // Marks written just before the command ended, and the end of the last phase.
    phases.add_marks(marks->poll());
    phases.finish(wallclock_now());
    outcome.phases = phases.json();
    if (marks->skipped() + marks->dropped() > 0)
      std::cerr << fmt::format(
          "sonde: warning: {} line(s) of the marks file {} were not marks (\"<unix time> <name>\", "
          "at most {} bytes), {} mark(s) past the first {} were dropped\n",
          marks->skipped(), marks->path(), kMaxMarkLine, marks->dropped(), kMaxMarks);
    // The run directory keeps its marks file only when the program marked something.
    struct stat st {};
    if (!marks_temp.empty() ||
        (::lstat(marks->path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0))
      ::unlink(marks->path().c_str());
  }

  RunEnd end;
  end.summary = summary_json(engine, stats, outcome);
  // run --slurm: the job's tags (node-imbalance, computed live from the nodes' rows) are the
  // run's too, so that the stored summary (`sonde runs show`) says what the report finds.
  if (head) {
    const nlohmann::json job = head->summary_json();
    if (job.contains("tags") && job["tags"].is_array() && end.summary["tags"].is_array())
      for (const auto& t : job["tags"]) end.summary["tags"].push_back(t);
  }
  end.outcome = outcome;
  end.level_sources = std::move(final_sources);
  end.notes = engine.notes();
  end.ticks = engine.ticks() - (sampling.primed ? 1 : 0);
  end.ticks_missed = sampler.missed();
  const double interval = engine.interval_s();
  if (auto f = sampler.final_interval_s(); f && *f < interval / 4) end.short_final_interval_s = f;
  if (engine.discover_every() > 1)
    end.degraded = {{"since_tick", engine.degraded_since_tick()},
                    {"discover_every", engine.discover_every()},
                    {"why", "the /proc scan took more than half the interval"}};
  end.interval_warning = sampler.interval_warning();
  sinks.end(end);

  if (!streaming && !common.quiet) std::cerr << summary_text(end.summary);
  if (head && !common.quiet) std::cerr << multinode::Head::summary_text(head->summary_json());
  if (!common.summary_json.empty()) {
    if (auto ok = write_file_atomic(common.summary_json, json_text(end.summary, 2) + "\n"); !ok)
      print_error(ok.error().message);
  }
  if (common.report && !outcome.run_dir.empty())
    write_run_report(outcome.run_dir, common.report_file, common.charts);
  return outcome.exit_status.value_or(kExitOk);
}

}  // namespace sonde::cli
