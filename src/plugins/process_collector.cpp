// The collector side of a process plugin (process_collector.hpp): setup, one round trip per
// tick, late replies, and restarts. How restart, backoff and disabling interact:
//  - a crash (the child exits or closes a pipe, its stream is corrupt, no setup reply within 5 s
//    after a restart) fails the tick it is seen in: one failure for the engine's count;
//  - the ticks until the child is up again fail with Errc::restarting, which the engine does not
//    count: the delay is 0.5 s after the first crash of the window and doubles with each further
//    crash within it, up to 30 s; crashes older than the window (60 s) are forgotten;
//  - the 5th crash within the window, or a restart that cannot start (the program is gone or no
//    longer trusted, setup refused, other devices than at the start), ends the restarts: every
//    tick then fails with the reason, and the engine disables the collector after its consecutive
//    failures (5), with that reason as the last error.
#include "plugins/process_collector.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <optional>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "plugins/protocol.hpp"

namespace sonde::plugins {
namespace {

constexpr double kSetupTimeoutS = 5.0;  ///< for the setup reply

class ProcessCollector final : public Collector {
 public:
  ProcessCollector(SpawnSpec spec, std::string source, std::string file, CollectorArgs args,
                   std::vector<std::string> skip_kwargs, RestartPolicy policy)
      : spec_(std::move(spec)),
        source_(std::move(source)),
        file_(std::move(file)),
        args_(std::move(args)),
        skip_kwargs_(std::move(skip_kwargs)),
        policy_(policy) {
    // The levels that can apply to this target; the engine asks for a subset.
    const TargetInfo* t = args_.target;
    if (t && t->pid > 0) {
      candidates_.push_back(Level::process);
      candidates_.push_back(Level::user);
      if (t->slurm_job) candidates_.push_back(Level::slurm);
    }
    candidates_.push_back(Level::system);
  }
  ~ProcessCollector() override { teardown(); }

  Result<void> setup() override;
  bool supports(Level l) const override { return devices_[level_index(l)].has_value(); }
  std::size_t devices(Level l) const override { return devices_[level_index(l)].value_or(0); }
  ScanNeeds needs() const override { return ScanNeeds{.io = context_, .threads = false}; }
  void snapshot(const TickContext& ctx) override;
  Result<RawValue> collect(Level level, const TickContext& ctx) override;
  void teardown() override;
  std::string_view source() const override { return source_; }
  std::string file() const override { return file_; }
  int priority() const override { return priority_; }

 private:
  enum class State { up, starting, down, given_up, stopped };

  Result<void> launch(double wait_s);
  /// A crash: the child is killed and reaped, a restart scheduled or, at the last crash the
  /// policy allows, given up.
  void child_gone(const std::string& why, double wait_s);
  /// No more restarts: every tick from now on fails with `why`.
  void give_up(std::string why);
  void fail_tick(std::string message, Errc code = Errc::failed) {
    tick_error_ = std::move(message);
    tick_code_ = code;
  }
  void warn(const std::string& message) const {
    if (args_.warn) args_.warn(fmt::format("collector '{}': {}", args_.name, message));
  }
  bool await_setup(double deadline);
  void exchange(const TickContext& ctx, double deadline);
  std::vector<Level> levels_to_ask() const;

  SpawnSpec spec_;
  std::string source_, file_;
  CollectorArgs args_;
  std::vector<std::string> skip_kwargs_;
  std::vector<Level> candidates_;
  RestartPolicy policy_;

  std::unique_ptr<ChildProcess> child_;
  std::vector<std::unique_ptr<ChildProcess>> dying_;  ///< killed, not reaped yet
  State state_ = State::stopped;
  std::array<std::optional<std::size_t>, kNumLevels> devices_{};
  bool context_ = false;
  int priority_ = 0;
  double deadline_ = 0;                       ///< of the current tick
  double setup_deadline_ = 0;                 ///< while starting
  double restart_at_ = 0;                     ///< while down
  std::deque<double> crashes_;                ///< when the child died, within the policy's window
  unsigned restarts_ = 0;                     ///< children that came up again after a crash
  std::string down_reason_;                   ///< why the last child died, or why restarts ended
  std::optional<std::uint64_t> outstanding_;  ///< a tick whose reply has not been read
  double outstanding_since_ = 0;

