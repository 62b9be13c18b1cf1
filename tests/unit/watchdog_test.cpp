#include "core/watchdog.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace sonde {
namespace {

using namespace std::chrono_literals;

Watchdog::Call call(std::size_t slot, double deadline_s, std::function<void()> run) {
  return {slot, deadline_s, std::move(run)};
}

TEST(Watchdog, RunsABatchInOrderOnItsWorker) {
  Watchdog w(3);
  auto order = std::make_shared<std::vector<int>>();
  auto where = std::make_shared<std::thread::id>();
  w.start({call(0, 5.0,
                [order, where] {
                  *where = std::this_thread::get_id();
                  order->push_back(0);
                }),
           call(1, 5.0, [order] { order->push_back(1); }),
           call(2, 5.0, [order] { order->push_back(2); })});
  const auto& reports = w.wait();
  ASSERT_EQ(reports.size(), 3u);
  for (const auto& r : reports) EXPECT_EQ(r.outcome, Watchdog::Outcome::done);
  EXPECT_EQ(*order, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(*where, std::this_thread::get_id());
  // The same worker takes the next batch.
  auto again = std::make_shared<std::thread::id>();
  w.start({call(0, 5.0, [again] { *again = std::this_thread::get_id(); })});
  EXPECT_EQ(w.wait()[0].outcome, Watchdog::Outcome::done);
  EXPECT_EQ(*again, *where);
  EXPECT_EQ(w.abandoned(), 0u);
}

TEST(Watchdog, EmptyBatchIsDoneAtOnce) {
  Watchdog w(1);
  w.start({});
  EXPECT_TRUE(w.wait().empty());
}

TEST(Watchdog, LateCallIsAbandonedTheRestGoesOnAndTheSlotIsBusyUntilItReturns) {
  Watchdog w(2);
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto second_ran = std::make_shared<std::atomic<bool>>(false);
  w.start({call(0, 0.02,
                [release] {
                  while (!*release) std::this_thread::sleep_for(1ms);
                }),
           call(1, 5.0, [second_ran] { *second_ran = true; })});
  const auto first = w.wait();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].outcome, Watchdog::Outcome::timed_out);
  EXPECT_GE(first[0].spent_s, 0.02);
  EXPECT_EQ(first[1].outcome, Watchdog::Outcome::done);
  EXPECT_TRUE(*second_ran);
  EXPECT_EQ(w.abandoned(), 1u);
  EXPECT_TRUE(w.busy(0));
  EXPECT_FALSE(w.busy(1));
  // Slot 0 is not run again while its old call is still inside; slot 1 is.
  auto ran = std::make_shared<std::atomic<int>>(0);
  w.start({call(0, 5.0, [ran] { ++*ran; }), call(1, 5.0, [ran] { ++*ran; })});
  const auto second = w.wait();
  EXPECT_EQ(second[0].outcome, Watchdog::Outcome::busy);
  EXPECT_EQ(second[1].outcome, Watchdog::Outcome::done);
  EXPECT_EQ(ran->load(), 1);
  *release = true;
  while (w.busy(0)) std::this_thread::sleep_for(1ms);
  w.start({call(0, 5.0, [ran] { ++*ran; })});
  EXPECT_EQ(w.wait()[0].outcome, Watchdog::Outcome::done);
  EXPECT_EQ(ran->load(), 2);
}

TEST(Watchdog, AbandonedHungWorkerDoesNotBlockDestruction) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto left = std::make_shared<std::atomic<bool>>(false);
  {
    Watchdog w(1);
    w.start({call(0, 0.01, [release, left] {
      while (!*release) std::this_thread::sleep_for(1ms);
      *left = true;
    })});
    EXPECT_EQ(w.wait()[0].outcome, Watchdog::Outcome::timed_out);
  }  // returns without joining the abandoned thread
  EXPECT_FALSE(*left);
  *release = true;  // the abandoned thread ends on its own, touching only what it owns
  while (!*left) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(10ms);
  SUCCEED();
}

TEST(Watchdog, DestructionWaitsForABatchInFlight) {
  auto ran = std::make_shared<std::atomic<bool>>(false);
  {
    Watchdog w(1);
    w.start({call(0, 5.0, [ran] {
      std::this_thread::sleep_for(20ms);
      *ran = true;
    })});
  }
  EXPECT_TRUE(*ran);
}

}  // namespace
}  // namespace sonde
