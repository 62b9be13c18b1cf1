// The Sampler's schedule on an injected clock (SamplerClock): time moves only when the Sampler
// waits or a tick is made to cost time, so the rules are checked exactly and without waiting:
// missed slots counted and never invented, the quarter-interval rule, the duration, the wait
// before the final sample of a target that exited, and the SIGKILL 30 s after an interrupt.
#include "core/sampler.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/config.hpp"

extern char** environ;

namespace sonde {
namespace {

/// Virtual monotonic time. A wait returns at once with the fds' real events when there are any,
/// else moves the time to its deadline (plus a scripted lateness) and returns 0.
class FakeClock final : public SamplerClock {
 public:
  double t = 1000;
  std::map<int, double> late;  ///< n-th wait (0-based) that times out returns this much late
  int waits = 0;
  std::vector<double> sleeps;  ///< deadlines of sleep_until

  double now() override { return t; }
  int wait(pollfd* fds, nfds_t n, double deadline) override {
    const int r = ::poll(fds, n, 0);
    if (r != 0) return r;
    // Nothing yet: a real event may still be on its way (a child that is exiting); give it a
    // moment of real time before the virtual deadline is declared reached.
    if (const int again = ::poll(fds, n, 50); again != 0) return again;
    t = std::max(t, deadline) + (late.count(waits) ? late[waits] : 0.0);
    ++waits;
    return 0;
  }
  void sleep_until(double deadline) override {
    sleeps.push_back(deadline);
    t = std::max(t, deadline);
  }
};

/// Records the virtual time of each sample; `on_tick` may move the clock (a tick's cost) or act.
class Recorder final : public SampleListener {
 public:
  explicit Recorder(FakeClock& c) : clock(c) {}
  bool on_sample(const Engine::Tick&) override {
    times.push_back(clock.t);
    if (on_tick) on_tick(times.size() - 1);
    return times.size() < max_ticks;
  }
  FakeClock& clock;
  std::vector<double> times;
  std::function<void(std::size_t)> on_tick;
  std::size_t max_ticks = 1000;
};

/// An engine without collectors (the system level's time columns only): the Sampler's schedule
/// alone is under test.
std::unique_ptr<Engine> make_engine(double interval_s) {
  static const Registry registry;
  Config cfg;
  auto merged =
      merge_config_text(cfg, fmt::format("interval: {}\nlevels: [system]\n", interval_s), "t.yaml");
  EXPECT_TRUE(merged.ok()) << (merged ? "" : merged.error().message);
  EngineOptions eo;
  eo.warn = [](const std::string&) {};
  auto e = Engine::create(cfg, eo, registry);
  EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
  return e ? std::move(*e) : nullptr;
}

TEST(SamplerClock, SlotsOnTheAbsoluteScheduleAndTheDuration) {
  auto engine = make_engine(1);
  FakeClock clock;
  SamplerOptions o;
  o.clock = &clock;
  o.duration_s = 4;
  Sampler s(*engine, o, nullptr);
  Recorder rec(clock);
  EXPECT_EQ(s.run(rec), Sampler::Stop::duration);
  EXPECT_EQ(rec.times, (std::vector<double>{1000, 1001, 1002, 1003, 1004}));
  EXPECT_EQ(s.missed(), 0u);
}

TEST(SamplerClock, ASlowTickMissesSlotsThatAreCountedNotInvented) {
  auto engine = make_engine(1);
  FakeClock clock;
  SamplerOptions o;
  o.clock = &clock;
  o.duration_s = 7;
  Sampler s(*engine, o, nullptr);
  Recorder rec(clock);
  rec.on_tick = [&](std::size_t i) {
    if (i == 1) clock.t += 2.5;  // the tick at 1001 ends at 1003.5: slots 1002 and 1003 pass
  };
  EXPECT_EQ(s.run(rec), Sampler::Stop::duration);
  EXPECT_EQ(rec.times, (std::vector<double>{1000, 1001, 1004, 1005, 1006, 1007}));
  EXPECT_EQ(s.missed(), 2u);
}

TEST(SamplerClock, ASlotCloserThanAQuarterIntervalToALateTickIsSkipped) {
  auto engine = make_engine(1);
  FakeClock clock;
  clock.late[1] = 0.9;  // the wait for slot 1002 returns at 1002.9
  SamplerOptions o;
  o.clock = &clock;
  o.duration_s = 5;
  Sampler s(*engine, o, nullptr);
  Recorder rec(clock);
  EXPECT_EQ(s.run(rec), Sampler::Stop::duration);
  // 1003 is 0.1 s after the late tick (< 0.25 s): skipped and counted; 1004 is the next row.
  EXPECT_EQ(rec.times, (std::vector<double>{1000, 1001, 1002.9, 1004, 1005}));
  EXPECT_EQ(s.missed(), 1u);
  for (std::size_t i = 1; i < rec.times.size(); ++i)
    EXPECT_GE(rec.times[i] - rec.times[i - 1], 0.25) << "a row over a sliver of time";
}

// A child (a shell, started with posix_spawn: no code of this process runs in it, which keeps
// ThreadSanitizer's fork rules out of the test) that exits when its stdin closes, or that ignores
// SIGTERM.
struct Child {
  pid_t pid = -1;
  int release = -1;  ///< closing it makes the child exit
  explicit Child(bool ignore_term) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, p[0], 0);
    const char* script = ignore_term ? "trap '' TERM; read x; exit 3" : "read x; exit 3";
    char* const argv[] = {const_cast<char*>("sh"), const_cast<char*>("-c"),
                          const_cast<char*>(script), nullptr};
    EXPECT_EQ(::posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    ::close(p[0]);
    release = p[1];
  }
  ~Child() {
    if (release >= 0) ::close(release);
  }
  void exit_now() {
    ::close(release);
    release = -1;
  }
  int reap() {
    int ws = 0;
    ::waitpid(pid, &ws, 0);
    return ws;
  }
};

TEST(SamplerClock, TheFinalSampleWaitsAQuarterIntervalAfterTheLastTick) {
  for (double interval : {1.0, 20.0}) {
    auto engine = make_engine(interval);
    FakeClock clock;
    Child child(false);
    SamplerOptions o;
    o.clock = &clock;
    o.target_pid = child.pid;
    o.target_is_child = true;
    Sampler s(*engine, o, nullptr);
    Recorder rec(clock);
    rec.on_tick = [&](std::size_t i) {
      if (i != 2) return;
      child.exit_now();  // exits right after the third tick
      siginfo_t info{};  // (real time) until it has exited, without reaping it
      ::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOWAIT);
    };
    EXPECT_EQ(s.run(rec), Sampler::Stop::target_exited);
    child.reap();
    ASSERT_EQ(rec.times.size(), 4u);
    // The final sample: a quarter of the interval after the last tick, at most 2 s.
    const double wait = std::min(interval / 4, 2.0);
    ASSERT_EQ(clock.sleeps.size(), 1u);
    EXPECT_DOUBLE_EQ(clock.sleeps[0], rec.times[2] + wait);
    EXPECT_DOUBLE_EQ(rec.times[3], rec.times[2] + wait);
    ASSERT_TRUE(s.final_interval_s().has_value());
    EXPECT_DOUBLE_EQ(*s.final_interval_s(), wait);
  }
}

