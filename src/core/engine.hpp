#pragma once
// The engine: builds collectors and handlers from the configuration, then samples one tick at a
// time (one /proc scan, every collector for every active level). Scheduling lives in Sampler.
#include <time.h>

#include <array>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/collector.hpp"
#include "core/config.hpp"
#include "core/handlers.hpp"
#include "core/proc_scanner.hpp"
#include "core/watchdog.hpp"

namespace sonde {

struct EngineOptions {
  Roots roots;
  TargetInfo target;
  /// Levels asked for on the command line; empty: the config's, else all that apply.
  std::vector<Level> levels;
  /// Where warnings go (default: stderr, prefixed "sonde: warning: ").
  std::function<void(const std::string&)> warn;
  /// Consecutive failures after which a collector is disabled.
  unsigned max_consecutive_failures = 5;
  /// Open files another part of the process keeps under the same RLIMIT_NOFILE (serve's HTTP
  /// connections): the scanner's budget of open /proc files leaves them out.
  std::size_t reserved_fds = 0;
};

enum class CollectorState { ok, unavailable, disabled, failed };
std::string_view state_name(CollectorState s);

struct CollectorSlot {
  CollectorSpec spec;
  const CollectorInfo* info = nullptr;     ///< built-in, or
  const TargetFactory* factory = nullptr;  ///< plugin factory
  /// Never destroyed while a thread may still be inside it: the engine leaks a collector that a
  /// worker abandoned after its deadline is still running (see core/watchdog.hpp).
  std::unique_ptr<Collector> collector;
  bool guarded = false;  ///< runs under the engine's watchdog (Collector::needs_watchdog)
  std::unique_ptr<Handler> handler;
  CollectorState state = CollectorState::ok;
  std::string why;  ///< for unavailable/failed
  std::array<bool, kNumLevels> at_level{};
  std::array<std::size_t, kNumLevels> offset{};  ///< first column in the level's row
  std::array<std::size_t, kNumLevels> width{};   ///< number of columns at the level
  // Measured cost and failures.
  std::uint64_t calls = 0;
  double total_s = 0;  ///< time spent in snapshot + collect + handle
  std::uint64_t errors = 0;
  unsigned consecutive_errors = 0;
  /// This tick's values are missing because the collector is restarting its child process
  /// (Errc::restarting): not counted as a failure.
  bool restarting = false;
  std::string last_error;
};

class Engine {
 public:
  /// Everything that can be wrong with the configuration is reported here (Errc::config), before
  /// anything is sampled or started. A collector that cannot work on this node is not an error:
  /// its state is `unavailable`.
  static Result<std::unique_ptr<Engine>> create(const Config& cfg, EngineOptions opts,
                                                const Registry& registry);
  ~Engine();

  struct Tick {
    TickContext ctx;
    std::array<std::vector<double>, kNumLevels> rows;  ///< indexed by level_index
  };

  /// Samples now and returns the rows of every active level.
  const Tick& tick();

  void set_target_pid(int pid);
  /// `sonde run` takes its first tick before it starts the command (a baseline: nothing the
  /// command does is before it), and sonde's open-file limit must not be raised before the command
  /// inherits the limit: until apply_fd_budget() the scanner keeps no /proc files open.
  void defer_fd_budget();
  /// Raises sonde's own open-file limit and lets the scanner keep files open within it.
  void apply_fd_budget();
  const std::vector<Level>& levels() const { return levels_; }
  bool active(Level l) const { return active_[level_index(l)]; }
  const std::vector<std::string>& columns(Level l) const { return columns_[level_index(l)]; }
  const NodeInfo& node_info() const { return node_; }
  const TargetInfo& target() const { return opts_.target; }
  const std::vector<CollectorSlot>& collectors() const { return slots_; }
  /// Watchdog worker threads abandoned so far (each stuck in a collector past its deadline).
  std::uint64_t abandoned_workers() const { return watchdog_ ? watchdog_->abandoned() : 0; }
  double interval_s() const { return interval_s_; }
  std::uint64_t ticks() const { return ticks_; }
  /// Monotonic time of the last tick, in seconds.
  double tick_time() const { return tick_.ctx.time_s; }
  /// CPU-less wall time spent in the /proc scan, summed over ticks.
  double scan_s() const { return scan_s_; }
  /// Graceful degradation: when the /proc scan takes more than half the interval, /proc is listed
  /// (new pids found, membership re-evaluated) only every n-th tick; known pids are still sampled
  /// every tick. 1 = not degraded. Reported in the manifest and once on stderr.
  unsigned discover_every() const { return scanner_->discover_every(); }
  std::uint64_t degraded_since_tick() const { return degraded_since_tick_; }
  const ProcSnapshot& procs() const { return scanner_->last(); }
  ProcScanner& scanner() { return *scanner_; }
  const ProcScanner& scanner() const { return *scanner_; }
  /// A warning through EngineOptions::warn (default: stderr); the Sampler's go here too.
  void warn(const std::string& msg) const;
  /// A fact for the run's manifest that changes no figure the user asked for (the user level
  /// leaving out a container's init it may not read): kept, once each, never on stderr.
  void note(const std::string& msg);
  std::vector<std::string> notes() const;

 private:
  mutable std::mutex notes_mu_;
  std::vector<std::string> notes_;
  /// What a collector's thread may read for as long as it runs (roots, target, node info): on the
  /// heap, so that it can outlive the engine when a worker is stuck in a collector.
  struct Env {
    EngineOptions opts;
    NodeInfo node;
  };
  Engine();
  void record_failure(CollectorSlot& slot, const std::string& message);
  /// Runs one unguarded collector for every level of this tick; returns an error message or "".
  std::string collect_slot(CollectorSlot& slot, const TickContext& ctx);
  /// Bookkeeping after a slot's work: overrun check, NaN on failure, cost, failure count.
  void finish_slot(CollectorSlot& slot, std::string error, double spent_s);
  std::string handle_results(CollectorSlot& slot, const TickContext& ctx,
                             std::array<std::optional<Result<RawValue>>, kNumLevels>& results);

  std::unique_ptr<Env> env_;
  EngineOptions& opts_;
  double interval_s_ = 0.5;
  std::vector<Level> levels_;
  std::array<bool, kNumLevels> active_{};
  NodeInfo& node_;
  std::vector<CollectorSlot> slots_;
  /// Runs the guarded collectors (nullptr when there is none).
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<std::size_t> call_order_;  ///< indices into slots_ by priority
  std::array<std::vector<std::string>, kNumLevels> columns_;
  std::unique_ptr<ProcScanner> scanner_;
  Tick tick_;
  std::uint64_t ticks_ = 0;
  bool fd_budget_set_ = false;
  double prev_time_s_ = -1;
  double scan_s_ = 0;
  std::uint64_t degraded_since_tick_ = 0;
};

}  // namespace sonde
