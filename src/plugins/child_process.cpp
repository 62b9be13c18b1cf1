// The child process of a process plugin (child_process.hpp): fork/exec with pipes, bounded
// reads and writes, stderr passed on, and the stop/kill/reap sequence.
#include "plugins/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/helper_children.hpp"
#include "core/trust.hpp"

extern char** environ;

namespace sonde::plugins {
namespace {

constexpr double kShutdownGraceS = 1.0;  ///< after {"op":"shutdown"}, before SIGTERM
constexpr double kTermGraceS = 1.0;      ///< after SIGTERM, before SIGKILL
constexpr int kPipeBytes = 1 << 20;      ///< requested size of the request pipe

std::string describe_status(int wstatus) {
  if (WIFEXITED(wstatus)) return fmt::format("exited with status {}", WEXITSTATUS(wstatus));
  if (WIFSIGNALED(wstatus))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(wstatus),
                       ::strsignal(WTERMSIG(wstatus)));
  return "stopped";
}

// The executable to check and run: argv0 itself when it has a slash, else the first match in
// PATH (kSecurePath under AT_SECURE), resolved here, before fork, so that the child only makes
// async-signal-safe calls.
Result<std::string> resolve_executable(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos) return argv0;
  if (std::string found = search_program(argv0); !found.empty()) return found;
  return make_error(Errc::unavailable, fmt::format("cannot run '{}': not found in PATH", argv0));
}

// Where the child's descriptors go: 0-2 the pipes, then these (fixed, so that the script's
// /dev/fd/N name is known before fork).
constexpr int kReportFd = 3;
constexpr int kExeFd = 4;
constexpr int kScriptFd = 5;
constexpr int kFirstFree = 6;

}  // namespace

