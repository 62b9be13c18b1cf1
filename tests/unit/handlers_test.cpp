#include "core/handlers.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace sonde {
namespace {

std::unique_ptr<Handler> make(HandlerSpec spec) {
  auto h = make_handler(spec);
  EXPECT_TRUE(h.ok()) << (h.ok() ? "" : h.error().message);
  return std::move(*h);
}

TEST(Handlers, ScalarWritesOneColumn) {
  HandlerSpec spec{.target = "ScalarHandler", .column = "memory"};
  auto h = make(spec);
  EXPECT_EQ(h->columns(1), std::vector<std::string>{"memory"});
  std::vector<double> out(1);
  ASSERT_TRUE(h->handle(Level::process, Scalar{2.5}, 0, out).ok());
  EXPECT_EQ(out[0], 2.5);
  EXPECT_FALSE(h->handle(Level::process, Counters{{1}}, 0, out).ok());
}

TEST(Handlers, PerDeviceAggregateColumnsAndStats) {
  auto h = make({.target = "PerDeviceAggregateHandler", .prefix = "cpu_util_"});
  EXPECT_EQ(h->columns(2), (std::vector<std::string>{"cpu_util_0", "cpu_util_1", "cpu_util_avg",
                                                     "cpu_util_min", "cpu_util_max"}));
  std::vector<double> out(5);
  ASSERT_TRUE(h->handle(Level::system, PerDevice{{10, 30}, std::nullopt}, 0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{10, 30, 20, 10, 30}));
  // An explicit mean wins (a CPU quota, or time not placed on a core).
  ASSERT_TRUE(h->handle(Level::process, PerDevice{{10, 30}, 75.0}, 0, out).ok());
  EXPECT_EQ(out[2], 75.0);
  // NaN entries are left out of the aggregates.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ASSERT_TRUE(h->handle(Level::system, PerDevice{{nan, 40}, std::nullopt}, 0, out).ok());
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[2], 40);
  EXPECT_EQ(out[3], 40);
  // Wrong number of devices is an error, not a silent truncation.
  EXPECT_FALSE(h->handle(Level::system, PerDevice{{1, 2, 3}, std::nullopt}, 0, out).ok());
}

TEST(Handlers, PerDeviceMultiAggregateFansOutPerMetric) {
  auto h = make(
      {.target = "PerDeviceMultiAggregateHandler", .prefix = "gpu_", .metrics = {"util", "mem"}});
  auto cols = h->columns(1);
  EXPECT_EQ(cols,
            (std::vector<std::string>{"gpu_util_0", "gpu_util_avg", "gpu_util_min", "gpu_util_max",
                                      "gpu_mem_0", "gpu_mem_avg", "gpu_mem_min", "gpu_mem_max"}));
  std::vector<double> out(8);
  ASSERT_TRUE(h->handle(Level::system, MultiPerDevice{{{50}, {2}}}, 0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{50, 50, 50, 50, 2, 2, 2, 2}));
  EXPECT_FALSE(h->handle(Level::system, MultiPerDevice{{{50}}}, 0, out).ok());
}

TEST(Handlers, CumulativeRateNotMeasuredIsEmptyAndRestartsTheBaseline) {
  auto h = make({.target = "CumulativeRateHandler", .columns = {"a"}});
  std::vector<double> out(1);
  ASSERT_TRUE(h->handle(Level::process, Counters{{100}}, 1.0, out).ok());
  ASSERT_TRUE(h->handle(Level::process, Counters{{200}}, 2.0, out).ok());
  EXPECT_EQ(out[0], 100);
  // Not readable (permission): empty, and not a failure.
  ASSERT_TRUE(h->handle(Level::process, Counters{{0}, false}, 3.0, out).ok());
  EXPECT_TRUE(std::isnan(out[0]));
  ASSERT_TRUE(h->handle(Level::process, Counters{{500}}, 4.0, out).ok());
  EXPECT_TRUE(std::isnan(out[0]));  // a new baseline
  ASSERT_TRUE(h->handle(Level::process, Counters{{600}}, 5.0, out).ok());
  EXPECT_EQ(out[0], 100);
}

TEST(Handlers, CumulativeRateIsPerLevelAndNeverNegative) {
  auto h = make({.target = "CumulativeRateHandler", .columns = {"a", "b"}});
  std::vector<double> out(2);
  ASSERT_TRUE(h->handle(Level::process, Counters{{100, 10}}, 1.0, out).ok());
  // First tick: no interval yet, not measured (never a made-up 0).
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  ASSERT_TRUE(h->handle(Level::system, Counters{{5000, 0}}, 1.0, out).ok());
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));  // its own first tick at this level
  ASSERT_TRUE(h->handle(Level::process, Counters{{300, 10}}, 3.0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{100, 0}));  // 200 over 2 s
  ASSERT_TRUE(h->handle(Level::system, Counters{{5500, 4}}, 2.0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{500, 4}));
  // A counter that goes back gives 0 and becomes the new baseline.
  ASSERT_TRUE(h->handle(Level::process, Counters{{50, 20}}, 4.0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{0, 10}));
  ASSERT_TRUE(h->handle(Level::process, Counters{{150, 20}}, 5.0, out).ok());
  EXPECT_EQ(out, (std::vector<double>{100, 0}));
  EXPECT_FALSE(h->handle(Level::process, Counters{{1}}, 6.0, out).ok());
  EXPECT_FALSE(h->handle(Level::process, Scalar{1}, 6.0, out).ok());
}

TEST(Handlers, NoOpHasNoColumns) {
  auto h = make({.target = "NoOpHandler"});
  EXPECT_TRUE(h->columns(4).empty());
}

TEST(Handlers, UnknownHandlerIsAConfigError) {
  auto h = make_handler({.target = "FancyHandler", .origin = {"x.yaml", 7, 3}});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().code, Errc::config);
  EXPECT_NE(h.error().message.find("x.yaml:7:3"), std::string::npos);
}

}  // namespace
}  // namespace sonde

namespace sonde {
namespace {
TEST(Handlers, NonFiniteCountersAreAnErrorAndKeepTheBaseline) {
  auto h = make_handler({.target = "CumulativeRateHandler", .columns = {"a", "b"}});
  ASSERT_TRUE(h.ok());
  std::vector<double> out(2);
  ASSERT_TRUE((*h)->handle(Level::system, Counters{{10, 10}}, 1.0, out).ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto r = (*h)->handle(Level::system, Counters{{nan, 20}}, 2.0, out);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("counter a"), std::string::npos);
  ASSERT_TRUE((*h)->handle(Level::system, Counters{{30, 30}}, 3.0, out).ok());
  EXPECT_EQ(out[0], 10);  // (30 - 10) / 2 s: the NaN did not move the baseline
}
}  // namespace
}  // namespace sonde
