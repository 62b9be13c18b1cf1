#pragma once
// The watchdog: runs code sonde does not control (native plugins, GPU drivers) under a deadline,
// without a thread hand-off per call.
//
// Design. The engine gives the watchdog one *batch* per tick: the guarded calls of that tick, in
// call order, each with its deadline. One engine-owned worker thread runs the batch; the engine's
// own thread meanwhile runs the trusted built-in collectors, then waits for the batch and is the
// watcher while it waits. Before each call the worker publishes what it is in and until when
// (atomic stores: a call serial and a deadline, tens of ns; no lock, no syscall); after the call
// it publishes the outcome under the state's mutex, if the batch's generation is still its own.
// The watcher sleeps until the published deadline; when it passes with the same call still
// armed, the watcher *abandons* that worker: it bumps the generation (so nothing the late worker
// finishes is ever published), marks the call timed out, and continues the rest of the batch on
// a fresh worker. The abandoned thread keeps running the hung code; when (if) it returns it
// clears the call's `busy` flag and ends. One hand-off per tick (the wake-up of the worker, which
// overlaps the built-ins' work), none per call; a tick without guarded calls has none at all.
//
// Lifetimes: what an abandoned thread may still touch is owned by it (the shared state and the
// batch, through shared_ptr) or must be leaked by the caller: the code of a call that is busy()
// at destruction (the engine keeps such a collector, and what it points to, alive forever).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sonde {

class Watchdog {
 public:
  /// `slots`: how many distinct pieces of guarded code there are (collector slots); a call names
  /// its slot so that one still running in an abandoned thread makes the slot busy().
  explicit Watchdog(std::size_t slots);
  /// Joins the idle worker; abandoned threads are left running (they own what they touch).
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  struct Call {
    std::size_t slot = 0;
    double deadline_s = 0;  ///< from the moment the call starts on the worker
    /// The guarded code: writes its results into storage it owns (captured by shared_ptr), so that
    /// a late return touches nothing of the caller's. Must not throw.
    std::function<void()> run;
  };
  enum class Outcome { done, timed_out, busy };
  struct Report {
    Outcome outcome = Outcome::busy;
    double spent_s = 0;  ///< wall time of the call (done), or until it was abandoned
  };

  /// Starts a batch on the worker and returns at once. A call whose slot is busy() is not run
  /// (its outcome is `busy`). One batch at a time: wait() before the next start().
  void start(std::vector<Call> calls);
  /// Waits for the batch, abandoning a worker whose call overran its deadline and continuing the
  /// rest on a fresh one. Returns one report per call, in order.
  const std::vector<Report>& wait();
  /// True while an abandoned thread is still inside the slot's code.
  bool busy(std::size_t slot) const;
  /// Worker threads abandoned so far (each was, or still is, stuck in one call).
  std::uint64_t abandoned() const;
  /// Abandoned threads of all watchdogs in the process that are still inside their call. While
  /// one is, the process must not run its exit handlers: they would destroy the stuck code's
  /// static state (a driver's) under it. cli's main() ends with _Exit then.
  static std::uint64_t abandoned_still_inside();

 private:
  struct State;
  struct Batch;
  static void work(std::shared_ptr<State> state, std::uint64_t generation);
  void spawn_worker();

  std::shared_ptr<State> state_;
  std::vector<Report> reports_;
};

}  // namespace sonde