Result<std::unique_ptr<ChildProcess>> ChildProcess::start(const SpawnSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty())
    return make_error(Errc::unavailable, "empty command");
  auto found = resolve_executable(spec.argv[0]);
  if (!found) return found.error();
  // The program runs with sonde's privileges: every component of its path, the file and a
  // script's interpreter must pass the trust rules (docs/security.md), at every start and
  // restart, and the descriptor that was checked is what is executed (argv[0] stays as given).
  auto exe = trusted_program(*found);
  if (!exe) return exe.error();

  // Everything the child needs is prepared before fork: it may only make async-signal-safe calls.
  // A script runs as its checked interpreter with the checked script as /dev/fd/kScriptFd.
  std::vector<std::string> args;
  if (exe->script) {
    args = exe->interpreter;
    args.push_back(fmt::format("/dev/fd/{}", kScriptFd));
    args.insert(args.end(), spec.argv.begin() + 1, spec.argv.end());
  }
  std::vector<char*> argv;
  for (const auto& a : exe->script ? args : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int exe_fd = exe->exe.get();
  const int script_fd = exe->script ? exe->script.get() : -1;
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos &&
        (spec.env.count(std::string(kv.substr(0, eq))) || kv.substr(0, eq) == "SONDE_SCRIPT"))
      continue;
    env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  // A script sees itself as /dev/fd/N ($0): where it was checked is said here.
  if (exe->script) env_strings.push_back("SONDE_SCRIPT=" + exe->real);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  // [0]: the read end, [1]: the write end; all closed on every return path.
  UniqueFd in[2], out[2], err[2], status[2];
  for (UniqueFd* p : {in, out, err, status}) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      return make_error(Errc::unavailable,
                        fmt::format("cannot create pipes: {}", std::strerror(errno)));
    p[0].reset(fds[0]);
    p[1].reset(fds[1]);
  }
  // Requests with a large pid context fit in one write (best effort).
  (void)::fcntl(in[1].get(), F_SETPIPE_SZ, kPipeBytes);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0)
    return make_error(Errc::unavailable, fmt::format("cannot fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // The child: its own process group (a Ctrl-C meant for the monitored program does not reach
    // it; sonde stops it in order), killed when sonde dies, default signal handling.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    // Everything is first moved above the fixed places (sonde may run with 0, 1 or 2 closed, so
    // that a pipe end could sit where another one must go), then put in place: dup2 clears
    // close-on-exec (the pipes, the script), dup3 keeps it (the status pipe, which exec closes,
    // and the program's descriptor).
    const int moved[6] = {::fcntl(in[0].get(), F_DUPFD_CLOEXEC, kFirstFree),
                          ::fcntl(out[1].get(), F_DUPFD_CLOEXEC, kFirstFree),
                          ::fcntl(err[1].get(), F_DUPFD_CLOEXEC, kFirstFree),
                          ::fcntl(status[1].get(), F_DUPFD_CLOEXEC, kFirstFree),
                          ::fcntl(exe_fd, F_DUPFD_CLOEXEC, kFirstFree),
                          script_fd < 0 ? -1 : ::fcntl(script_fd, F_DUPFD_CLOEXEC, kFirstFree)};
    const int report = kReportFd;
    if (moved[3] < 0 || ::dup3(moved[3], kReportFd, O_CLOEXEC) < 0) ::_exit(127);
    for (int fd = 0; fd < 3; ++fd)
      if (moved[fd] < 0 || ::dup2(moved[fd], fd) < 0) ::_exit(127);
    if (moved[4] < 0 || ::dup3(moved[4], kExeFd, O_CLOEXEC) < 0) ::_exit(127);
    if (script_fd >= 0 && (moved[5] < 0 || ::dup2(moved[5], kScriptFd) < 0)) ::_exit(127);
    // Nothing else of sonde's reaches the plugin (all of it should be close-on-exec anyway).
    ::syscall(SYS_close_range, static_cast<unsigned>(script_fd >= 0 ? kFirstFree : kScriptFd), ~0u,
              0u);
    // What was checked is what runs: the descriptor, not the path (looked up again, it could
    // name another file by now).
    ::syscall(SYS_execveat, kExeFd, "", argv.data(), envp.data(), AT_EMPTY_PATH);
    const int e = errno;
    (void)!::write(report, &e, sizeof e);
    ::_exit(127);
  }
  note_helper_child(pid);  // never part of the monitored tree (sonde may be its subreaper)
  ::setpgid(pid, pid);     // also here, so that the group exists whichever side runs first
  // The child's ends: closed here so that an end of file reaches each side when the other goes.
  for (UniqueFd* end : {&in[0], &out[1], &err[1], &status[1]}) end->reset();
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(status[0].get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  status[0].reset();

  std::unique_ptr<ChildProcess> c(new ChildProcess());
  c->pid_ = pid;
  c->reaped_ = false;
  c->in_ = std::move(in[1]);
  c->out_ = std::move(out[0]);
  c->err_ = std::move(err[0]);
  c->name_ = spec.name;
  c->started_at_ = monotonic_now();
  for (const UniqueFd* fd : {&c->in_, &c->out_, &c->err_})
    ::fcntl(fd->get(), F_SETFL, ::fcntl(fd->get(), F_GETFL) | O_NONBLOCK);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    c->stop(false);
    return make_error(Errc::unavailable,
                      fmt::format("cannot run '{}': {}", spec.argv[0], std::strerror(exec_errno)));
  }
  return c;
}

