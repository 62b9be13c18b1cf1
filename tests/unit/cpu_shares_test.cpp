// Per-core busy shares from two captured /proc/stat reads (procfs::busy_shares): at intervals
// below a clock tick a core's counters may not move; the row is then not measured as a whole
// (no cell filled and no avg/min/max over the other cores).
#include <gtest/gtest.h>

#include "core/procfs.hpp"

namespace sonde {
namespace {

procfs::ProcStat parse(const char* text) {
  auto st = procfs::parse_proc_stat(text);
  EXPECT_TRUE(st.ok());
  return st.ok() ? *st : procfs::ProcStat{};
}

// Captured on a 2-CPU node 10 ms apart (USER_HZ 100): cpu0 ran a tick, cpu1 was idle and its
// counters did not move.
constexpr const char* kBefore =
    "cpu  1000 0 500 8000 10 0 5 0 0 0\n"
    "cpu0 600 0 300 4000 5 0 3 0 0 0\n"
    "cpu1 400 0 200 4000 5 0 2 0 0 0\n"
    "intr 123\nctxt 456\n";
constexpr const char* kCpu0Moved =
    "cpu  1001 0 500 8000 10 0 5 0 0 0\n"
    "cpu0 601 0 300 4000 5 0 3 0 0 0\n"
    "cpu1 400 0 200 4000 5 0 2 0 0 0\n"
    "intr 124\nctxt 460\n";
// 20 ms later: both moved.
constexpr const char* kBothMoved =
    "cpu  1002 0 500 8002 10 0 5 0 0 0\n"
    "cpu0 602 0 300 4000 5 0 3 0 0 0\n"
    "cpu1 400 0 200 4002 5 0 2 0 0 0\n"
    "intr 125\nctxt 470\n";

TEST(BusyShares, ACoreWhoseCountersDidNotMoveLeavesTheWholeRowUnmeasured) {
  const auto before = parse(kBefore);
  const auto after = parse(kCpu0Moved);
  EXPECT_FALSE(procfs::busy_shares(before, after, before.cpu_ids).has_value());
}

TEST(BusyShares, TheNextReadCoversBothIntervalsFromTheKeptBaseline) {
  const auto before = parse(kBefore);
  const auto later = parse(kBothMoved);
  auto shares = procfs::busy_shares(before, later, before.cpu_ids);
  ASSERT_TRUE(shares.has_value());
  ASSERT_EQ(shares->size(), 2u);
  ASSERT_TRUE((*shares)[0] && (*shares)[1]);
  EXPECT_DOUBLE_EQ(*(*shares)[0], 1.0);  // two busy ticks of two
  EXPECT_DOUBLE_EQ(*(*shares)[1], 0.0);  // two idle ticks of two
}

TEST(BusyShares, NoTimePassedIsNotMeasured) {
  const auto before = parse(kBefore);
  EXPECT_FALSE(procfs::busy_shares(before, before, before.cpu_ids).has_value());
}

TEST(BusyShares, AnOfflineCpuIsLeftOutAlone) {
  const auto before = parse(kBefore);
  const auto after = parse(
      "cpu  1002 0 500 8002 10 0 5 0 0 0\n"
      "cpu0 602 0 300 4002 5 0 3 0 0 0\n");
  auto shares = procfs::busy_shares(before, after, before.cpu_ids);
  ASSERT_TRUE(shares.has_value());
  ASSERT_TRUE((*shares)[0]);
  EXPECT_DOUBLE_EQ(*(*shares)[0], 0.5);
  EXPECT_FALSE((*shares)[1]);
}

}  // namespace
}  // namespace sonde
