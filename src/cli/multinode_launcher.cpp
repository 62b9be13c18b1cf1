// The multi-node head's launcher (cli/multinode_launcher.hpp): the agents' levels and argv, srun
// as a child process, its reader thread, and the head's sink.
#include "cli/multinode_launcher.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/clock.hpp"
#include "core/helper_children.hpp"
#include "core/setup.hpp"
#include "core/slurm_job.hpp"
#include "core/spawn.hpp"
#include "core/threads.hpp"
#include "core/trust.hpp"

extern char** environ;

namespace sonde::cli {
namespace {

/// Lines of one stream longer than this are cut (a broken agent must not exhaust memory).
constexpr std::size_t kMaxLine = std::size_t{4} << 20;

}  // namespace

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

}  // namespace sonde::cli
