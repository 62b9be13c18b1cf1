#include "core/watchdog.hpp"

#include <chrono>

namespace sonde {

struct Watchdog::State {
  std::mutex m;
  std::condition_variable cv;
  std::function<void()> job;
  bool has_job = false;
  bool running = false;
  bool quit = false;
  std::uint64_t finished = 0;
};

Watchdog::Watchdog() : state_(std::make_shared<State>()) {
  worker_ = std::thread([s = state_] {
    std::unique_lock lock(s->m);
    while (true) {
      s->cv.wait(lock, [&] { return s->has_job || s->quit; });
      if (s->quit && !s->has_job) return;
      auto job = std::move(s->job);
      s->has_job = false;
      s->running = true;
      lock.unlock();
      job();
      lock.lock();
      s->running = false;
      ++s->finished;
      s->cv.notify_all();
    }
  });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(state_->m);
    state_->quit = true;
  }
  state_->cv.notify_all();
  if (abandoned_ || busy())
    worker_.detach();  // the state is shared, so the worker can still finish safely
  else
    worker_.join();
}

bool Watchdog::busy() const {
  std::lock_guard lock(state_->m);
  return state_->running || state_->has_job;
}

void Watchdog::abandon() {
  abandoned_ = true;
}

Watchdog::Outcome Watchdog::run(std::function<void()> job, double deadline_s) {
  std::unique_lock lock(state_->m);
  if (state_->running || state_->has_job) return Outcome::busy;
  const std::uint64_t target = state_->finished + 1;
  state_->job = std::move(job);
  state_->has_job = true;
  state_->cv.notify_all();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(deadline_s));
  const bool done =
      state_->cv.wait_until(lock, deadline, [&] { return state_->finished >= target; });
  return done ? Outcome::done : Outcome::timed_out;
}

}  // namespace sonde
