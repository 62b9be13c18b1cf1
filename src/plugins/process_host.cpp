// Process plugins: a collector whose code runs in a persistent child process speaking the
// JSON-lines protocol of docs/plugin-protocol.md on its stdin and stdout. One round trip per tick,
// every wait bounded by the collector's deadline (poll, no thread); a child that dies is reaped
// and restarted with exponential backoff; its stderr is passed on to sonde's, line by line,
// prefixed with the collector's name.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/engine.hpp"
#include "core/helper_children.hpp"
#include "core/trust.hpp"
#include "plugins/plugins.hpp"
#include "plugins/protocol.hpp"

extern char** environ;

namespace sonde::plugins {
namespace {

namespace fs = std::filesystem;

constexpr double kSetupTimeoutS = 5.0;   ///< for the setup reply
constexpr double kFirstBackoffS = 0.5;   ///< first restart delay after a death
constexpr double kMaxBackoffS = 30.0;    ///< restart delays double up to this
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

// The executable execve should run: argv0 itself when it has a slash, else the first match in
// PATH (resolved here, before fork, so that the child only makes async-signal-safe calls).
Result<std::string> resolve_executable(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos) return argv0;
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path && *env_path ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto colon = path.find(':', start);
    std::string dir =
        path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + argv0;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return make_error(Errc::unavailable, fmt::format("cannot run '{}': not found in PATH", argv0));
}

// ---- the child process ----

struct SpawnSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  ///< set or replaced in the child's environment
  std::string name;                        ///< prefix of its stderr lines
};

// One running child with pipes to its stdin, stdout and stderr, in its own process group.
class ChildProcess {
 public:
  enum class Io { ok, timeout, closed, error };

  static Result<std::unique_ptr<ChildProcess>> start(const SpawnSpec& spec);
  ~ChildProcess() { stop(false); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  double started_at() const { return started_at_; }

  /// Writes all of `data` by `deadline` (monotonic seconds).
  Io write(std::string_view data, double deadline);
  /// The next line of the child's stdout by `deadline`; passes stderr on meanwhile.
  Io read_line(std::string& line, double deadline);
  /// Passes on what the child wrote to stderr so far (no waiting).
  void pump_stderr();
  /// Ends the child: `polite` sends {"op":"shutdown"} and closes its stdin, then waits up to 1 s;
  /// then SIGTERM to its group, up to 1 s; then SIGKILL. Blocks up to 2 s; idempotent.
  void stop(bool polite);
  /// For a child whose protocol is over (it closed its stdout, or the stream is corrupt): waits
  /// at most `wait_s` for it to exit by itself, then SIGKILL to its group. Reaps it if it can
  /// without waiting longer; `reap_later` finishes the job.
  void kill_now(double wait_s);
  /// Reaps the child when it has exited; true once it is reaped.
  bool reap_later();
  /// How it ended, once reaped ("exited with status 1").
  const std::string& how_it_ended() const { return ended_; }

 private:
  ChildProcess() = default;
  bool try_reap();
  void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  void forward(std::string_view line);

  pid_t pid_ = -1;
  bool reaped_ = true;
  int in_ = -1, out_ = -1, err_ = -1;
  bool out_eof_ = false;
  protocol::LineBuffer out_buf_, err_buf_;
  std::string name_;
  std::string ended_;
  double started_at_ = 0;
};

Result<std::unique_ptr<ChildProcess>> ChildProcess::start(const SpawnSpec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty())
    return make_error(Errc::unavailable, "empty command");
  auto found = resolve_executable(spec.argv[0]);
  if (!found) return found.error();
  // The program runs with sonde's privileges: the file it resolves to must pass the trust rules
  // (docs/security.md), at every start and restart, and that checked file is what is executed
  // (argv[0] stays as given).
  auto exe = trusted_program(*found);
  if (!exe) return exe.error();

