#pragma once
// Runs one collector's per-tick work on its own worker thread and waits for it up to a deadline,
// so a plugin that hangs costs its own columns only. A job still running when the next one comes
// makes that tick fail at once ("still busy"); the engine disables the collector after repeated
// failures and abandons a worker that never comes back.
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace sonde {

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  enum class Outcome { done, timed_out, busy };
  /// Runs `job` on the worker and waits at most `deadline_s` for it.
  Outcome run(std::function<void()> job, double deadline_s);
  /// True while a job that timed out is still running.
  bool busy() const;
  /// Leaves a hung worker behind at destruction instead of joining it (the collector object it
  /// uses must then be leaked too).
  void abandon();

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread worker_;
  bool abandoned_ = false;
};

}  // namespace sonde
