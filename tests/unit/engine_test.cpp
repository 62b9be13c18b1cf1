// The engine with fake collectors on the real /proc: guarded (watchdog) collectors that hang,
// throw or overrun, and an engine destroyed while a worker is still inside a collector.
#include "core/engine.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sonde {
namespace {

using namespace std::chrono_literals;

enum class Behaviour { value, hang_once, hang_until_released, throw_std, throw_other };

// What the test and a fake collector share; outlives both (the test owns it).
struct Probe {
  std::atomic<bool> release{false};
  std::atomic<int> inside{0};
  std::atomic<int> calls{0};
  /// Set by a collector destroyed while a call is inside it (the use-after-free of issue 13).
  std::atomic<bool> destroyed_while_inside{false};
  std::atomic<bool> destroyed{false};
};

class FakeCollector final : public Collector {
 public:
  FakeCollector(Behaviour b, bool guarded, Probe* probe)
      : behaviour_(b), guarded_(guarded), probe_(probe) {}
  ~FakeCollector() override {
    if (probe_->inside.load() > 0) probe_->destroyed_while_inside = true;
    probe_->destroyed = true;
    value_ = -1;
  }
  Result<RawValue> collect(Level, const TickContext& ctx) override {
    ++probe_->inside;
    const int n = probe_->calls++;
    switch (behaviour_) {
      case Behaviour::value: break;
      case Behaviour::hang_once:
        if (n == 0) std::this_thread::sleep_for(300ms);
        break;
      case Behaviour::hang_until_released:
        while (!probe_->release) std::this_thread::sleep_for(2ms);
        break;
      case Behaviour::throw_std: --probe_->inside; throw std::runtime_error("the fake throws");
      case Behaviour::throw_other: --probe_->inside; throw 42;
    }
    // Touches the collector after the wait: freed memory under ASan if it was destroyed.
    const double v = value_ + static_cast<double>(ctx.tick) * 0;
    --probe_->inside;
    return RawValue(Scalar{v});
  }
  bool needs_watchdog() const override { return guarded_; }

