// The multi-node head's process side: the allocation, the launcher and its reader thread, and
// `sonde record --slurm-job` (`sonde run --slurm` is in session.cpp).
#include "cli/multinode.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/helper_children.hpp"
#include "core/json_text.hpp"
#include "core/sampler.hpp"
#include "core/slurm_job.hpp"
#include "core/spawn.hpp"
#include "core/threads.hpp"
#include "core/trust.hpp"
#include "sinks/csv_run_dir.hpp"
#include "sinks/multinode_csv.hpp"
#include "sinks/multinode_sqlite.hpp"
#include "sinks/sqlite.hpp"

extern char** environ;

namespace sonde::cli {
namespace {

/// Lines of one stream longer than this are cut (a broken agent must not exhaust memory).
constexpr std::size_t kMaxLine = std::size_t{4} << 20;

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// `name` as execvp would find it (a name with '/' as is), or "".
std::string find_program(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  // Under AT_SECURE the invoking user's PATH is not searched (kSecurePath is).
  return search_program(name);
}

/// How long a Slurm client command (squeue, scontrol) may take: slurmctld that does not answer
/// makes them wait for minutes, and the head must go on sampling (and end) without them.
/// $SONDE_SLURM_COMMAND_TIMEOUT (seconds, (0, 3600]) changes it; 10 s by default.
double slurm_command_timeout() {
  static const double t = [] {
    const char* v = std::getenv("SONDE_SLURM_COMMAND_TIMEOUT");
    char* end = nullptr;
    const double d = v ? std::strtod(v, &end) : 0;
    return v && end != v && *end == '\0' && d > 0 && d <= 3600 ? d : 10.0;
  }();
  return t;
}

/// Runs a Slurm client command and captures its output (a few KiB expected), within
/// `timeout_s`. Found as find_program finds it, not by posix_spawnp's own PATH search, which
/// AT_SECURE does not restrict.
Captured capture(const std::vector<std::string>& argv, double timeout_s = slurm_command_timeout()) {
  return run_captured(argv, find_program(argv[0]), timeout_s);
}

std::string first_line(const std::string& s) {
  std::string l = s.substr(0, s.find('\n'));
  return l.size() > 300 ? l.substr(0, 300) + "…" : l;
}

std::vector<std::string> expand_hostnames(const std::string& nodelist) {
  std::vector<std::string> out;
  if (nodelist.empty() || find_program("scontrol").empty()) return out;
  Captured c = capture({"scontrol", "show", "hostnames", nodelist});
  if (c.status != 0) return out;
  std::stringstream ss(c.out);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string user_name(uid_t uid) {
  if (passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

}  // namespace

std::variant<SlurmAllocation, int> allocation_from_environment() {
  SlurmAllocation a;
  a.job = getenv_str("SLURM_JOB_ID");
  if (a.job.empty()) {
    print_error(
        "run --slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set): run sonde in an "
        "sbatch or salloc job, or use `sonde record --slurm-job ID` from a login node; nothing "
        "was started");
    return kExitUsage;
  }
  if (!is_plain_job_id(a.job)) {
    print_error(fmt::format(
        "run --slurm: SLURM_JOB_ID is '{}', expected a job id (digits); nothing was started",
        a.job));
    return kExitUsage;
  }
  std::string n = getenv_str("SLURM_JOB_NUM_NODES");
  if (n.empty()) n = getenv_str("SLURM_NNODES");
  char* end = nullptr;
  const long nodes = n.empty() ? 0 : std::strtol(n.c_str(), &end, 10);
  if (n.empty() || *end != '\0' || nodes < 1 || nodes > 1'000'000) {
    print_error(fmt::format(
        "run --slurm: SLURM_JOB_NUM_NODES (or SLURM_NNODES) is '{}', expected the number of nodes "
        "of the allocation; nothing was started",
        n));
    return kExitUsage;
  }
  a.nodes = static_cast<int>(nodes);
  a.hostnames = expand_hostnames(getenv_str("SLURM_JOB_NODELIST"));
  if (static_cast<int>(a.hostnames.size()) != a.nodes) a.hostnames.clear();
  a.user = user_name(::getuid());
  return a;
}

std::variant<SlurmAllocation, int> allocation_of_job(const std::string& job) {
  if (!is_plain_job_id(job)) {
    print_error(fmt::format("record --slurm-job: '{}' is not a job id (digits expected)", job));
    return kExitUsage;
  }
  for (const char* tool : {"squeue", "scontrol"})
    if (find_program(tool).empty()) {
      print_error(fmt::format(
          "record --slurm-job: {} was not found on PATH (Slurm's client commands are needed); "
          "nothing was started",
          tool));
      return kExitUsage;
    }
  // State first and the node list last: a pending job has no nodes, and the list is empty.
  Captured q = capture({"squeue", "-j", job, "-h", "-o", "%T|%u|%N"});
  if (q.status == Captured::kTimedOut) {
    print_error(fmt::format("record --slurm-job {}: {} (is slurmctld up?); nothing was started",
                            job, q.err));
    return kExitFailure;
  }
  std::string nodelist, user, state;
  {
    const std::string line = q.out.substr(0, q.out.find('\n'));  // a node list may be long
    const std::size_t a = line.find('|'), b = a == std::string::npos ? a : line.find('|', a + 1);
    if (b != std::string::npos) {
      state = line.substr(0, a);
      user = line.substr(a + 1, b - a - 1);
      nodelist = line.substr(b + 1);
      while (!nodelist.empty() && std::isspace(static_cast<unsigned char>(nodelist.back())))
        nodelist.pop_back();
    }
  }
  if (q.status != 0 || state.empty()) {
    print_error(
        fmt::format("record --slurm-job {}: no such job, or it has ended{}; nothing was started",
                    job, q.err.empty() ? std::string() : " (squeue: " + first_line(q.err) + ")"));
    return kExitUsage;
  }
  if (state != "RUNNING") {
    print_error(fmt::format(
        "record --slurm-job {}: the job is {}, not RUNNING; nothing was started", job, state));
    return kExitUsage;
  }
  const std::string me = user_name(::getuid());
  if (::getuid() != 0 && user != me) {
    print_error(fmt::format(
        "record --slurm-job {}: the job is {}'s, not yours ({}); only root may record another "
        "user's job; nothing was started",
        job, user, me));
    return kExitUsage;
  }
  SlurmAllocation a;
  a.job = job;
  a.user = user;
  a.hostnames = expand_hostnames(nodelist);
  if (a.hostnames.empty()) {
    print_error(fmt::format(
        "record --slurm-job {}: `scontrol show hostnames {}` gave no node; nothing was started",
        job, nodelist));
    return kExitUsage;
  }
  a.nodes = static_cast<int>(a.hostnames.size());
  return a;
}

std::variant<std::string, int> find_launcher(const char* what) {
  const char* srun = program_env("SONDE_SRUN");  // ignored under AT_SECURE
  const std::string name = srun ? srun : "srun";
  std::string path = find_program(name);
  if (path.empty()) {
    print_error(fmt::format(
        "{}: the launcher '{}' was not found{} (sonde starts its agents with srun; SONDE_SRUN "
        "names another launcher); nothing was started",
        what, name, name.find('/') == std::string::npos ? " on PATH" : ""));
    return kExitUsage;
  }
  return path;
}

std::variant<LevelSplit, int> split_levels(const std::string& levels, bool record) {
  LevelSplit s;
  if (!levels.empty()) {
    auto parsed = parse_levels(levels);
    if (!parsed) {
      print_error(parsed.error().message);
      return kExitUsage;
    }
    for (Level l : *parsed) {
      if (l == Level::slurm || l == Level::system)
        s.agents.push_back(l);
      else if (record) {
        print_error(fmt::format(
            "record --slurm-job: level '{}' is not recorded on the job's nodes; give slurm "
            "and/or system",
            level_name(l)));
        return kExitUsage;
      } else {
        s.local.push_back(l);
      }
    }
  }
  if (s.agents.empty()) s.agents = {Level::slurm, Level::system};
  if (s.local.empty() && !record) s.local = {Level::process};
  return s;
}

// "HOST:PID" of this head: the agent on its host leaves it out of the job (agent --head).
std::string head_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}", host, ::getpid());
}

std::vector<std::string> launcher_argv(const std::string& program, const SlurmAllocation& alloc,
                                       double interval_s, const std::vector<Level>& levels,
                                       const std::string& config_file) {
  std::string self = "sonde";
  if (auto exe = read_link("/proc/self/exe")) self = *exe;
  std::string lv;
  for (Level l : levels) lv += (lv.empty() ? "" : ",") + std::string(level_name(l));
  std::vector<std::string> argv = {
      program, "--overlap", "--jobid=" + alloc.job, fmt::format("--nodes={}", alloc.nodes),
      fmt::format("--ntasks={}", alloc.nodes), "--ntasks-per-node=1",
      // A lost node must not end the other nodes' agents (without
      // it srun kills the whole step on a node failure).
      "--no-kill", "--unbuffered", "--label",
      // The head ends the agents by closing srun's stdin, which goes to every task (a signal to
      // srun kills the step instead).
      "--input=all", self, "agent", "--end-on-stdin-eof", "--job", alloc.job, "--interval",
      fmt::format("{}", interval_s), "--levels", lv, "--head", head_identity()};
  if (!config_file.empty()) {
    argv.push_back("--config");
    argv.push_back(config_file);
  }
  return argv;
}

// ---- The launcher ------------------------------------------------------------------------------

AgentLauncher::~AgentLauncher() {
  stop(0.5);
}

bool AgentLauncher::start(const std::vector<std::string>& argv, const sigset_t& mask,
                          const std::string& marker_job) {
  int out[2], err[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) {
    print_error(fmt::format("cannot start the agents: pipe: {}", std::strerror(errno)));
    return false;
  }
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with(std::string(kAgentMarkerEnv) + "=")) env.emplace_back(*e);
  env.push_back(std::string(kAgentMarkerEnv) + "=" + marker_job);
  SpawnOptions spawn;
  spawn.program = argv[0];
  spawn.env = &env;
  spawn.stdin_fd = in[0];
  spawn.stdout_fd = out[1];
  spawn.stderr_fd = err[1];
  spawn.own_process_group = true;
  spawn.sigmask = &mask;
  pid_t pid = -1;
  const int rc = spawn_program(argv, spawn, pid);
  ::close(out[1]);
  ::close(err[1]);
  ::close(in[0]);
  stdin_.reset(in[1]);
  if (rc != 0) {
    stdin_.reset();
    ::close(out[0]);
    ::close(err[0]);
    print_error(fmt::format("cannot start the agents with {}: {}", argv[0], std::strerror(rc)));
    return false;
  }
  note_helper_child(pid);
  pid_ = pid;
  reader_ = start_thread([this, o = out[0], e = err[0]] {
    // The thread's entry: nothing may end the process from here (an exception would). A reader
    // that fails ends srun and the launcher, and the head ends the run with what it has.
    try {
      read_loop(o, e);
    } catch (const std::exception& ex) {
      reader_failed(ex.what());
    } catch (...) {
      reader_failed("an unknown exception");
    }
  });
  return true;
}

void AgentLauncher::read_loop(int out_fd, int err_fd) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string pending[2];
  std::vector<char> buf(1 << 16);
  int open = 2;
  std::uint64_t err_lines = 0;
  std::uint64_t failed_lines = 0;
  auto deliver = [&](int i, std::string_view line) {
    if (i == 0) {
      // One line the head cannot take (out of memory, a bug) is that line lost, not the run.
      try {
        head_.on_line(line, wallclock_now(), monotonic_now());
      } catch (const std::exception& ex) {
        if (failed_lines++ == 0)
          std::cerr << fmt::format("sonde: warning: an agent line was dropped: {}\n", ex.what());
      }
    } else {
      head_.on_launcher_stderr(line, monotonic_now());
      // srun's own messages and the agents' warnings, labeled by task.
      if (err_lines++ < 200) std::cerr << "sonde: agents: " << line << "\n";
    }
  };
  while (open > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!pending[i].empty()) deliver(i, pending[i]);
        pending[i].clear();
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
        continue;
      }
      std::string& p = pending[i];
      p.append(buf.data(), static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (std::size_t nl; (nl = p.find('\n', start)) != std::string::npos; start = nl + 1)
        deliver(i, std::string_view(p).substr(start, nl - start));
      p.erase(0, start);
      if (p.size() > kMaxLine) {
        deliver(i, p);  // cut: the assembler keeps it as a fragment or drops it
        p.clear();
      }
    }
  }
  int ws = 0;
  while (::waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
  }
  forget_helper_child(pid_);
  if (err_lines > 200)
    std::cerr << fmt::format("sonde: agents: {} more lines on stderr not shown\n", err_lines - 200);
  const std::string why = WIFEXITED(ws) ? fmt::format("it exited with status {}", WEXITSTATUS(ws))
                          : WIFSIGNALED(ws)
                              ? fmt::format("it was killed by signal {}", WTERMSIG(ws))
                              : std::string("it ended");
  exited_ = true;
  head_.on_launcher_exit(why);
}

