#pragma once
// The sampling loop, written once: an absolute monotonic schedule (missed slots counted, never
// invented), the signals that stop it, the target whose exit ends it with a final sample, and the
// call of a listener (the sinks, src/sinks/sink.hpp) after every tick. `sonde run/record/stream`,
// `sonde serve` and the Python Monitor all sample through it.
#include <poll.h>
#include <signal.h>

#include <atomic>
#include <cstdint>
#include <optional>

#include "core/engine.hpp"
#include "core/fs.hpp"
#include "core/interval_check.hpp"

namespace sonde {

/// Receives every sample the Sampler takes (src/sinks/sink.hpp's SinkSet).
class SampleListener {
 public:
  virtual ~SampleListener() = default;
  /// One tick of the engine. Returns false to stop sampling (the reader of an output went away).
  virtual bool on_sample(const Engine::Tick& tick) = 0;
};

/// Blocks SIGINT, SIGTERM, SIGHUP (and SIGCHLD when asked) for the whole process and receives
/// them through a signalfd; ignores SIGPIPE (a closed output is seen as EPIPE). Construct it
/// before any thread starts so that every thread inherits the mask. The original mask is restored
/// on destruction (and is the one a spawned command should get).
class SignalGuard {
 public:
  explicit SignalGuard(bool with_sigchld);
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;
  int fd() const { return fd_.get(); }
  const sigset_t& original() const { return original_; }

 private:
  sigset_t handled_{}, original_{};
  UniqueFd fd_;
};

/// The Sampler's view of time: the monotonic clock and its waits. The real one by default; the
/// unit tests inject a fake one (tests/unit/sampler_test.cpp) that moves its time forward at
/// each wait, so that missed slots, the quarter-interval rules, the final-sample wait and the
/// 30 s kill are checked without waiting for them.
class SamplerClock {
 public:
  virtual ~SamplerClock() = default;
  /// CLOCK_MONOTONIC seconds.
  virtual double now() = 0;
  /// ppoll(fds, n) until `deadline` (monotonic seconds): the number of fds with events, 0 when
  /// the deadline came first, -1 with errno on an error.
  virtual int wait(pollfd* fds, nfds_t n, double deadline) = 0;
  /// Returns at `deadline`.
  virtual void sleep_until(double deadline) = 0;
};

/// CLOCK_MONOTONIC, ppoll and clock_nanosleep.
SamplerClock& real_sampler_clock();

struct SamplerOptions {
  /// What a signal of the SignalGuard does.
  enum class OnSignal {
    stop,             ///< SIGINT/SIGTERM/SIGHUP stop sampling (record, stream, serve)
    forward_to_child  ///< run: the command gets it; a second one (or 30 s) kills it with SIGKILL
  };
  OnSignal on_signal = OnSignal::stop;
  /// The process whose exit ends sampling with a final sample (0: none). Seen through a pidfd,
  /// else (kernels before 5.3) through SIGCHLD for a child, else with kill(pid, 0) after a tick.
  int target_pid = 0;
  /// The target is sonde's child (run): its exit is also seen through SIGCHLD.
  bool target_is_child = false;
  /// run as subreaper: orphans of the tree re-parented to sonde are reaped once a tick has read
  /// them as zombies (their final counters), never before.
  bool reap_adopted = false;
  /// An output whose closing (POLLERR/POLLHUP) stops sampling, e.g. stream's stdout; -1: none.
  int hangup_fd = -1;
  /// The schedule ends once the next slot would be more than this after its start.
  std::optional<double> duration_s;
  /// The engine's first tick was taken before (run's baseline, before the command existed): the
  /// schedule starts at it and the first sample comes one interval later.
  bool primed = false;
  /// The clock (null: real_sampler_clock()); it must outlive the Sampler.
  SamplerClock* clock = nullptr;
};

class Sampler {
 public:
  /// `signals` may be null (the Python Monitor: request_stop() only); it must outlive run().
  Sampler(Engine& engine, SamplerOptions options, const SignalGuard* signals);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  enum class Stop { signal, target_exited, duration, listener, requested, error };
  /// Samples until a stop condition; `listener` gets every tick.
  Stop run(SampleListener& listener);
  /// Any thread: stops the loop at its next wait (the tick in progress completes).
  void request_stop();

  /// Slots of the schedule that passed without a sample (any thread).
  std::uint64_t missed() const { return missed_.load(std::memory_order_relaxed); }
  /// Monotonic time of the schedule's start.
  double start_time() const { return t0_; }
  /// When the target exited: the time between the final sample and the one before it.
  std::optional<double> final_interval_s() const { return final_interval_s_; }
  /// run: the command was killed with SIGKILL after a second interrupt or 30 s.
  bool killed_child() const { return killed_; }
  /// The node does not sustain the interval (ticks as long as the interval, or a quarter of the
  /// slots missed): warned once through the engine; the manifest's entry, null when it does.
  nlohmann::json interval_warning() const { return interval_check_.manifest_entry(); }

 private:
  void sample(SampleListener& listener);
  void final_sample(SampleListener& listener);
  /// Handles the signals read from the guard's fd; true when sampling must stop.
  bool on_signals(SampleListener& listener, Stop& why);

  Engine& engine_;
  SamplerOptions opts_;
  SamplerClock& clock_;
  const SignalGuard* signals_;
  UniqueFd target_fd_;  // pidfd of the target
  UniqueFd wake_fd_;    // eventfd written by request_stop
  std::atomic<bool> stop_requested_{false};
  std::atomic<std::uint64_t> missed_{0};
  double t0_ = 0;
  double last_tick_s_ = -1;
  std::optional<double> final_interval_s_;
  bool stop_ = false;
  bool target_gone_ = false;
  int interrupts_ = 0;
  double first_interrupt_s_ = 0;
  bool killed_ = false;
  IntervalCheck interval_check_;
};

}  // namespace sonde