  // Everything the child needs is prepared before fork: it may only make async-signal-safe calls.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    const auto eq = kv.find('=');
    if (eq != std::string_view::npos && spec.env.count(std::string(kv.substr(0, eq)))) continue;
    env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {in, out, err, status})
      for (int i = 0; i < 2; ++i)
        if (p[i] >= 0) ::close(p[i]);
  };
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
      ::pipe2(status, O_CLOEXEC) != 0) {
    const int e = errno;
    close_all();
    return make_error(Errc::unavailable, fmt::format("cannot create pipes: {}", std::strerror(e)));
  }
  // Requests with a large pid context fit in one write (best effort).
  (void)::fcntl(in[1], F_SETPIPE_SZ, kPipeBytes);

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return make_error(Errc::unavailable, fmt::format("cannot fork: {}", std::strerror(e)));
  }
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
    // Everything is first moved above 2 (sonde may run with 0, 1 or 2 closed, so that a pipe
    // end could sit where another one must go), then put in place; dup2 clears close-on-exec.
    const int report = ::fcntl(status[1], F_DUPFD_CLOEXEC, 3);
    const int moved[3] = {::fcntl(in[0], F_DUPFD_CLOEXEC, 3), ::fcntl(out[1], F_DUPFD_CLOEXEC, 3),
                          ::fcntl(err[1], F_DUPFD_CLOEXEC, 3)};
    for (int fd = 0; fd < 3; ++fd)
      if (moved[fd] < 0 || ::dup2(moved[fd], fd) < 0) ::_exit(127);
#ifdef SYS_close_range
    // Nothing else of sonde's reaches the plugin (all of it should be close-on-exec anyway),
    // except the status pipe, which exec closes.
    if (report > 3) ::syscall(SYS_close_range, 3u, static_cast<unsigned>(report - 1), 0u);
    ::syscall(SYS_close_range, static_cast<unsigned>(report + 1), ~0u, 0u);
#endif
    ::execve(exe->c_str(), argv.data(), envp.data());
    const int e = errno;
    (void)!::write(report, &e, sizeof e);
    ::_exit(127);
  }
  note_helper_child(pid);  // never part of the monitored tree (sonde may be its subreaper)
  ::setpgid(pid, pid);     // also here, so that the group exists whichever side runs first
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::close(status[1]);
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(status[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(status[0]);

  std::unique_ptr<ChildProcess> c(new ChildProcess());
  c->pid_ = pid;
  c->reaped_ = false;
  c->in_ = in[1];
  c->out_ = out[0];
  c->err_ = err[0];
  c->name_ = spec.name;
  c->started_at_ = monotonic_now();
  for (int fd : {c->in_, c->out_, c->err_}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    c->stop(false);
    return make_error(Errc::unavailable,
                      fmt::format("cannot run '{}': {}", spec.argv[0], std::strerror(exec_errno)));
  }
  return c;
}

ChildProcess::Io ChildProcess::write(std::string_view data, double deadline) {
  if (in_ < 0) return Io::closed;
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
    const ssize_t n = ::write(in_, data.data(), data.size());
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
      pollfd p{in_, POLLOUT, 0};
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
  if (err_ < 0) return;
  char chunk[4096];
  for (;;) {
    const ssize_t n = ::read(err_, chunk, sizeof chunk);
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
      close_fd(err_);
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
    if (out_eof_ || out_ < 0) return Io::closed;
    const double left = deadline - monotonic_now();
    if (left <= 0 && !first) return Io::timeout;
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    const timespec ts = to_timespec(left);
    const int r = ::ppoll(fds, err_ >= 0 ? 2 : 1, &ts, nullptr);
    if (r < 0 && errno != EINTR) return Io::error;
    if (r <= 0) {
      if (r == 0 && left <= 0) return Io::timeout;
      continue;
    }
    if (err_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) pump_stderr();
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
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
  close_fd(in_);
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
        pollfd p{err_, POLLIN, 0};
        const timespec ts = to_timespec(std::min(0.005, until - monotonic_now()));
        if (err_ >= 0 && ::ppoll(&p, 1, &ts, nullptr) > 0)
          pump_stderr();
        else if (err_ < 0)
          ::nanosleep(&ts, nullptr);
      }
      return reaped_;
    };
    if (polite && in_ >= 0) (void)write(protocol::kShutdownRequest, monotonic_now() + 0.1);
    close_fd(in_);
    if (!wait_exit(polite ? kShutdownGraceS : 0.0)) {
      ::kill(-pid_, SIGTERM);
      if (!wait_exit(kTermGraceS)) {
        ::kill(-pid_, SIGKILL);
        wait_exit(kTermGraceS);
      }
    }
  }
  pump_stderr();
  close_fd(in_);
  close_fd(out_);
  close_fd(err_);
}

