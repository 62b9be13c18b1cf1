// run / record / stream: one engine, one sampling loop on an absolute monotonic schedule, driven
// by ppoll on a signalfd, the target's pidfd and (stream) stdout.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/engine.hpp"
#include "core/helper_children.hpp"
#include "core/interval_check.hpp"  // HOOK (issue 16): the interval warning
#include "core/summary.hpp"
#include "sinks/csv_run_dir.hpp"
#include "sinks/json_stream.hpp"
#include "sinks/sqlite.hpp"

extern char** environ;

namespace sonde::cli {
namespace {

int pidfd_open(int pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// After the first interrupt, how long the command may take to exit before sonde kills it.
constexpr double kKillAfterS = 30;

int status_code(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

double tv_s(const timeval& tv) {
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
}

// Blocks the signals sonde handles through a signalfd. The original mask is restored in the
// spawned command.
struct Signals {
  sigset_t handled{}, original{};
  int fd = -1;
  Signals() {
    sigemptyset(&handled);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&handled, s);
    ::sigprocmask(SIG_BLOCK, &handled, &original);
    fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
    ::signal(SIGPIPE, SIG_IGN);  // a closed stdout is seen as EPIPE
  }
  ~Signals() {
    if (fd >= 0) ::close(fd);
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
  }
};

}  // namespace

int run_session(const CommonOptions& common, const SessionOptions& so) {
  using Mode = SessionOptions::Mode;
  const bool streaming = so.mode == Mode::stream;
  auto fail_usage = [&](const std::string& msg) {
    print_error(msg);
    if (streaming) JsonStreamSink::error(STDOUT_FILENO, msg);
    return kExitUsage;
  };

  auto cfg = load(common);
  if (!cfg) {
    if (streaming) JsonStreamSink::error(STDOUT_FILENO, "invalid configuration");
    return kExitUsage;
  }
  std::vector<Level> levels;
  if (!common.levels.empty()) {
    auto parsed = parse_levels(common.levels);
    if (!parsed) return fail_usage(parsed.error().message);
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
  const Registry registry = make_registry();
  auto engine_r = Engine::create(*cfg, eo, registry);
  if (!engine_r) {
    if (engine_r.error().code == Errc::config) return fail_usage(engine_r.error().message);
    print_error(engine_r.error().message);
    if (streaming) JsonStreamSink::error(STDOUT_FILENO, engine_r.error().message);
    return kExitFailure;
  }
  Engine& engine = **engine_r;

  // Outputs are created before the command starts: an unwritable --out starts nothing.
  std::unique_ptr<RunDirSink> run_dir;
  std::optional<JsonStreamSink> stream;
  std::unique_ptr<SqliteSink> sqlite;  // --out FILE.sqlite / --format sqlite, instead of run_dir
  nlohmann::json meta;
  meta["command"] = so.command;
  meta["mode"] = so.mode == Mode::run ? "run" : so.mode == Mode::record ? "record" : "stream";
  meta["start_wallclock"] = wallclock_now();
  meta["config_sources"] = cfg->sources;
  if (streaming) {
    stream.emplace(STDOUT_FILENO);
  } else if (common.format == "sqlite" || (common.format.empty() && is_sqlite_path(common.out))) {
    meta["target_pid"] = target_pid;
    auto sink = SqliteSink::create(
        !common.out.empty() ? common.out : default_sqlite_path(cfg->out_dir), engine, meta);
    if (!sink) {
      print_error(sink.error().message);
      return sink.error().code == Errc::config ? kExitUsage : kExitFailure;
    }
    sqlite = std::move(*sink);
  } else {
    const std::string dir =
        !common.out.empty() ? common.out : RunDirSink::default_dir(cfg->out_dir, so.command);
    meta["target_pid"] = target_pid;
    auto sink = RunDirSink::create(dir, engine, meta);
    if (!sink) {
      print_error(sink.error().message);
      return sink.error().code == Errc::config ? kExitUsage : kExitFailure;
    }
    run_dir = std::move(*sink);
  }

  Signals signals;
  pid_t child = -1;
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
    const double spawned_at = boottime_now();
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &signals.original);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    std::vector<char*> argv;
    for (const auto& a : so.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const int err = ::posix_spawnp(&child, argv[0], nullptr, &attr, argv.data(), environ);
    posix_spawnattr_destroy(&attr);
    if (err != 0) {
      print_error(fmt::format("cannot run '{}': {}", so.command[0], std::strerror(err)));
      return err == ENOENT ? 127 : 126;
    }
    engine.set_target_pid(child);
    // sonde started the command: everything it and its descendants do is in scope, from the start.
    engine.scanner().set_count_from(spawned_at);
    if (adopt) engine.scanner().set_adopter(::getpid(), is_helper_child);
    engine.apply_fd_budget();
    target_pid = child;
  }
  if (run_dir && so.mode == Mode::run) {
    run_dir->update("target_pid", child);
    // The first row covers the interval from this baseline (taken just before the command).
    run_dir->update("baseline_time", engine.tick_time());
  }
  if (sqlite && so.mode == Mode::run) sqlite->update("baseline_time", engine.tick_time());
  if (sqlite && so.mode == Mode::run) sqlite->update("target_pid", child);
  const int target_fd = target_pid > 0 && !so.system_only ? pidfd_open(target_pid) : -1;

  if (stream && !stream->ready(engine)) return kExitOk;

  RunStats stats(engine);
  const double interval = engine.interval_s();
  // `sonde run` took its baseline tick before starting the command: the schedule starts there and
  // the first row comes one interval later.
  const bool primed = so.mode == Mode::run;
  const double t0 = primed ? engine.tick_time() : monotonic_now();
  std::uint64_t k = 0, missed = 0;
  bool skip_sample = primed;
  bool stop = false, target_gone = false;
  int wstatus = 0;
  rusage usage{};
  bool reaped = false;

  // sonde may raise its own sampling thread's priority when permitted (never another process's);
  // the command was started before, with the priority sonde was given.
  if (cfg->raise_priority) {
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
    if (run_dir) run_dir->update("priority", prio);
    if (sqlite) sqlite->update("priority", prio);
  } else if (run_dir) {
    run_dir->update("priority", {{"raised", false}, {"why_not", "raise_priority: false"}});
  }
  if (!cfg->raise_priority && sqlite)
    sqlite->update("priority", {{"raised", false}, {"why_not", "raise_priority: false"}});

  double last_tick_s = primed ? t0 : -1;
  auto sample = [&]() {
    const auto& tick = engine.tick();
    last_tick_s = tick.ctx.time_s;
    stats.add(tick);
    if (run_dir) run_dir->write(tick);
    if (sqlite) sqlite->write(tick);
    // The stream's first sample is the first with every rate defined (JUmPER's sanity checks
    // reject nulls): the first tick is only a baseline there.
    if (stream && engine.ticks() > 1 && !stream->write(engine, tick)) stop = true;
    // Orphans of the tree that sonde adopted: reaped once a tick has read them as zombies (their
    // final counters), never before.
    if (adopt) {
      const int self = ::getpid();
      for (const PidSample& p : engine.procs().pids)
        if (p.ppid == self && p.state == 'Z' && p.pid != child && !is_helper_child(p.pid))
          ::waitpid(p.pid, nullptr, WNOHANG);
    }
  };
  // The last sample, when the target has exited: its rates are never taken over less than a
  // quarter of the interval (a 3 ms interval would give impossible rates), so it waits for that
  // much time to pass since the previous tick (at most 2 s; the target's counters no longer
  // change). A shorter final interval is marked in the manifest.
  double final_interval_s = -1;
  auto final_sample = [&]() {
    if (last_tick_s >= 0) {
      const double wait_until = last_tick_s + std::min(interval / 4, 2.0);
      const timespec until = to_timespec(wait_until);
      while (monotonic_now() < wait_until &&
             ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
      }
    }
    const double before = last_tick_s;
    sample();
    if (before >= 0) final_interval_s = last_tick_s - before;
  };
  int interrupts = 0;
  double first_interrupt_s = 0;
  bool killed = false;

  IntervalCheck interval_check(interval);  // HOOK (issue 16): the interval warning
  while (!stop) {
    if (!skip_sample) {
      const double tick_start_s = monotonic_now();
      sample();
      // HOOK (issue 16): warn (once, on stderr) when the node does not sustain the interval.
      if (auto w = interval_check.observe(monotonic_now() - tick_start_s, missed))
        std::cerr << "sonde: warning: " << *w << "\n";
    }
    skip_sample = false;
    if (stop) break;
    if (!target_gone && so.mode != Mode::run && target_pid > 0 && !so.system_only &&
        target_fd < 0 && ::kill(target_pid, 0) != 0 && errno == ESRCH)
      break;
    // Next slot on the absolute schedule; slots that passed while sampling are counted, not
    // invented.
    ++k;
    double next = t0 + static_cast<double>(k) * interval;
    const double now = monotonic_now();
    if (now >= next) {
      const auto due = static_cast<std::uint64_t>(std::floor((now - t0) / interval)) + 1;
      missed += due - k;
      k = due;
      next = t0 + static_cast<double>(k) * interval;
    }
    // A tick that started late leaves less than an interval before the next slot: a slot closer
    // than a quarter of the interval to it is skipped (counted as missed), so that no row's rates
    // are taken over a sliver of time.
    while (last_tick_s >= 0 && next - last_tick_s < interval / 4) {
      ++k;
      ++missed;
      next = t0 + static_cast<double>(k) * interval;
    }
    if (so.duration_s && next - t0 > *so.duration_s + 1e-9) break;

    // Wait for the slot, a signal, the target's exit or a closed stdout.
    while (!stop) {
      pollfd fds[3];
      nfds_t n = 0;
      fds[n++] = {signals.fd, POLLIN, 0};
      const int target_index = target_fd >= 0 ? static_cast<int>(n) : -1;
      if (target_fd >= 0) fds[n++] = {target_fd, POLLIN, 0};
      const int out_index = streaming ? static_cast<int>(n) : -1;
      if (streaming) fds[n++] = {STDOUT_FILENO, 0, 0};
      double wait_s = next - monotonic_now();
      if (interrupts > 0 && !killed)
        wait_s = std::min(wait_s, first_interrupt_s + kKillAfterS - monotonic_now());
      const timespec ts = to_timespec(std::min(wait_s, 86400.0));
      const int r = ::ppoll(fds, n, &ts, nullptr);
      if (r == 0) break;  // the slot has come
      if (r < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents & POLLIN) {
        signalfd_siginfo si{};
        while (::read(signals.fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
          const int sig = static_cast<int>(si.ssi_signo);
          if (sig == SIGCHLD) {
            // Without a pidfd (kernels before 5.3) the command's exit is seen here.
            siginfo_t info{};
            if (so.mode == Mode::run && target_fd < 0 &&
                ::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) ==
                    0 &&
                info.si_pid == child) {
              target_gone = true;
              final_sample();
              stop = true;
            }
            continue;
          }
          if (so.mode == Mode::run) {
            // A signal from the terminal already reached the command (same process group);
            // one sent to sonde alone is passed on. sonde keeps sampling until the command exits.
            // A second interrupt kills the command (SIGKILL), as does a command still running
            // kKillAfterS seconds after the first.
            const bool from_kill =
                si.ssi_code == SI_USER || si.ssi_code == SI_QUEUE || si.ssi_code == SI_TKILL;
            if (static_cast<pid_t>(si.ssi_pid) == child) continue;
            if (++interrupts == 1) {
              first_interrupt_s = monotonic_now();
              if (from_kill) ::kill(child, sig);
            } else if (!killed) {
              std::cerr << fmt::format(
                  "sonde: second interrupt: killing the command (pid {}) with SIGKILL\n", child);
              ::kill(child, SIGKILL);
              killed = true;
            }
          } else {
            stop = true;
          }
        }
      }
      if (target_index >= 0 && (fds[target_index].revents & POLLIN)) {
        // The target exited. While it is a zombie its CPU times (and its reaped children's) are
        // still in /proc: take the last sample before reaping it.
        target_gone = true;
        final_sample();
        stop = true;
      }
      if (interrupts > 0 && !killed && !stop &&
          monotonic_now() - first_interrupt_s >= kKillAfterS) {
        std::cerr << fmt::format(
            "sonde: the command (pid {}) is still running {:.0f} s after the interrupt: killing it "
            "with SIGKILL\n",
            child, kKillAfterS);
        ::kill(child, SIGKILL);
        killed = true;
      }
      if (out_index >= 0 && (fds[out_index].revents & (POLLERR | POLLHUP))) stop = true;
    }
  }
  if (so.mode == Mode::run) {
    while (::wait4(child, &wstatus, 0, &usage) < 0 && errno == EINTR) {
    }
    reaped = true;
  }
  if (target_fd >= 0) ::close(target_fd);

  RunOutcome outcome;
  outcome.command = so.command;
  outcome.wall_s = monotonic_now() - t0;
  if (reaped) {
    outcome.exit_status = status_code(wstatus);
    outcome.user_cpu_s = tv_s(usage.ru_utime);
    outcome.system_cpu_s = tv_s(usage.ru_stime);
  }
  if (run_dir) outcome.run_dir = run_dir->dir();
  if (sqlite) outcome.run_dir = sqlite->location();
  const nlohmann::json summary = summary_json(engine, stats, outcome);
  // A final interval shorter than a quarter of the interval (the wait is capped) is marked.
  if (final_interval_s >= 0 && final_interval_s < interval / 4) {
    const nlohmann::json mark{{"final_interval_s", final_interval_s},
                              {"why", "the target exited shortly after the previous tick"}};
    if (run_dir) run_dir->update("short_final_interval", mark);
    if (sqlite) sqlite->update("short_final_interval", mark);
  }
  if (interval_check.warned()) {  // HOOK (issue 16): the interval warning in the manifest
    if (run_dir) run_dir->update("interval_warning", interval_check.manifest_entry());
    if (sqlite) sqlite->update("interval_warning", interval_check.manifest_entry());
  }
  if (run_dir) {
    if (engine.discover_every() > 1)
      run_dir->update("degraded", {{"since_tick", engine.degraded_since_tick()},
                                   {"discover_every", engine.discover_every()},
                                   {"why", "the /proc scan took more than half the interval"}});
    run_dir->finish(outcome, summary, engine.ticks() - (primed ? 1 : 0), missed);
  }
  if (sqlite) {
    if (engine.discover_every() > 1)
      sqlite->update("degraded", {{"since_tick", engine.degraded_since_tick()},
                                  {"discover_every", engine.discover_every()},
                                  {"why", "the /proc scan took more than half the interval"}});
    sqlite->finish(outcome, summary, engine.ticks() - (primed ? 1 : 0), missed);
  }
  if (!streaming && !common.quiet) std::cerr << summary_text(summary);
  if (!common.summary_json.empty()) {
    if (auto ok = write_file_atomic(common.summary_json, summary.dump(2) + "\n"); !ok)
      print_error(ok.error().message);
  }
  if (run_dir && common.report) write_run_report(run_dir->dir(), common.report_file, common.charts);
  if (sqlite && common.report)
    write_run_report(sqlite->location(), common.report_file, common.charts);
  return outcome.exit_status.value_or(kExitOk);
}

}  // namespace sonde::cli
