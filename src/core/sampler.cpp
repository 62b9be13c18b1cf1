#include "core/sampler.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "core/helper_children.hpp"

namespace sonde {
namespace {

// After the first interrupt, how long the command may take to exit before sonde kills it.
constexpr double kKillAfterS = 30;

int pidfd_open(int pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

class RealClock final : public SamplerClock {
 public:
  double now() override { return monotonic_now(); }
  int wait(pollfd* fds, nfds_t n, double deadline) override {
    const timespec ts = to_timespec(std::clamp(deadline - monotonic_now(), 0.0, 86400.0));
    return ::ppoll(fds, n, &ts, nullptr);
  }
  void sleep_until(double deadline) override {
    const timespec until = to_timespec(deadline);
    while (monotonic_now() < deadline &&
           ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
    }
  }
};

}  // namespace

SamplerClock& real_sampler_clock() {
  static RealClock clock;
  return clock;
}

SignalGuard::SignalGuard(bool with_sigchld) {
  sigemptyset(&handled_);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled_, s);
  if (with_sigchld) sigaddset(&handled_, SIGCHLD);
  ::pthread_sigmask(SIG_BLOCK, &handled_, &original_);
  fd_.reset(::signalfd(-1, &handled_, SFD_CLOEXEC | SFD_NONBLOCK));
  ::signal(SIGPIPE, SIG_IGN);  // a closed output is seen as EPIPE
}

SignalGuard::~SignalGuard() {
  fd_.reset();
  ::pthread_sigmask(SIG_SETMASK, &original_, nullptr);
}

Sampler::Sampler(Engine& engine, SamplerOptions options, const SignalGuard* signals)
    : engine_(engine),
      opts_(options),
      clock_(options.clock != nullptr ? *options.clock : real_sampler_clock()),
      signals_(signals),
      interval_check_(engine.interval_s()) {
  if (opts_.target_pid > 0) target_fd_.reset(pidfd_open(opts_.target_pid));
  wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

Sampler::~Sampler() = default;

void Sampler::request_stop() {
  stop_requested_.store(true);
  const std::uint64_t one = 1;
  if (wake_fd_) (void)!::write(wake_fd_.get(), &one, sizeof one);
}

void Sampler::sample(SampleListener& listener) {
  const double started_s = clock_.now();
  const auto& tick = engine_.tick();
  last_tick_s_ = started_s;
  if (!listener.on_sample(tick)) stop_ = true;
  if (auto w = interval_check_.observe(clock_.now() - started_s, missed())) engine_.warn(*w);
  // Orphans the tick read as zombies were reaped by it; these are the ones it did not read.
  if (opts_.reap_adopted) {
    const int self = ::getpid();
    for (const PidSample& p : engine_.procs().pids)
      if (p.ppid == self && p.state == 'Z' && p.pid != opts_.target_pid && !is_helper_child(p.pid))
        ::waitpid(p.pid, nullptr, WNOHANG);
  }
}

// The last sample, when the target has exited: its rates are never taken over less than a quarter
// of the interval (a 3 ms interval would give impossible rates), so it waits for that much time to
// pass since the previous tick (at most 2 s; the target's counters no longer change). A shorter
// final interval is reported (final_interval_s) and marked in the manifest by the caller.
void Sampler::final_sample(SampleListener& listener) {
  target_gone_ = true;
  if (last_tick_s_ >= 0) {
    clock_.sleep_until(last_tick_s_ + std::min(engine_.interval_s() / 4, 2.0));
  }
  const double before = last_tick_s_;
  // The tick that reads the command's final counters reaps it (wait4), so that the µs its
  // clock-tick counters lost are counted (ProcScanner::reap_own_zombies; by the summary).
  if (opts_.target_is_child) engine_.scanner().set_reap_target(true);
  sample(listener);
  if (before >= 0) final_interval_s_ = last_tick_s_ - before;
  stop_ = true;
}

bool Sampler::on_signals(SampleListener& listener, Stop& why) {
  const pid_t child = opts_.target_pid;
  signalfd_siginfo si{};
  while (::read(signals_->fd(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    const int sig = static_cast<int>(si.ssi_signo);
    if (sig == SIGCHLD) {
      // Without a pidfd (kernels before 5.3) the command's exit is seen here.
      siginfo_t info{};
      if (opts_.target_is_child && !target_fd_ && !target_gone_ &&
          ::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == child) {
        final_sample(listener);
        why = Stop::target_exited;
      }
      continue;
    }
    if (opts_.on_signal == SamplerOptions::OnSignal::forward_to_child) {
      // A signal from the terminal already reached the command (same process group); one sent to
      // sonde alone is passed on. sonde keeps sampling until the command exits. A second
      // interrupt kills the command (SIGKILL), as does a command still running kKillAfterS
      // seconds after the first.
      const bool from_kill =
          si.ssi_code == SI_USER || si.ssi_code == SI_QUEUE || si.ssi_code == SI_TKILL;
      if (static_cast<pid_t>(si.ssi_pid) == child) continue;
      if (++interrupts_ == 1) {
        first_interrupt_s_ = clock_.now();
        if (from_kill) ::kill(child, sig);
      } else if (!killed_) {
        std::cerr << fmt::format(
            "sonde: second interrupt: killing the command (pid {}) with SIGKILL\n", child);
        ::kill(child, SIGKILL);
        killed_ = true;
      }
    } else {
      stop_ = true;
      why = Stop::signal;
    }
  }
  return stop_;
}

Sampler::Stop Sampler::run(SampleListener& listener) {
  const double interval = engine_.interval_s();
  t0_ = opts_.primed ? engine_.tick_time() : clock_.now();
  last_tick_s_ = opts_.primed ? t0_ : -1;
  bool skip_sample = opts_.primed;
  std::uint64_t k = 0;
  Stop why = Stop::listener;
  stop_ = false;

  while (!stop_) {
    if (!skip_sample) sample(listener);
    skip_sample = false;
    if (stop_) break;
    if (stop_requested_.load()) return Stop::requested;
    if (!target_gone_ && !opts_.target_is_child && opts_.target_pid > 0 && !target_fd_ &&
        ::kill(opts_.target_pid, 0) != 0 && errno == ESRCH)
      return Stop::target_exited;
    // Next slot on the absolute schedule; slots that passed while sampling are counted, not
    // invented.
    ++k;
    double next = t0_ + static_cast<double>(k) * interval;
    const double now = clock_.now();
    if (now >= next) {
      const auto due = static_cast<std::uint64_t>(std::floor((now - t0_) / interval)) + 1;
      missed_.fetch_add(due - k, std::memory_order_relaxed);
      k = due;
      next = t0_ + static_cast<double>(k) * interval;
    }
    // A tick that started late leaves less than an interval before the next slot: a slot closer
    // than a quarter of the interval to it is skipped (counted as missed), so that no row's rates
    // are taken over a sliver of time.
    while (last_tick_s_ >= 0 && next - last_tick_s_ < interval / 4) {
      ++k;
      missed_.fetch_add(1, std::memory_order_relaxed);
      next = t0_ + static_cast<double>(k) * interval;
    }
    if (opts_.duration_s && next - t0_ > *opts_.duration_s + 1e-9) return Stop::duration;

    // Wait for the slot, a signal, the target's exit, a closed output or request_stop().
    while (!stop_) {
      pollfd fds[4];
      nfds_t n = 0;
      const int wake_index = static_cast<int>(n);
      fds[n++] = {wake_fd_.get(), POLLIN, 0};
      const int signal_index = signals_ ? static_cast<int>(n) : -1;
      if (signals_) fds[n++] = {signals_->fd(), POLLIN, 0};
      const int target_index = target_fd_ ? static_cast<int>(n) : -1;
      if (target_fd_) fds[n++] = {target_fd_.get(), POLLIN, 0};
      const int out_index = opts_.hangup_fd >= 0 ? static_cast<int>(n) : -1;
      if (opts_.hangup_fd >= 0) fds[n++] = {opts_.hangup_fd, 0, 0};
      double until = next;
      if (interrupts_ > 0 && !killed_) until = std::min(until, first_interrupt_s_ + kKillAfterS);
      const int r = clock_.wait(fds, n, until);
      if (r < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (r > 0) {
        if ((fds[wake_index].revents & POLLIN) || stop_requested_.load()) return Stop::requested;
        if (signal_index >= 0 && (fds[signal_index].revents & POLLIN)) on_signals(listener, why);
        if (!target_gone_ && target_index >= 0 && (fds[target_index].revents & POLLIN)) {
          // The target exited. While it is a zombie its CPU times (and its reaped children's)
          // are still in /proc: take the last sample before reaping it.
          final_sample(listener);
          why = Stop::target_exited;
        }
      }
      // Checked after a timeout too: the wait that ends at the kill deadline returns 0, and
      // before this was checked only after an event, the command was never killed.
      if (interrupts_ > 0 && !killed_ && !stop_ &&
          clock_.now() - first_interrupt_s_ >= kKillAfterS) {
        std::cerr << fmt::format(
            "sonde: the command (pid {}) is still running {:.0f} s after the interrupt: killing it "
            "with SIGKILL\n",
            opts_.target_pid, kKillAfterS);
        ::kill(opts_.target_pid, SIGKILL);
        killed_ = true;
      }
      if (r == 0) {
        if (until >= next) break;  // the slot has come
        continue;                  // the kill deadline came first: wait on for the slot
      }
      if (out_index >= 0 && (fds[out_index].revents & (POLLERR | POLLHUP))) {
        stop_ = true;
        why = Stop::listener;
      }
    }
  }
  return why;
}

}  // namespace sonde