  // This tick.
  std::string tick_error_;
  Errc tick_code_ = Errc::failed;
  std::array<std::optional<Result<RawValue>>, kNumLevels> values_{};
  // Levels the engine asks for: learnt from the collect calls of the first tick.
  std::uint8_t asked_now_ = 0, asked_ = 0;
  bool learnt_ = false;
};

// Starts the child and sends the setup request; `wait_s` bounds the wait for a child that
// refused it, to say how it ended.
Result<void> ProcessCollector::launch(double wait_s) {
  auto child = ChildProcess::start(spec_);
  if (!child) return child.error();
  child_ = std::move(*child);
  const std::string request = protocol::setup_request(args_, candidates_, skip_kwargs_);
  if (child_->write(request, monotonic_now() + kSetupTimeoutS) != ChildProcess::Io::ok) {
    child_->kill_now(wait_s);
    const std::string ended = child_->how_it_ended();
    child_.reset();
    return make_error(Errc::vanished, ended.empty()
                                          ? std::string("it did not read its setup request")
                                          : fmt::format("it {} before answering setup", ended));
  }
  return {};
}

Result<void> ProcessCollector::setup() {
  if (auto ok = launch(0.05); !ok) return ok;
  std::string line;
  const auto io = child_->read_line(line, monotonic_now() + kSetupTimeoutS);
  std::string why;
  if (io == ChildProcess::Io::ok) {
    auto reply = protocol::parse_setup_reply(line);
    if (reply) {
      devices_ = reply->devices;
      context_ = reply->context;
      priority_ = reply->priority;
      state_ = State::up;
      return {};
    }
    why = reply.error().message;
  } else if (io == ChildProcess::Io::timeout) {
    why = fmt::format("no setup reply within {:.0f} s", kSetupTimeoutS);
  } else {
    child_->kill_now(0.2);
    why = fmt::format("it {} before answering setup", child_->how_it_ended().empty()
                                                          ? std::string("closed its stdout")
                                                          : child_->how_it_ended());
  }
  child_->stop(false);
  child_.reset();
  return make_error(Errc::unavailable, why);
}

void ProcessCollector::teardown() {
  for (auto& d : dying_) d->stop(false);
  dying_.clear();
  if (child_) {
    // A child still busy with a tick cannot read the shutdown request.
    child_->stop(!outstanding_ && state_ == State::up);
    child_.reset();
  }
  state_ = State::stopped;
}

void ProcessCollector::child_gone(const std::string& why, double wait_s) {
  const double now = monotonic_now();
  std::string ended;
  if (child_) {
    // A child that closed its stdout is usually exiting: a moment to see how it ended, within
    // this tick's deadline; the reaping is finished later otherwise.
    child_->kill_now(std::clamp(deadline_ - now, 0.0, wait_s));
    ended = child_->how_it_ended();
    if (!child_->reap_later()) dying_.push_back(std::move(child_));
    child_.reset();
  }
  outstanding_.reset();
  down_reason_ = ended.empty() ? why : fmt::format("{} ({})", why, ended);
  crashes_.push_back(now);
  while (!crashes_.empty() && crashes_.front() < now - policy_.window_s) crashes_.pop_front();
  const auto n = static_cast<unsigned>(crashes_.size());
  if (n >= policy_.max_crashes) {
    give_up(fmt::format("not restarted after {} crashes within {:.0f} s; last: {}", n,
                        policy_.window_s, down_reason_));
    return;
  }
  const double backoff = std::min(
      policy_.first_backoff_s * std::ldexp(1.0, static_cast<int>(n) - 1), policy_.max_backoff_s);
  state_ = State::down;
  restart_at_ = now + backoff;
  // The crash is one failure; the ticks until the restart are not failures (Errc::restarting).
  fail_tick(fmt::format("{}; restarting in {:.1f} s", down_reason_, backoff));
  warn(fmt::format("{}; restarting in {:.1f} s (crash {} of at most {} within {:.0f} s)",
                   down_reason_, backoff, n, policy_.max_crashes, policy_.window_s));
}

void ProcessCollector::give_up(std::string why) {
  if (child_) {
    child_->kill_now(0);
    if (!child_->reap_later()) dying_.push_back(std::move(child_));
    child_.reset();
  }
  outstanding_.reset();
  state_ = State::given_up;
  down_reason_ = std::move(why);
  fail_tick(down_reason_);
  warn(down_reason_);
}

std::vector<Level> ProcessCollector::levels_to_ask() const {
  std::vector<Level> out;
  for (Level l : candidates_) {
    if (!supports(l)) continue;
    if (learnt_ && !((asked_ >> level_index(l)) & 1u)) continue;
    out.push_back(l);
  }
  return out;
}

// Waits for the setup reply of a restarted child; true when it is up again.
bool ProcessCollector::await_setup(double deadline) {
  std::string line;
  const auto io = child_->read_line(line, std::min(deadline, setup_deadline_));
  if (io == ChildProcess::Io::timeout) {
    if (monotonic_now() >= setup_deadline_)
      child_gone(fmt::format("no setup reply within {:.0f} s after a restart", kSetupTimeoutS), 0);
    else
      fail_tick(fmt::format("restarting: waiting for its setup reply ({})", down_reason_),
                Errc::restarting);
    return false;
  }
  if (io != ChildProcess::Io::ok) {
    child_gone("it closed its stdout before answering setup", 0.02);
    return false;
  }
  auto reply = protocol::parse_setup_reply(line);
  if (!reply) {
    give_up("not restarted: setup failed after a restart: " + reply.error().message);
    return false;
  }
  if (reply->devices != devices_) {
    give_up(
        "not restarted: after a restart it reports other devices than at the start (the columns "
        "are fixed)");
    return false;
  }
  context_ = reply->context;
  state_ = State::up;
  ++restarts_;
  warn(fmt::format("restarted (restart {} of this run) after: {}", restarts_, down_reason_));
  return true;
}

void ProcessCollector::exchange(const TickContext& ctx, double deadline) {
  std::string line;
  // The next line from the child into `line`; false when the tick failed (past the deadline:
  // `late()` says why) or the child went away.
  const auto read_reply = [&](const auto& late) {
    const auto io = child_->read_line(line, deadline);
    if (io == ChildProcess::Io::timeout) {
      fail_tick(late());
      return false;
    }
    if (io != ChildProcess::Io::ok) {
      child_gone(io == ChildProcess::Io::closed ? "it closed its stdout" : "unreadable reply",
                 0.02);
      return false;
    }
    return true;
  };
  // One request at a time: a child still answering an earlier tick gets no new one; its late
  // answer is read and dropped when it comes.
  while (outstanding_) {
    if (!read_reply([&] {
          return fmt::format(
              "no reply within its deadline of {:.1f} ms: still busy with tick {} "
              "(sent {:.0f} ms ago)",
              args_.deadline_s * 1e3, *outstanding_, (monotonic_now() - outstanding_since_) * 1e3);
        }))
      return;
    auto reply = protocol::parse_tick_reply(line, args_.handler_accepts);
    if (!reply || reply->tick == *outstanding_) outstanding_.reset();
  }

  const auto levels = levels_to_ask();
  const auto sent = child_->write(protocol::tick_request(ctx, levels, context_), deadline);
  if (sent != ChildProcess::Io::ok) {
    // A request cut in the middle leaves the stream unusable: start over.
    child_gone(sent == ChildProcess::Io::closed ? "it closed its stdin"
                                                : "its tick request could not be written in time",
               sent == ChildProcess::Io::closed ? 0.02 : 0);
    return;
  }
  outstanding_ = ctx.tick;
  outstanding_since_ = monotonic_now();
  for (;;) {
    if (!read_reply([&] {
          return fmt::format("no reply within its deadline of {:.1f} ms", args_.deadline_s * 1e3);
        }))
      return;
    auto reply = protocol::parse_tick_reply(line, args_.handler_accepts);
    if (!reply) {  // cannot be matched to a request: take it as this tick's
      outstanding_.reset();
      fail_tick(reply.error().message);
      return;
    }
    if (reply->tick != ctx.tick) continue;  // a late answer to an earlier tick
    outstanding_.reset();
    if (reply->error) {
      fail_tick(*reply->error);
      return;
    }
    values_ = std::move(reply->values);
    return;
  }
}

void ProcessCollector::snapshot(const TickContext& ctx) {
  const double now = monotonic_now();
  const double deadline = now + args_.deadline_s;
  deadline_ = deadline;
  tick_error_.clear();
  tick_code_ = Errc::failed;
  for (auto& v : values_) v.reset();
  if (!learnt_ && asked_now_) {
    asked_ = asked_now_;
    learnt_ = true;
  }
  asked_now_ = 0;
  std::erase_if(dying_, [](const std::unique_ptr<ChildProcess>& d) { return d->reap_later(); });

  if (state_ == State::stopped) {
    fail_tick("not started");
    return;
  }
  if (state_ == State::given_up) {
    fail_tick(down_reason_);
    return;
  }
  if (state_ == State::down) {
    if (now < restart_at_) {
      fail_tick(fmt::format("{}; restarting in {:.1f} s", down_reason_, restart_at_ - now),
                Errc::restarting);
      return;
    }
    if (auto ok = launch(0); !ok) {
      // A child that died before reading its setup request crashed; one that cannot be started
      // (gone, no longer trusted, exec failed) will not start on the next try either.
      if (ok.error().code == Errc::vanished)
        child_gone(ok.error().message, 0);
      else
        give_up("not restarted: " + ok.error().message);
      return;
    }
    state_ = State::starting;
    setup_deadline_ = now + kSetupTimeoutS;
  }
  child_->pump_stderr();
  if (state_ == State::starting && !await_setup(deadline)) return;
  exchange(ctx, deadline);
}

Result<RawValue> ProcessCollector::collect(Level level, const TickContext&) {
  asked_now_ = static_cast<std::uint8_t>(asked_now_ | (1u << level_index(level)));
  if (!tick_error_.empty()) return make_error(tick_code_, tick_error_);
  auto& v = values_[level_index(level)];
  if (v) return std::move(*v);
  return make_error(Errc::failed,
                    fmt::format("the reply has no value for level '{}'", level_name(level)));
}

}  // namespace

std::unique_ptr<Collector> make_child_collector(SpawnSpec spec, std::string source,
                                                std::string file, CollectorArgs args,
                                                std::vector<std::string> skip_kwargs,
                                                RestartPolicy policy) {
  return std::make_unique<ProcessCollector>(std::move(spec), std::move(source), std::move(file),
                                            std::move(args), std::move(skip_kwargs), policy);
}

}  // namespace sonde::plugins