// ---- the collector ----

class ProcessCollector final : public Collector {
 public:
  ProcessCollector(SpawnSpec spec, std::string source, std::string file, CollectorArgs args,
                   std::vector<std::string> skip_kwargs)
      : spec_(std::move(spec)),
        source_(std::move(source)),
        file_(std::move(file)),
        args_(std::move(args)),
        skip_kwargs_(std::move(skip_kwargs)) {
    // The levels that can apply to this target; the engine asks for a subset.
    const TargetInfo* t = args_.target;
    if (t && t->pid > 0) {
      candidates_.push_back(Level::process);
      candidates_.push_back(Level::user);
      if (t->slurm_job) candidates_.push_back(Level::slurm);
    }
    candidates_.push_back(Level::system);
  }
  ~ProcessCollector() override { teardown(); }

  Result<void> setup() override;
  bool supports(Level l) const override { return devices_[level_index(l)].has_value(); }
  std::size_t devices(Level l) const override { return devices_[level_index(l)].value_or(0); }
  ScanNeeds needs() const override { return ScanNeeds{.io = context_, .threads = false}; }
  void snapshot(const TickContext& ctx) override;
  Result<RawValue> collect(Level level, const TickContext& ctx) override;
  void teardown() override;
  std::string_view source() const override { return source_; }
  std::string file() const override { return file_; }
  int priority() const override { return priority_; }

 private:
  enum class State { up, starting, down, stopped };

  Result<void> launch(double wait_s);
  void child_gone(const std::string& why, double wait_s);
  void fail_tick(std::string message) { tick_error_ = std::move(message); }
  bool await_setup(double deadline);
  void exchange(const TickContext& ctx, double deadline);
  std::vector<Level> levels_to_ask() const;

  SpawnSpec spec_;
  std::string source_, file_;
  CollectorArgs args_;
  std::vector<std::string> skip_kwargs_;
  std::vector<Level> candidates_;

  std::unique_ptr<ChildProcess> child_;
  std::vector<std::unique_ptr<ChildProcess>> dying_;  ///< killed, not reaped yet
  State state_ = State::stopped;
  std::array<std::optional<std::size_t>, kNumLevels> devices_{};
  bool context_ = false;
  int priority_ = 0;
  double deadline_ = 0;        ///< of the current tick
  double setup_deadline_ = 0;  ///< while starting
  double restart_at_ = 0;      ///< while down
  double backoff_s_ = kFirstBackoffS;
  std::string down_reason_;
  std::optional<std::uint64_t> outstanding_;  ///< a tick whose reply has not been read
  double outstanding_since_ = 0;

  // This tick.
  std::string tick_error_;
  std::array<std::optional<Result<RawValue>>, kNumLevels> values_{};
  // Levels the engine asks for: learnt from the collect calls of the first tick.
  std::uint8_t asked_now_ = 0, asked_ = 0;
  bool learnt_ = false;
};

