#pragma once
// The outputs of a sampling session behind one interface. A Sampler (src/core/sampler.hpp) calls
// a SinkSet after every tick; the SinkSet calls each Sink and applies the error policy: a sink that
// fails (disk full, a broken database) is reported once and disabled, never ends the run or the
// command, and what it already wrote stays valid; a sink whose reader went away (the JSON stream's
// EPIPE) ends sampling.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/live_summary.hpp"
#include "core/sampler.hpp"

namespace sonde {

/// What is known once sampling starts (after the command was started), for the manifest.
struct RunStart {
  std::optional<int> target_pid;        ///< run: the command's pid
  std::optional<double> baseline_time;  ///< run: monotonic time of the baseline tick
  nlohmann::json priority;              ///< the sampling thread's priority; null: not recorded
  nlohmann::json level_sources;  ///< run: where each level's figures come from; null: not recorded
};

/// The end of a session.
struct RunEnd {
  RunOutcome outcome;
  nlohmann::json summary;
  std::uint64_t ticks = 0;         ///< rows written (the baseline tick not counted)
  std::uint64_t ticks_missed = 0;  ///< slots of the schedule without a sample
  /// The final interval, when the target exited less than a quarter interval after a tick.
  std::optional<double> short_final_interval_s;
  nlohmann::json degraded;  ///< the engine's degradation (/proc listed less often); null: none
  /// The node did not sustain the interval (Sampler::interval_warning); null: it did.
  nlohmann::json interval_warning;
  /// Facts that changed no figure the user asked for (Engine::notes); empty: none.
  std::vector<std::string> notes;
  /// RunStart::level_sources as they ended (a member left the command's cgroup); null: as begun.
  nlohmann::json level_sources;
};

enum class SinkStatus {
  ok,
  failed,  ///< a write error the sink has reported itself (once): it gets no more rows
  closed   ///< the reader went away (EPIPE): sampling stops
};

class Sink {
 public:
  virtual ~Sink() = default;
  /// Names the output in messages ("run directory DIR", "SQLite database FILE").
  virtual std::string name() const = 0;
  /// Once, before the first sample.
  virtual SinkStatus begin(const RunStart&) { return SinkStatus::ok; }
  /// Every tick the sampler takes (run's baseline tick, taken before the command started, is
  /// not one; a record's or stream's first tick is).
  virtual SinkStatus write(const Engine::Tick& tick) = 0;
  /// Once, at the end; also called after a failure (to mark the output incomplete).
  virtual void end(const RunEnd&) {}
  /// Where the run was stored ("" for outputs that store nothing): what `sonde report` reads.
  virtual std::string location() const { return {}; }
};

/// The sinks of a session, called in the order they were added.
class SinkSet final : public SampleListener {
 public:
  void add(std::unique_ptr<Sink> sink);
  /// Returns false when a sink is closed (nothing to sample for).
  bool begin(const RunStart& start);
  /// write() to every enabled sink; false when one is closed.
  bool on_sample(const Engine::Tick& tick) override;
  void end(const RunEnd& end);
  /// The first sink's location that is not empty.
  std::string location() const;
  bool empty() const { return sinks_.empty(); }

 private:
  struct Entry {
    std::unique_ptr<Sink> sink;
    bool enabled = true;
  };
  /// Runs `call` on one sink; an exception is reported (naming the sink) and disables it.
  template <class F>
  SinkStatus guarded(Entry& e, const char* what, F&& call);
  std::vector<Entry> sinks_;
};

}  // namespace sonde
