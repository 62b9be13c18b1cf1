// The interval warning: judged after the first ticks, once, on the mean tick cost or the
// share of missed slots.
#include "core/interval_check.hpp"

#include <gtest/gtest.h>

namespace sonde {
namespace {

TEST(IntervalCheck, SustainedIntervalNeverWarns) {
  IntervalCheck c(0.1);
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(c.observe(0.002, 0));
  EXPECT_FALSE(c.warned());
  EXPECT_TRUE(c.manifest_entry().is_null());
}

TEST(IntervalCheck, TicksAsLongAsTheIntervalWarnOnceAfterTheFirstTicks) {
  IntervalCheck c(0.005);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(c.observe(0.008, 0));  // not judged yet
  const auto w = c.observe(0.008, 0);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("the interval 0.005 s is below what this node sustains"), std::string::npos)
      << *w;
  EXPECT_NE(w->find("a tick takes 8 ms on average"), std::string::npos) << *w;
  EXPECT_NE(w->find("--interval 0.016"), std::string::npos) << *w;
  EXPECT_FALSE(c.observe(0.008, 0));  // once
  const auto m = c.manifest_entry();
  EXPECT_DOUBLE_EQ(m["interval_s"].get<double>(), 0.005);
  EXPECT_NEAR(m["mean_tick_cost_s"].get<double>(), 0.008, 1e-12);
  EXPECT_EQ(m["ticks"], 5);  // the figures the warning was based on
}

TEST(IntervalCheck, MissedSlotsWarnToo) {
  IntervalCheck c(0.01);
  for (int i = 1; i <= 4; ++i) EXPECT_FALSE(c.observe(0.001, static_cast<std::uint64_t>(i)));
  const auto w = c.observe(0.001, 5);  // 5 missed of 10 slots
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("5 of 10 slots were missed"), std::string::npos) << *w;
  EXPECT_NE(w->find("rows come about every 0.02 s"), std::string::npos) << *w;
}

}  // namespace
}  // namespace sonde