// Starts the child and sends the setup request; `wait_s` bounds the wait for a child that
// refused it, to say how it ended.
Result<void> ProcessCollector::launch(double wait_s) {
  auto child = ChildProcess::start(spec_);
  if (!child) return child.error();
  child_ = std::move(*child);
  const std::string request = protocol::setup_request(args_, candidates_, skip_kwargs_);
  if (child_->write(request, monotonic_now() + kSetupTimeoutS) != ChildProcess::Io::ok) {
    child_->kill_now(wait_s);
    const std::string ended = child_->how_it_ended();
    child_.reset();
    return make_error(Errc::unavailable, ended.empty()
                                             ? std::string("it did not read its setup request")
                                             : fmt::format("it {} before answering setup", ended));
  }
  return {};
}

Result<void> ProcessCollector::setup() {
  if (auto ok = launch(0.05); !ok) return ok;
  std::string line;
  const auto io = child_->read_line(line, monotonic_now() + kSetupTimeoutS);
  std::string why;
  if (io == ChildProcess::Io::ok) {
    auto reply = protocol::parse_setup_reply(line);
    if (reply) {
      devices_ = reply->devices;
      context_ = reply->context;
      priority_ = reply->priority;
      state_ = State::up;
      return {};
    }
    why = reply.error().message;
  } else if (io == ChildProcess::Io::timeout) {
    why = fmt::format("no setup reply within {:.0f} s", kSetupTimeoutS);
  } else {
    child_->kill_now(0.2);
    why = fmt::format("it {} before answering setup", child_->how_it_ended().empty()
                                                          ? std::string("closed its stdout")
                                                          : child_->how_it_ended());
  }
  child_->stop(false);
  child_.reset();
  return make_error(Errc::unavailable, why);
}

void ProcessCollector::teardown() {
  for (auto& d : dying_) d->stop(false);
  dying_.clear();
  if (child_) {
    // A child still busy with a tick cannot read the shutdown request.
    child_->stop(!outstanding_ && state_ == State::up);
    child_.reset();
  }
  state_ = State::stopped;
}

void ProcessCollector::child_gone(const std::string& why, double wait_s) {
  const double now = monotonic_now();
  std::string ended;
  if (child_) {
    // A child that stayed up for a while starts the backoff over.
    if (now - child_->started_at() > kMaxBackoffS) backoff_s_ = kFirstBackoffS;
    // A child that closed its stdout is usually exiting: a moment to see how it ended, within
    // this tick's deadline; the reaping is finished later otherwise.
    child_->kill_now(std::clamp(deadline_ - now, 0.0, wait_s));
    ended = child_->how_it_ended();
    if (!child_->reap_later()) dying_.push_back(std::move(child_));
    child_.reset();
  }
  outstanding_.reset();
  state_ = State::down;
  restart_at_ = now + backoff_s_;
  down_reason_ = ended.empty() ? why : fmt::format("{} ({})", why, ended);
  fail_tick(fmt::format("{}; restarting in {:.1f} s", down_reason_, backoff_s_));
  backoff_s_ = std::min(backoff_s_ * 2, kMaxBackoffS);
}

std::vector<Level> ProcessCollector::levels_to_ask() const {
  std::vector<Level> out;
  for (Level l : candidates_) {
    if (!supports(l)) continue;
    if (learnt_ && !((asked_ >> level_index(l)) & 1u)) continue;
    out.push_back(l);
  }
  return out;
}

