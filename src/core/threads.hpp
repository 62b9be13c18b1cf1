#pragma once
// Threads that never take a process signal. SIGINT, SIGTERM, SIGHUP and the other asynchronous
// signals sent to sonde must reach the thread that waits for them (the Sampler's signalfd, or the
// handlers of `status -i`); a thread that leaves them unblocked takes them with their default
// action, which ends the process without its summary. Every thread sonde starts is created with
// those signals blocked (the new thread inherits its creator's mask), whatever the creator's mask
// is at that moment, so the rule does not depend on the order in which an entry point starts its
// threads and its SignalGuard.
#include <signal.h>

#include <thread>
#include <utility>

namespace sonde {

/// The asynchronous signals a thread of sonde's never takes: SIGINT, SIGTERM, SIGHUP, SIGQUIT,
/// SIGCHLD, SIGPIPE (a closed output is seen as EPIPE), SIGUSR1/2, SIGALRM, SIGWINCH. Faults
/// (SIGSEGV, SIGBUS, ...) stay unblocked so that sanitizers and core dumps see them.
sigset_t async_signals();

/// Blocks async_signals() in the calling thread for the object's lifetime (then restores).
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked();
  ~AsyncSignalsBlocked();
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t old_{};
};

/// std::thread(f, args...) with async_signals() blocked in the new thread from its first
/// instruction.
template <class F, class... Args>
std::thread start_thread(F&& f, Args&&... args) {
  AsyncSignalsBlocked blocked;
  return std::thread(std::forward<F>(f), std::forward<Args>(args)...);
}

}  // namespace sonde
