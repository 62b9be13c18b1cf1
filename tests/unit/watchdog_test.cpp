#include "core/watchdog.hpp"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace sonde {
namespace {

TEST(Watchdog, RunsJobsOnItsWorker) {
  Watchdog w;
  std::atomic<int> runs{0};
  std::thread::id worker;
  EXPECT_EQ(w.run(
                [&] {
                  worker = std::this_thread::get_id();
                  ++runs;
                },
                5.0),
            Watchdog::Outcome::done);
  EXPECT_EQ(w.run([&] { ++runs; }, 5.0), Watchdog::Outcome::done);
  EXPECT_EQ(runs.load(), 2);
  EXPECT_NE(worker, std::this_thread::get_id());
}

TEST(Watchdog, LateJobTimesOutThenReportsBusyUntilItReturns) {
  Watchdog w;
  std::atomic<bool> release{false};
  EXPECT_EQ(w.run(
                [&] {
                  while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                },
                0.02),
            Watchdog::Outcome::timed_out);
  EXPECT_TRUE(w.busy());
  EXPECT_EQ(w.run([] {}, 0.02), Watchdog::Outcome::busy);
  release = true;
  while (w.busy()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(w.run([] {}, 5.0), Watchdog::Outcome::done);
}

TEST(Watchdog, AbandonedHungWorkerDoesNotBlockDestruction) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  {
    Watchdog w;
    EXPECT_EQ(w.run(
                  [release] {
                    while (!*release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                  },
                  0.01),
              Watchdog::Outcome::timed_out);
    w.abandon();
  }                 // returns without joining
  *release = true;  // let the detached worker end before the test binary exits
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  SUCCEED();
}

}  // namespace
}  // namespace sonde
