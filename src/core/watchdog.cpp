#include "core/watchdog.hpp"

#include "core/threads.hpp"

#include <algorithm>
#include <chrono>

namespace sonde {
namespace {
using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::int64_t to_ns(double seconds) {
  return static_cast<std::int64_t>(std::max(0.0, seconds) * 1e9);
}

// Abandoned threads of every watchdog of the process still inside their call.
std::atomic<std::uint64_t> g_still_inside{0};

Clock::time_point at_ns(std::int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}
}  // namespace

struct Watchdog::Batch {
  std::vector<Call> calls;
  std::vector<Report> reports;
  std::size_t next = 0;  ///< the call being run or to run next (guarded by State::m)
  bool done = false;     ///< (guarded by State::m)
  // Published by the worker before each call: which call (index + 1, 0: none yet) and until
  // when. Written under State::m together with `next`, read by the watcher under it.
  std::atomic<std::size_t> armed{0};
  std::atomic<std::int64_t> started_ns{0};
  std::atomic<std::int64_t> deadline_ns{0};
};

struct Watchdog::State {
  explicit State(std::size_t n) : slots(n), in_call(new std::atomic<bool>[n]) {
    for (std::size_t i = 0; i < n; ++i) in_call[i] = false;
  }
  std::mutex m;
  std::condition_variable work_cv;  ///< the live worker waits for a batch
  std::condition_variable done_cv;  ///< the watcher waits for the batch's end or a deadline
  std::uint64_t generation = 0;     ///< the live worker's; an abandoned one holds an older value
  std::shared_ptr<Batch> batch;     ///< the batch in flight, or nullptr
  bool quit = false;
  std::size_t slots;
  std::unique_ptr<std::atomic<bool>[]> in_call;  ///< per slot: a thread is inside its code
  std::atomic<std::uint64_t> abandoned{0};
  std::thread worker;  ///< the live worker (guarded by m)
};

Watchdog::Watchdog(std::size_t slots) : state_(std::make_shared<State>(slots)) {
  std::lock_guard lock(state_->m);
  spawn_worker();
}

Watchdog::~Watchdog() {
  {
    std::unique_lock lock(state_->m);
    const bool in_flight = state_->batch && !state_->batch->done;
    lock.unlock();
    if (in_flight) wait();  // bounded by the deadlines
    lock.lock();
    state_->quit = true;
  }
  state_->work_cv.notify_all();
  std::thread worker;
  {
    std::lock_guard lock(state_->m);
    worker = std::move(state_->worker);
  }
  if (worker.joinable()) worker.join();
}

void Watchdog::spawn_worker() {  // with state_->m held
  state_->worker = start_thread(work, state_, state_->generation);
}

bool Watchdog::busy(std::size_t slot) const {
  return slot < state_->slots && state_->in_call[slot].load(std::memory_order_acquire);
}

std::uint64_t Watchdog::abandoned() const {
  return state_->abandoned.load();
}

std::uint64_t Watchdog::abandoned_still_inside() {
  return g_still_inside.load();
}

void Watchdog::start(std::vector<Call> calls) {
  auto batch = std::make_shared<Batch>();
  batch->reports.resize(calls.size());
  batch->calls = std::move(calls);
  batch->done = batch->calls.empty();
  {
    std::lock_guard lock(state_->m);
    state_->batch = std::move(batch);
  }
  state_->work_cv.notify_one();
}

// The worker: runs the calls of the current batch from `next` on, for as long as its generation
// is the live one.
void Watchdog::work(std::shared_ptr<State> s, std::uint64_t generation) {
  std::unique_lock lock(s->m);
  for (;;) {
    s->work_cv.wait(lock, [&] {
      return s->quit || generation != s->generation || (s->batch && !s->batch->done);
    });
    if (s->quit || generation != s->generation) return;
    std::shared_ptr<Batch> b = s->batch;  // keeps what the calls capture alive while one runs
    const std::size_t i = b->next;
    Call& call = b->calls[i];
    if (call.slot < s->slots && s->in_call[call.slot].load(std::memory_order_acquire)) {
      b->reports[i] = {Outcome::busy, 0};
    } else {
      if (call.slot < s->slots) s->in_call[call.slot].store(true, std::memory_order_release);
      const std::int64_t t0 = now_ns();
      b->started_ns.store(t0, std::memory_order_relaxed);
      b->deadline_ns.store(t0 + to_ns(call.deadline_s), std::memory_order_relaxed);
      b->armed.store(i + 1, std::memory_order_release);
      lock.unlock();
      // The thread's entry for foreign code: an exception that escapes a call (the engine's own
      // calls catch theirs) is that call's end, never the process's.
      try {
        call.run();
      } catch (...) {
      }
      const std::int64_t t1 = now_ns();
      if (call.slot < s->slots) s->in_call[call.slot].store(false, std::memory_order_release);
      lock.lock();
      // Abandoned while in the call: the watcher reported it and a fresh worker went on; nothing
      // of this call is published.
      if (generation != s->generation) {
        g_still_inside.fetch_sub(1);
        return;
      }
      b->reports[i] = {Outcome::done, static_cast<double>(t1 - t0) * 1e-9};
    }
    b->next = i + 1;
    if (b->next == b->calls.size()) {
      b->done = true;
      s->done_cv.notify_all();
    }
  }
}

const std::vector<Watchdog::Report>& Watchdog::wait() {
  std::unique_lock lock(state_->m);
  std::shared_ptr<Batch> b = state_->batch;
  reports_.clear();
  if (!b) return reports_;
  while (!b->done) {
    const std::size_t i = b->next;
    const std::int64_t now = now_ns();
    if (b->armed.load(std::memory_order_acquire) == i + 1) {  // the worker is inside call i
      const std::int64_t deadline = b->deadline_ns.load(std::memory_order_relaxed);
      if (now < deadline) {
        state_->done_cv.wait_until(lock, at_ns(deadline));
        continue;
      }
      // Overran: abandon this worker, report the call, go on with the next one on a fresh one.
      b->reports[i] = {
          Outcome::timed_out,
          static_cast<double>(now - b->started_ns.load(std::memory_order_relaxed)) * 1e-9};
      ++state_->generation;
      state_->abandoned.fetch_add(1);
      g_still_inside.fetch_add(1);  // taken off by the worker, under m, when its call returns
      state_->worker.detach();      // it owns the state and the batch it uses
      b->next = i + 1;
      if (b->next == b->calls.size()) b->done = true;
      spawn_worker();
      lock.unlock();
      state_->work_cv.notify_all();
      lock.lock();
    } else {
      // Not started yet (the worker is waking up): the call cannot overrun before its deadline
      // from now; by then it is armed or done.
      state_->done_cv.wait_until(lock, at_ns(now + to_ns(b->calls[i].deadline_s)));
    }
  }
  reports_ = std::move(b->reports);
  state_->batch.reset();
  return reports_;
}

}  // namespace sonde