void AgentLauncher::reader_failed(const std::string& what) {
  print_error(
      fmt::format("the reader of the agents' output failed ({}); srun is stopped and the "
                  "run ends with what was received",
                  what));
  ::kill(pid_, SIGKILL);
  int ws = 0;
  while (::waitpid(pid_, &ws, 0) < 0 && errno == EINTR) {
  }
  forget_helper_child(pid_);
  exited_ = true;
  head_.on_launcher_exit("the head's reader failed");
}

void AgentLauncher::stop(double grace_s) {
  if (pid_ <= 0) return;
  // Closing srun's stdin ends every agent with its end line; then SIGTERM (srun kills the step),
  // then SIGKILL.
  stdin_.reset();
  auto wait_exit = [&](double s) {
    const double until = monotonic_now() + s;
    while (!exited_ && monotonic_now() < until) ::usleep(20'000);
    return exited_.load();
  };
  if (!wait_exit(grace_s)) {
    ::kill(-pid_, SIGTERM);
    if (!wait_exit(5)) ::kill(-pid_, SIGKILL);
  }
  if (reader_.joinable()) reader_.join();
  pid_ = -1;
}

bool wait_for_agents(multinode::Head& head, int signal_fd, double timeout_s) {
  const double until = monotonic_now() + timeout_s;
  while (monotonic_now() < until) {
    head.poll(monotonic_now());
    if (head.all_settled() || head.launcher_ended()) break;
    if (signal_fd >= 0) {
      pollfd p{signal_fd, POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) return false;
    } else {
      ::usleep(50'000);
    }
  }
  head.poll(monotonic_now());
  return true;
}

namespace {
class HeadSink final : public Sink {
 public:
  explicit HeadSink(multinode::Head& head) : head_(head) {}
  std::string name() const override { return "the multi-node aggregate"; }
  SinkStatus write(const Engine::Tick& tick) override {
    head_.tick(tick.ctx.time_s, tick.ctx.wallclock_s);
    return SinkStatus::ok;
  }

 private:
  multinode::Head& head_;
};
}  // namespace

std::unique_ptr<Sink> make_head_sink(multinode::Head& head) {
  return std::make_unique<HeadSink>(head);
}

// ---- record --slurm-job ------------------------------------------------------------------------

int run_multinode_record(const CommonOptions& common, const SessionOptions& so) {
  auto cfg = load(common);
  if (!cfg) return kExitUsage;
  auto split = split_levels(common.levels, true);
  if (auto* s = std::get_if<int>(&split)) return *s;
  const std::vector<Level> levels = std::get<LevelSplit>(split).agents;
  const bool to_sqlite =
      common.format == "sqlite" || (common.format.empty() && is_sqlite_path(common.out));
  auto alloc_r = allocation_of_job(so.slurm_job);
  if (auto* s = std::get_if<int>(&alloc_r)) return *s;
  const SlurmAllocation alloc = std::get<SlurmAllocation>(alloc_r);
  auto launcher_r = find_launcher("record --slurm-job");
  if (auto* s = std::get_if<int>(&launcher_r)) return *s;
  const std::vector<std::string> argv = launcher_argv(std::get<std::string>(launcher_r), alloc,
                                                      cfg->interval_s, levels, common.config_file);

  const std::string dir = !common.out.empty() ? common.out
                          : to_sqlite
                              ? default_sqlite_path(cfg->out_dir)
                              : RunDirSink::default_dir(cfg->out_dir, {"slurm-job-" + alloc.job});
  utsname u{};
  ::uname(&u);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json manifest = {{"command", nlohmann::json::array()},
                             {"mode", "record"},
                             {"start_wallclock", wallclock_now()},
                             {"config_sources", cfg->sources},
                             {"target_pid", nullptr},
                             {"sonde_version", SONDE_VERSION},
                             {"host", host},
                             {"kernel", u.release},
                             {"interval", cfg->interval_s},
                             {"levels", nlohmann::json::array()},
                             {"columns_by_level", nlohmann::json::object()},
                             {"files", nlohmann::json::object()},
                             {"end_wallclock", nullptr},
                             {"exit_status", nullptr},
                             {"complete", false},
                             {"ticks", 0}};
  std::unique_ptr<multinode::Store> store;
  multinode::SqliteStore* sqlite = nullptr;
  if (to_sqlite) {
    auto st = multinode::make_sqlite_store(dir, manifest);
    if (!st) {
      print_error(st.error().message);
      return st.error().code == Errc::config ? kExitUsage : kExitFailure;
    }
    sqlite = st->get();
    store = std::move(*st);
  } else {
    auto st = multinode::make_csv_store(dir, {}, manifest);
    if (!st) {
      print_error(st.error().message);
      return st.error().code == Errc::config ? kExitUsage : kExitFailure;
    }
    store = std::move(*st);
  }
  multinode::HeadOptions ho;
  ho.job = alloc.job;
  ho.expected_nodes = alloc.nodes;
  ho.hostnames = alloc.hostnames;
  ho.interval_s = cfg->interval_s;
  ho.levels = levels;
  ho.launcher = argv;
  ho.confirm_agent_ends = true;
  multinode::Head head(ho, *store);

  SignalGuard signals(/*with_sigchld=*/false);
  AgentLauncher launcher(head);
  if (!launcher.start(argv, signals.original(), alloc.job)) return kExitFailure;
  bool interrupted = !wait_for_agents(head, signals.fd(), ho.start_grace_s);
  if (head.ready_nodes() == 0 && !interrupted) {
    launcher.stop();
    head.finish(monotonic_now());
    print_error(fmt::format("record --slurm-job {}: no agent started ({}); see the lines above",
                            alloc.job,
                            head.launcher_ended() ? "the launcher ended" : "none said ready"));
    return kExitFailure;
  }

  const double interval = cfg->interval_s;
  const double t0 = monotonic_now();
  std::uint64_t ticks = 0, missed = 0;
  std::uint64_t k = 1;
  while (!interrupted) {
    double slot = t0 + static_cast<double>(k) * interval;
    if (so.duration_s && slot - t0 > *so.duration_s + 1e-9) break;
    const double wait = slot - monotonic_now();
    pollfd p{signals.fd(), POLLIN, 0};
    const int r = ::poll(&p, 1, wait > 0 ? static_cast<int>(std::ceil(wait * 1000)) : 0);
    if (r > 0) {
      signalfd_siginfo si{};
      // The signal is taken off the signalfd; which one does not matter (the loop ends).
      [[maybe_unused]] const ssize_t n = ::read(signals.fd(), &si, sizeof si);
      break;
    }
    const double now = monotonic_now();
    if (now < slot) continue;
    head.tick(now, wallclock_now());
    ++ticks;
    // Skip the slots that passed while this one ran late (counted, never invented).
    const auto next = static_cast<std::uint64_t>(std::floor((monotonic_now() - t0) / interval)) + 1;
    if (next > k + 1) missed += next - k - 1;
    k = std::max(k + 1, next);
    // Agents that end: the job's end (they are complete, the recording ends), or a fault.
    if (head.agents_ending()) {
      const Captured q = capture({"squeue", "-j", alloc.job, "-h", "-o", "%T"});
      if (q.status == Captured::kTimedOut) {
        // Unknown: ask again at the next tick (srun ends with the job, which ends the loop).
        std::cerr << fmt::format("sonde: warning: {}\n", q.err);
        continue;
      }
      const bool running = q.status == 0 && q.out.starts_with("RUNNING");
      head.confirm_ends(running, monotonic_now());
      if (!running) {
        std::cerr << fmt::format("sonde: job {} ended\n", alloc.job);
        break;
      }
    }
    if (head.launcher_ended()) break;  // no agent left
  }
  launcher.stop();
  head.finish(monotonic_now());
  const nlohmann::json summary = head.summary_json();
  std::string where = "run directory " + dir;
  if (sqlite) {
    // The run's row: its end, `complete` (unless a write failed), its summary.
    RunOutcome outcome;
    outcome.run_dir = sqlite->sink().location();
    sqlite->sink().finish(outcome, summary, ticks, missed);
    where = "run " + sqlite->sink().location();
  } else {
    store->set_manifest("ticks", ticks);
    store->set_manifest("ticks_missed", missed);
    store->set_manifest("summary", summary);
    store->set_manifest("end_wallclock", wallclock_now());
    store->set_manifest("complete", !store->failed());
  }
  if (!common.quiet) std::cerr << multinode::Head::summary_text(summary) << "  " << where << "\n";
  if (!common.summary_json.empty()) {
    if (auto ok = write_file_atomic(common.summary_json, json_text(summary, 2) + "\n"); !ok)
      print_error(ok.error().message);
  }
  return kExitOk;
}

}  // namespace sonde::cli