// Waits for the setup reply of a restarted child; true when it is up again.
bool ProcessCollector::await_setup(double deadline) {
  std::string line;
  const auto io = child_->read_line(line, std::min(deadline, setup_deadline_));
  if (io == ChildProcess::Io::timeout) {
    if (monotonic_now() >= setup_deadline_)
      child_gone(fmt::format("no setup reply within {:.0f} s after a restart", kSetupTimeoutS), 0);
    else
      fail_tick("restarting: waiting for its setup reply");
    return false;
  }
  if (io != ChildProcess::Io::ok) {
    child_gone("it closed its stdout before answering setup", 0.02);
    return false;
  }
  auto reply = protocol::parse_setup_reply(line);
  if (!reply) {
    child_gone("setup failed after a restart: " + reply.error().message, 0);
    return false;
  }
  if (reply->devices != devices_) {
    child_gone("after a restart it reports other devices than at the start (the columns are fixed)",
               0);
    return false;
  }
  context_ = reply->context;
  state_ = State::up;
  return true;
}

void ProcessCollector::exchange(const TickContext& ctx, double deadline) {
  std::string line;
  // One request at a time: a child still answering an earlier tick gets no new one; its late
  // answer is read and dropped when it comes.
  while (outstanding_) {
    const auto io = child_->read_line(line, deadline);
    if (io == ChildProcess::Io::timeout) {
      fail_tick(fmt::format(
          "no reply within its deadline of {:.1f} ms: still busy with tick {} "
          "(sent {:.0f} ms ago)",
          args_.deadline_s * 1e3, *outstanding_, (monotonic_now() - outstanding_since_) * 1e3));
      return;
    }
    if (io != ChildProcess::Io::ok) {
      child_gone(io == ChildProcess::Io::closed ? "it closed its stdout" : "unreadable reply",
                 0.02);
      return;
    }
    auto reply = protocol::parse_tick_reply(line, args_.handler_accepts);
    if (!reply || reply->tick == *outstanding_) outstanding_.reset();
  }

  const auto levels = levels_to_ask();
  const auto sent = child_->write(protocol::tick_request(ctx, levels, context_), deadline);
  if (sent != ChildProcess::Io::ok) {
    // A request cut in the middle leaves the stream unusable: start over.
    child_gone(sent == ChildProcess::Io::closed ? "it closed its stdin"
                                                : "its tick request could not be written in time",
               sent == ChildProcess::Io::closed ? 0.02 : 0);
    return;
  }
  outstanding_ = ctx.tick;
  outstanding_since_ = monotonic_now();
  for (;;) {
    const auto io = child_->read_line(line, deadline);
    if (io == ChildProcess::Io::timeout) {
      fail_tick(fmt::format("no reply within its deadline of {:.1f} ms", args_.deadline_s * 1e3));
      return;
    }
    if (io != ChildProcess::Io::ok) {
      child_gone(io == ChildProcess::Io::closed ? "it closed its stdout" : "unreadable reply",
                 0.02);
      return;
    }
    auto reply = protocol::parse_tick_reply(line, args_.handler_accepts);
    if (!reply) {  // cannot be matched to a request: take it as this tick's
      outstanding_.reset();
      fail_tick(reply.error().message);
      return;
    }
    if (reply->tick != ctx.tick) continue;  // a late answer to an earlier tick
    outstanding_.reset();
    if (reply->error) {
      fail_tick(*reply->error);
      return;
    }
    values_ = std::move(reply->values);
    return;
  }
}

void ProcessCollector::snapshot(const TickContext& ctx) {
  const double now = monotonic_now();
  const double deadline = now + args_.deadline_s;
  deadline_ = deadline;
  tick_error_.clear();
  for (auto& v : values_) v.reset();
  if (!learnt_ && asked_now_) {
    asked_ = asked_now_;
    learnt_ = true;
  }
  asked_now_ = 0;
  std::erase_if(dying_, [](const std::unique_ptr<ChildProcess>& d) { return d->reap_later(); });

  if (state_ == State::stopped) {
    fail_tick("not started");
    return;
  }
  if (state_ == State::down) {
    if (now < restart_at_) {
      fail_tick(fmt::format("{}; restarting in {:.1f} s", down_reason_, restart_at_ - now));
      return;
    }
    if (auto ok = launch(0); !ok) {
      child_gone(ok.error().message, 0);
      return;
    }
    state_ = State::starting;
    setup_deadline_ = now + kSetupTimeoutS;
  }
  child_->pump_stderr();
  if (state_ == State::starting && !await_setup(deadline)) return;
  exchange(ctx, deadline);
}