ChildProcess::Io ChildProcess::write(std::string_view data, double deadline) {
  if (!in_) return Io::closed;
  // A write to a child that has gone raises SIGPIPE, which would end sonde where it is not
  // ignored: block it around the write and take back the one this write caused.
  sigset_t pipe_set, old, pending;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  Io result = Io::ok;
  while (!data.empty()) {
    const ssize_t n = ::write(in_.get(), data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      const double left = deadline - monotonic_now();
      if (left <= 0) {
        result = Io::timeout;
        break;
      }
      pollfd p{in_.get(), POLLOUT, 0};
      const timespec ts = to_timespec(left);
      if (::ppoll(&p, 1, &ts, nullptr) < 0 && errno != EINTR) {
        result = Io::error;
        break;
      }
      continue;
    }
    result = n < 0 && errno == EPIPE ? Io::closed : Io::error;
    if (result == Io::closed && !was_pending) {
      const timespec zero{};
      while (::sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    break;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return result;
}

void ChildProcess::forward(std::string_view line) {
  std::string text = fmt::format("[{}] {}\n", name_, line);
  std::string_view rest(text);
  while (!rest.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

void ChildProcess::pump_stderr() {
  if (!err_) return;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(err_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      err_buf_.feed(std::string_view(chunk, static_cast<std::size_t>(n)));
      while (auto line = err_buf_.next()) forward(*line);
      if (err_buf_.partial().size() > sizeof chunk) {  // a very long line: pass it on in pieces
        forward(err_buf_.partial());
        err_buf_.clear();
      }
      continue;
    }
    if (n == 0) {  // closed: the rest of an unfinished line, then stop watching
      if (!err_buf_.partial().empty()) forward(err_buf_.partial());
      err_buf_.clear();
      err_.reset();
    }
    return;  // EAGAIN or an error
  }
}

ChildProcess::Io ChildProcess::read_line(std::string& line, double deadline) {
  char chunk[65536];
  for (bool first = true;; first = false) {
    if (auto l = out_buf_.next()) {
      line = std::move(*l);
      return Io::ok;
    }
    if (out_buf_.overflow()) return Io::error;
    if (out_eof_ || !out_) return Io::closed;
    const double left = deadline - monotonic_now();
    if (left <= 0 && !first) return Io::timeout;
    pollfd fds[2] = {{out_.get(), POLLIN, 0}, {err_.get(), POLLIN, 0}};
    const timespec ts = to_timespec(left);
    const int r = ::ppoll(fds, err_ ? 2 : 1, &ts, nullptr);
    if (r < 0 && errno != EINTR) return Io::error;
    if (r <= 0) {
      if (r == 0 && left <= 0) return Io::timeout;
      continue;
    }
    if (err_ && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) pump_stderr();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(out_.get(), chunk, sizeof chunk);
      if (n > 0)
        out_buf_.feed(std::string_view(chunk, static_cast<std::size_t>(n)));
      else if (n == 0)
        out_eof_ = true;
      else if (errno != EAGAIN && errno != EINTR)
        return Io::error;
    }
  }
}

bool ChildProcess::try_reap() {
  if (reaped_) return true;
  // Seen exited but not reaped yet, its pid still names its group: whatever it left behind
  // there goes with it. Then reap.
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == ECHILD) {  // reaped by someone else
      reaped_ = true;
      ended_ = "exited";
    }
    return reaped_;
  }
  if (info.si_pid != pid_) return false;
  ::kill(-pid_, SIGTERM);
  int wstatus = 0;
  while (::waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  forget_helper_child(pid_);
  ended_ = describe_status(wstatus);
  return true;
}

bool ChildProcess::reap_later() {
  pump_stderr();
  return try_reap();
}

void ChildProcess::kill_now(double wait_s) {
  in_.reset();
  const double until = monotonic_now() + wait_s;
  while (!try_reap() && monotonic_now() < until) {
    pump_stderr();
    const timespec ts = to_timespec(std::min(0.001, until - monotonic_now()));
    ::nanosleep(&ts, nullptr);
  }
  pump_stderr();
  if (!reaped_) {
    ::kill(-pid_, SIGKILL);
    (void)try_reap();  // rarely done yet: reap_later() finishes the job
  }
}

void ChildProcess::stop(bool polite) {
  if (pid_ < 0) return;
  if (!reaped_) {
    auto wait_exit = [&](double seconds) {
      const double until = monotonic_now() + seconds;
      while (!try_reap() && monotonic_now() < until) {
        pollfd p{err_.get(), POLLIN, 0};
        const timespec ts = to_timespec(std::min(0.005, until - monotonic_now()));
        if (err_ && ::ppoll(&p, 1, &ts, nullptr) > 0)
          pump_stderr();
        else if (!err_)
          ::nanosleep(&ts, nullptr);
      }
      return reaped_;
    };
    if (polite && in_) (void)write(protocol::kShutdownRequest, monotonic_now() + 0.1);
    in_.reset();
    if (!wait_exit(polite ? kShutdownGraceS : 0.0)) {
      ::kill(-pid_, SIGTERM);
      if (!wait_exit(kTermGraceS)) {
        ::kill(-pid_, SIGKILL);
        wait_exit(kTermGraceS);
      }
    }
  }
  pump_stderr();
  in_.reset();
  out_.reset();
  err_.reset();
}

}  // namespace sonde::plugins