TEST(SamplerClock, ACommandThatIgnoresTheInterruptIsKilledThirtySecondsLater) {
  auto engine = make_engine(1);
  FakeClock clock;
  SignalGuard guard(/*with_sigchld=*/false);
  Child child(/*ignore_term=*/true);
  SamplerOptions o;
  o.clock = &clock;
  o.on_signal = SamplerOptions::OnSignal::forward_to_child;
  o.target_pid = child.pid;
  o.target_is_child = true;
  Sampler s(*engine, o, &guard);
  Recorder rec(clock);
  double interrupted_at = 0;
  rec.on_tick = [&](std::size_t i) {
    if (i == 1) {
      interrupted_at = clock.t;
      ::raise(SIGTERM);  // to sonde alone: passed on to the command, which ignores it
    }
  };
  EXPECT_EQ(s.run(rec), Sampler::Stop::target_exited);
  const int ws = child.reap();
  EXPECT_TRUE(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL) << ws;
  EXPECT_TRUE(s.killed_child());
  // Sampled on schedule meanwhile (no spinning: one row per slot), killed 30 s after the
  // interrupt, then the final sample.
  // (A slot or two more when the killed child takes longer than the fake wait's 50 ms to go.)
  ASSERT_GE(rec.times.size(), 32u);
  EXPECT_LE(rec.times.size(), 36u) << "sampled off the schedule";
  EXPECT_GE(clock.t, interrupted_at + 30);
  EXPECT_LE(clock.t, interrupted_at + 33);
}

}  // namespace
}  // namespace sonde