Result<RawValue> ProcessCollector::collect(Level level, const TickContext&) {
  asked_now_ = static_cast<std::uint8_t>(asked_now_ | (1u << level_index(level)));
  if (!tick_error_.empty()) return make_error(Errc::failed, tick_error_);
  auto& v = values_[level_index(level)];
  if (v) return std::move(*v);
  return make_error(Errc::failed,
                    fmt::format("the reply has no value for level '{}'", level_name(level)));
}

// ---- where the Python bridge is ----

std::string self_exe_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

bool has_bridge(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "sonde_plugin" / "runner.py", ec);
}

// $SONDE_PYTHON_DIR, else <prefix>/share/sonde/python next to the binary, else the source tree.
Result<std::string> python_dir() {
  if (!elevated_privileges()) {
    if (const char* d = std::getenv("SONDE_PYTHON_DIR"); d && *d) {
      if (!has_bridge(d))
        return make_error(Errc::unavailable,
                          fmt::format("SONDE_PYTHON_DIR={} has no sonde_plugin/runner.py", d));
      return std::string(d);
    }
  }
  if (const std::string exe = self_exe_dir(); !exe.empty()) {
    const fs::path shipped = fs::path(exe) / ".." / "share" / "sonde" / "python";
    if (has_bridge(shipped)) return fs::weakly_canonical(shipped).string();
  }
#ifdef SONDE_SOURCE_PYTHON_DIR
  if (has_bridge(SONDE_SOURCE_PYTHON_DIR)) return std::string(SONDE_SOURCE_PYTHON_DIR);
#endif
  return make_error(Errc::unavailable,
                    "cannot find the sonde_plugin Python package (set SONDE_PYTHON_DIR to the "
                    "directory that holds sonde_plugin/)");
}

std::string python_interpreter() {
  if (!elevated_privileges())
    if (const char* p = std::getenv("SONDE_PYTHON"); p && *p) return p;
  return "/usr/bin/python3";
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  });
}