 private:
  Behaviour behaviour_;
  bool guarded_;
  Probe* probe_;
  double value_ = 7;
};

struct FakeSpec {
  std::string name;
  Behaviour behaviour;
  bool guarded;
  Probe* probe;
};

// A registry with one target per fake and an engine over them (system level only).
struct Setup {
  Registry registry;
  std::unique_ptr<Engine> engine;
};

std::unique_ptr<Setup> make_engine(const std::vector<FakeSpec>& fakes, double timeout_s = 0.05) {
  auto s = std::make_unique<Setup>();
  std::string yaml = "interval: 0.5\nlevels: [system]\ncollectors:\n";
  for (const FakeSpec& f : fakes) {
    s->registry.add({"test.fake_" + f.name, "a fake", {}, false, [f](const CollectorArgs&) {
                       return std::make_unique<FakeCollector>(f.behaviour, f.guarded, f.probe);
                     }});
    yaml += fmt::format(
        "  {0}:\n    _target_: test.fake_{0}\n    timeout: {1}\n"
        "    handler: {{_target_: ScalarHandler, column: {0}_value}}\n",
        f.name, timeout_s);
  }
  Config cfg;
  auto merged = merge_config_text(cfg, yaml, "engine_test.yaml");
  EXPECT_TRUE(merged.ok()) << (merged ? "" : merged.error().message);
  EngineOptions eo;
  eo.warn = [](const std::string&) {};
  auto e = Engine::create(cfg, eo, s->registry);
  EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
  if (e) s->engine = std::move(*e);
  return s;
}

double column(const Engine& e, const Engine::Tick& t, const std::string& name) {
  const auto& cols = e.columns(Level::system);
  for (std::size_t i = 0; i < cols.size(); ++i)
    if (cols[i] == name) return t.rows[level_index(Level::system)][i];
  ADD_FAILURE() << "no column " << name;
  return 0;
}

const CollectorSlot& slot(const Engine& e, const std::string& name) {
  for (const auto& s : e.collectors())
    if (s.spec.name == name) return s;
  throw std::runtime_error("no slot " + name);
}

TEST(Engine, GuardedAndInlineCollectorsBothAnswer) {
  Probe a, b;
  auto s = make_engine(
      {{"inline", Behaviour::value, false, &a}, {"guarded", Behaviour::value, true, &b}});
  ASSERT_TRUE(s->engine);
  for (int i = 0; i < 3; ++i) {
    const auto& t = s->engine->tick();
    EXPECT_EQ(column(*s->engine, t, "inline_value"), 7);
    EXPECT_EQ(column(*s->engine, t, "guarded_value"), 7);
  }
  EXPECT_EQ(slot(*s->engine, "guarded").errors, 0u);
  EXPECT_EQ(s->engine->abandoned_workers(), 0u);
}

TEST(Engine, HungGuardedCallIsAbandonedAndTheTickGoesOn) {
  Probe hung, after;
  auto s = make_engine({{"hung", Behaviour::hang_until_released, true, &hung},
                        {"after", Behaviour::value, true, &after}});
  ASSERT_TRUE(s->engine);
  const auto& t = s->engine->tick();
  // The collector after the hung one still answered in this tick, on a fresh worker.
  EXPECT_EQ(column(*s->engine, t, "after_value"), 7);
  EXPECT_TRUE(std::isnan(column(*s->engine, t, "hung_value")));
  EXPECT_NE(slot(*s->engine, "hung").last_error.find("no answer within its deadline"),
            std::string::npos);
  EXPECT_EQ(s->engine->abandoned_workers(), 1u);
  // Still inside: the next tick does not call it again.
  s->engine->tick();
  EXPECT_NE(slot(*s->engine, "hung").last_error.find("still busy"), std::string::npos);
  EXPECT_EQ(hung.calls.load(), 1);
  EXPECT_EQ(column(*s->engine, s->engine->tick(), "after_value"), 7);
  hung.release = true;
  while (hung.inside.load() > 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(5ms);  // the abandoned thread clears the slot's busy flag
  // Back: answers again (and never in the hung call's name: that answer was dropped).
  const auto& back = s->engine->tick();
  EXPECT_EQ(column(*s->engine, back, "hung_value"), 7);
  EXPECT_EQ(hung.calls.load(), 2);
}

TEST(Engine, OverrunThatReturnsIsReportedNotUsed) {
  Probe p;
  auto s = make_engine({{"slow", Behaviour::hang_once, true, &p}});
  ASSERT_TRUE(s->engine);
  const auto& t = s->engine->tick();
  EXPECT_TRUE(std::isnan(column(*s->engine, t, "slow_value")));
  std::this_thread::sleep_for(350ms);  // the late call returns; its answer is dropped
  EXPECT_EQ(column(*s->engine, s->engine->tick(), "slow_value"), 7);
  EXPECT_EQ(slot(*s->engine, "slow").errors, 1u);
}

TEST(Engine, HungCollectorIsDisabledAfterRepeatedFailuresAndKept) {
  Probe p;
  auto s = make_engine({{"hung", Behaviour::hang_until_released, true, &p}});
  ASSERT_TRUE(s->engine);
  for (int i = 0; i < 6; ++i) s->engine->tick();
  EXPECT_EQ(slot(*s->engine, "hung").state, CollectorState::failed);
  s->engine.reset();
  p.release = true;
  while (p.inside.load() > 0) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(p.destroyed_while_inside.load());
  EXPECT_FALSE(p.destroyed.load());  // kept alive forever: a worker was inside it
}

// Issue 13: an engine destroyed while a worker is still inside a guarded collector must not
// destroy that collector (nor what it reads) under it. Under ASan the late return also reads the
// collector's memory.
TEST(Engine, DestroyedWithAWorkerInsideACollectorLeavesItAlive) {
  Probe p;
  {
    auto s = make_engine({{"hung", Behaviour::hang_until_released, true, &p}});
    ASSERT_TRUE(s->engine);
    s->engine->tick();  // times out; the worker stays inside
    ASSERT_EQ(p.inside.load(), 1);
  }  // engine destroyed here, not yet disabled
  EXPECT_FALSE(p.destroyed_while_inside.load());
  p.release = true;
  while (p.inside.load() > 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(p.destroyed.load());
}

TEST(Engine, DestroyedWhenIdleDestroysItsCollectors) {
  Probe p;
  {
    auto s = make_engine({{"guarded", Behaviour::value, true, &p}});
    ASSERT_TRUE(s->engine);
    s->engine->tick();
  }
  EXPECT_TRUE(p.destroyed.load());
}

TEST(Engine, ExceptionsBecomeTheTicksFailureNamingTheCollector) {
  for (bool guarded : {false, true}) {
    Probe a, b, ok;
    auto s = make_engine({{"thrower", Behaviour::throw_std, guarded, &a},
                          {"odd", Behaviour::throw_other, guarded, &b},
                          {"ok", Behaviour::value, guarded, &ok}});
    ASSERT_TRUE(s->engine);
    const auto& t = s->engine->tick();
    EXPECT_TRUE(std::isnan(column(*s->engine, t, "thrower_value")));
    EXPECT_EQ(column(*s->engine, t, "ok_value"), 7);
    const std::string& e1 = slot(*s->engine, "thrower").last_error;
    EXPECT_NE(e1.find("collector 'thrower'"), std::string::npos) << e1;
    EXPECT_NE(e1.find("the fake throws"), std::string::npos) << e1;
    const std::string& e2 = slot(*s->engine, "odd").last_error;
    EXPECT_NE(e2.find("collector 'odd' threw"), std::string::npos) << e2;
    EXPECT_EQ(s->engine->abandoned_workers(), 0u);
  }
}

}  // namespace
}  // namespace sonde