/// The file of MODULE in python:MODULE.CLASS, when it lies in one of `dirs` (sonde's own
/// PYTHONPATH; elsewhere it is the interpreter's installed packages): it and its directory must
/// pass the trust rules, as a native plugin must.
Result<void> check_python_module(const std::string& what, const std::vector<std::string>& dirs) {
  std::string rel = what.substr(0, what.rfind('.'));
  std::replace(rel.begin(), rel.end(), '.', '/');
  for (const std::string& d : dirs) {
    for (const std::string& candidate : {d + "/" + rel + ".py", d + "/" + rel + "/__init__.py"}) {
      struct stat st {};
      if (::lstat(candidate.c_str(), &st) != 0) continue;
      auto fd = sonde::open_trusted(candidate, "python module");
      if (!fd) return make_error(Errc::unavailable, fd.error().message);
      ::close(*fd);
      return {};
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Collector>> make_process_collector(std::vector<std::string> command,
                                                          std::string source, std::string file,
                                                          const CollectorArgs& args) {
  if (command.empty() || command[0].empty())
    return make_error(Errc::config, fmt::format("collector '{}': empty command", args.name));
  SpawnSpec spec;
  spec.argv = std::move(command);
  spec.name = args.name;
  return std::unique_ptr<Collector>(
      new ProcessCollector(std::move(spec), std::move(source), std::move(file), args, {}));
}

TargetFactory exec_factory() {
  return {"exec",
          [](const std::string&, const CollectorArgs& args) -> Result<std::unique_ptr<Collector>> {
            auto it = args.raw_kwargs.find("command");
            if (it == args.raw_kwargs.end())
              return make_error(Errc::config,
                                fmt::format("collector '{}' (_target_: exec) needs 'command': the "
                                            "program and its arguments, a non-empty list of "
                                            "strings",
                                            args.name));
            const YAML::Node& n = it->second.value;
            std::vector<std::string> command;
            bool ok = n.IsSequence() && n.size() > 0;
            if (ok)
              for (const auto& item : n) {
                if (!item.IsScalar() || item.Scalar().empty()) {
                  ok = false;
                  break;
                }
                command.push_back(item.Scalar());
              }
            if (!ok)
              return make_error(Errc::config,
                                fmt::format("{}: collector '{}': 'command' expected a non-empty "
                                            "list of strings (the program and its arguments)",
                                            it->second.origin.str(), args.name));
            // A relative program path is relative to the file that names it (a snippet in a
            // plugin directory next to its script), when the program is there.
            const std::string& origin_file = it->second.origin.file;
            if (command[0].find('/') != std::string::npos && command[0][0] != '/' &&
                !origin_file.empty() && origin_file[0] != '<') {
              std::error_code ec;
              const fs::path beside = fs::path(origin_file).parent_path() / command[0];
              if (fs::exists(beside, ec) && !fs::exists(command[0], ec))
                command[0] = fs::absolute(beside, ec).lexically_normal().string();
            }
            SpawnSpec spec;
            spec.argv = command;
            spec.name = args.name;
            const std::string file = fmt::format("{}", fmt::join(command, " "));
            return std::unique_ptr<Collector>(
                new ProcessCollector(std::move(spec), "exec", file, args, {"command"}));
          }};
}

TargetFactory python_factory() {
  return {
      "python:",
      [](const std::string& target,
         const CollectorArgs& args) -> Result<std::unique_ptr<Collector>> {
        const std::string what = target.substr(std::string_view("python:").size());
        bool ok = what.find('.') != std::string::npos;
        for (std::size_t start = 0; ok && start <= what.size();) {
          const auto dot = what.find('.', start);
          ok = is_identifier(std::string_view(what).substr(
              start, dot == std::string::npos ? std::string::npos : dot - start));
          if (dot == std::string::npos) break;
          start = dot + 1;
        }
        if (!ok)
          return make_error(Errc::config,
                            fmt::format("collector '{}': _target_ '{}' expected "
                                        "python:MODULE.CLASS (e.g. python:my_site.ib.IbCollector)",
                                        args.name, target));
        auto dir = python_dir();
        if (!dir) return dir.error();
        std::vector<std::string> path_dirs = {*dir};
        const char* existing = elevated_privileges() ? nullptr : std::getenv("PYTHONPATH");
        if (existing && *existing)
          for (std::string_view rest = existing; !rest.empty();) {
            const auto colon = rest.find(':');
            if (colon != 0) path_dirs.emplace_back(rest.substr(0, colon));
            rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
          }
        // The current directory is searched only when it passes the trust rules: root running
        // sonde in another user's directory must not import that user's modules.
        std::error_code ec;
        const auto cwd = fs::current_path(ec);
        struct stat cwd_st {};
        if (!ec && ::stat(cwd.c_str(), &cwd_st) == 0 && untrusted_reason(cwd_st, "").empty())
          path_dirs.push_back(cwd.string());
        if (auto checked = check_python_module(what, path_dirs); !checked) return checked.error();
        SpawnSpec spec;
        spec.argv = {python_interpreter(), "-m", "sonde_plugin.runner", what};
        spec.env["PYTHONPATH"] = fmt::format("{}", fmt::join(path_dirs, ":"));
        // Python >= 3.11: no current directory first in sys.path (what -m would add).
        spec.env["PYTHONSAFEPATH"] = "1";
        spec.name = args.name;
        return std::unique_ptr<Collector>(
            new ProcessCollector(std::move(spec), "python", what, args, {}));
      }};
}

}  // namespace sonde::plugins
