// The engine's tick: one /proc scan, then every collector. Collectors that run code sonde does
// not control (Collector::needs_watchdog: native plugins, GPU drivers) are guarded: they run as
// one batch per tick on the watchdog's thread while this thread runs the others, under a deadline
// per call, with no hand-off per call; a call that hangs is left behind on its thread and never
// destroyed under it (design: core/watchdog.hpp). Exceptions stop at the collector boundary.
#include "core/engine.hpp"
#include "core/nan.hpp"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sonde {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// What a worker stuck in a collector may still touch can never be destroyed safely: it is kept,
// reachable, until the process ends.
void keep_alive_forever(std::shared_ptr<void> p) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<void>>();  // never destroyed
  std::lock_guard lock(mutex);
  kept->push_back(std::move(p));
}

using Results = std::array<std::optional<Result<RawValue>>, kNumLevels>;

// One collector's work for one tick, at the levels in `at`. An exception is the collector's
// failure for this tick, never the process's end (the same on a worker and on the engine's
// thread).
std::string call_collector(Collector& c, const std::string& name, const TickContext& ctx,
                           const std::array<bool, kNumLevels>& at, Results& results) {
  try {
    c.snapshot(ctx);
    for (Level l : kAllLevels)
      if (at[level_index(l)]) results[level_index(l)] = c.collect(l, ctx);
    return {};
  } catch (const std::exception& e) {
    return fmt::format("collector '{}' threw an exception: {}", name, e.what());
  } catch (...) {
    return fmt::format("collector '{}' threw an exception (not a std::exception)", name);
  }
}

// A guarded collector's answer, owned by the call (a late worker writes only here).
struct GuardedAnswer {
  Results results;
  std::string error;
};

}  // namespace

std::string_view state_name(CollectorState s) {
  switch (s) {
    case CollectorState::ok: return "ok";
    case CollectorState::unavailable: return "unavailable";
    case CollectorState::disabled: return "disabled";
    case CollectorState::failed: return "failed";
  }
  return "?";
}

Engine::Engine() : env_(std::make_unique<Env>()), opts_(env_->opts), node_(env_->node) {}

Engine::~Engine() {
  // A worker abandoned inside a collector may still run its code: that collector (and with it its
  // backend, library handle, plugin instance) and what it reads through its arguments and the
  // tick context (roots, target, node info) are kept, never destroyed under it.
  bool stuck = false;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    CollectorSlot& s = slots_[i];
    if (s.collector && s.guarded && watchdog_ && watchdog_->busy(i)) {
      keep_alive_forever(std::shared_ptr<Collector>(std::move(s.collector)));
      stuck = true;
    }
  }
  if (stuck) keep_alive_forever(std::shared_ptr<Env>(std::move(env_)));
  for (auto& s : slots_) {
    if (!s.collector || s.state != CollectorState::ok) continue;
    try {
      s.collector->teardown();
    } catch (const std::exception& e) {
      warn(fmt::format("collector '{}' threw an exception in teardown: {}", s.spec.name, e.what()));
    } catch (...) {
      warn(fmt::format("collector '{}' threw an exception in teardown", s.spec.name));
    }
  }
  watchdog_.reset();  // joins the idle worker; abandoned ones own what they still use
}

void Engine::note(const std::string& msg) {
  std::lock_guard lock(notes_mu_);
  if (std::find(notes_.begin(), notes_.end(), msg) == notes_.end()) notes_.push_back(msg);
}

std::vector<std::string> Engine::notes() const {
  std::lock_guard lock(notes_mu_);
  return notes_;
}

void Engine::warn(const std::string& msg) const {
  if (opts_.warn)
    opts_.warn(msg);
  else
    std::cerr << "sonde: warning: " << msg << "\n";
}

Result<std::unique_ptr<Engine>> Engine::create(const Config& cfg, EngineOptions opts,
                                               const Registry& registry) {
  std::unique_ptr<Engine> e(new Engine());
  e->opts_ = std::move(opts);
  e->interval_s_ = cfg.interval_s;
  const TargetInfo& target = e->opts_.target;

  // Levels: command line, else configuration, else all that apply.
  const bool explicit_levels = !e->opts_.levels.empty() || !cfg.levels.empty();
  std::vector<Level> wanted = !e->opts_.levels.empty() ? e->opts_.levels : cfg.levels;
  if (wanted.empty()) wanted.assign(kAllLevels.begin(), kAllLevels.end());
  for (Level l : wanted) {
    if (l == Level::slurm && !target.slurm_job) {
      if (explicit_levels)
        e->warn("level 'slurm' needs SLURM_JOB_ID in the target's environment; it is left out");
      continue;
    }
    // The slurm level of `sonde agent` has the job, not a process, as its target.
    if (l != Level::system && target.pid <= 0 && !(l == Level::slurm && target.slurm_job)) {
      if (explicit_levels)
        e->warn(fmt::format("level '{}' needs a target process; it is left out", level_name(l)));
      continue;
    }
    if (!e->active_[level_index(l)]) e->levels_.push_back(l);
    e->active_[level_index(l)] = true;
  }
  if (e->levels_.empty()) return make_error(Errc::config, "no level left to sample");

  auto node = discover_node_info(e->opts_.roots, target);
  if (!node) return make_error(Errc::unavailable, node.error().message);
  e->node_ = std::move(*node);

  // Validate every entry before building anything.
  for (const CollectorSpec& spec : cfg.collectors) {
    CollectorSlot slot;
    slot.spec = spec;
    if (!spec.enabled) {
      slot.state = CollectorState::disabled;
      e->slots_.push_back(std::move(slot));
      continue;
    }
    slot.info = registry.find(spec.target);
    if (slot.info == nullptr) slot.factory = registry.find_factory(spec.target);
    if (slot.info == nullptr && slot.factory == nullptr) {
      std::vector<std::string> known;
      for (const auto& i : registry.all()) known.push_back(i.target);
      return make_error(
          Errc::config,
          fmt::format("{}: collector '{}': unknown _target_ '{}' (expected one of: {}, "
                      "or plugin:FILE.so, python:MODULE.CLASS, exec)",
                      spec.target_origin.line ? spec.target_origin.str() : spec.origin.str(),
                      spec.name, spec.target, fmt::join(known, ", ")));
    }
    auto handler = make_handler(spec.handler);
    if (!handler) return handler.error();
    slot.handler = std::move(*handler);
    e->slots_.push_back(std::move(slot));
  }

  // Build in two phases: collectors that need node_info come after GPU discovery (phase 1
  // collectors contribute the GPU part of node info).
  for (int phase = 1; phase <= 2; ++phase) {
    for (CollectorSlot& slot : e->slots_) {
      if (slot.state != CollectorState::ok) continue;
      const bool needs_node =
          (slot.info && slot.info->needs_node_info) || contains(slot.spec.inject, "node_info");
      if ((phase == 2) != needs_node) continue;
      CollectorArgs args;
      args.name = slot.spec.name;
      args.roots = &e->opts_.roots;
      args.node = needs_node ? &e->node_ : nullptr;
      args.target = &e->opts_.target;
      args.inject = slot.spec.inject;
      args.interval_s = cfg.interval_s;
      args.deadline_s = slot.spec.timeout_s.value_or(cfg.interval_s / 2);
      args.raw_kwargs = slot.spec.kwargs;
      args.handler_accepts = std::string(slot.handler->accepts());
      args.handler_metrics = slot.spec.handler.metrics;
      args.note = [engine = e.get()](const std::string& m) { engine->note(m); };
      args.warn = [w = e->opts_.warn](const std::string& m) {
        if (w)
          w(m);
        else
          std::cerr << "sonde: warning: " << m << "\n";
      };
      if (slot.factory) {
        auto made = slot.factory->make(slot.spec.target, args);
        if (!made) {
          if (made.error().code == Errc::config) return made.error();
          slot.state = CollectorState::unavailable;
          slot.why = made.error().message;
          e->warn(fmt::format("collector '{}' is unavailable: {}", slot.spec.name, slot.why));
          continue;
        }
        slot.collector = std::move(*made);
      } else {
        for (const ParamSpec& p : slot.info->params) args.params[p.name] = p.default_value;
        for (const auto& [key, arg] : slot.spec.kwargs) {
          auto p = std::find_if(slot.info->params.begin(), slot.info->params.end(),
                                [&](const ParamSpec& ps) { return ps.name == key; });
          if (p == slot.info->params.end()) {
            std::vector<std::string> names;
            for (const auto& ps : slot.info->params) names.push_back(ps.name);
            return make_error(
                Errc::config,
                fmt::format("{}: collector '{}' ({}) has no parameter '{}' (expected {})",
                            arg.origin.str(), slot.spec.name, slot.info->target, key,
                            names.empty() ? std::string("none")
                                          : fmt::format("one of: {}", fmt::join(names, ", "))));
          }
          auto v = convert_param(*p, arg, slot.spec.name);
          if (!v) return v.error();
          args.params[key] = std::move(*v);
        }
        slot.collector = slot.info->make(args);
      }
      auto ok = slot.collector->setup();
      if (!ok) {
        slot.state = CollectorState::unavailable;
        slot.why = ok.error().message;
        // A built-in that cannot work here (no such device) is normal; a plugin that cannot start
        // is worth a line.
        if (slot.factory)
          e->warn(fmt::format("collector '{}' is unavailable: {}", slot.spec.name, slot.why));
        continue;
      }
      // Phase 1 collectors fill in the GPU part before the node_info users are built; a GPU
      // collector that itself asked for node_info (JUmPER configs) still completes it for the
      // manifest and the summary.
      slot.collector->contribute_node_info(e->node_);
      slot.guarded = slot.collector->needs_watchdog();
    }
  }
  if (std::any_of(e->slots_.begin(), e->slots_.end(), [](const CollectorSlot& s) {
        return s.state == CollectorState::ok && s.guarded;
      }))
    e->watchdog_ = std::make_unique<Watchdog>(e->slots_.size());

  // Columns per level; a name may appear once per level.
  ScanNeeds needs;
  for (Level l : e->levels_) {
    std::map<std::string, const CollectorSlot*> owner;
    auto& cols = e->columns_[level_index(l)];
    for (CollectorSlot& slot : e->slots_) {
      if (slot.state != CollectorState::ok || !slot.collector->supports(l)) continue;
      auto names = slot.handler->columns(slot.collector->devices(l));
      for (const auto& n : names) {
        if (n == "time" || n == "wallclock")
          return make_error(Errc::config,
                            fmt::format("{}: collector '{}': column '{}' is reserved",
                                        slot.spec.handler.origin.str(), slot.spec.name, n));
        auto [it, fresh] = owner.emplace(n, &slot);
        if (!fresh)
          return make_error(
              Errc::config,
              fmt::format("{}: collector '{}': duplicate column '{}' (already written "
                          "by collector '{}', {})",
                          slot.spec.handler.origin.str(), slot.spec.name, n, it->second->spec.name,
                          it->second->spec.handler.origin.str()));
      }
      slot.at_level[level_index(l)] = true;
      slot.offset[level_index(l)] = cols.size();
      slot.width[level_index(l)] = names.size();
      cols.insert(cols.end(), names.begin(), names.end());
    }
    e->tick_.rows[level_index(l)].assign(cols.size(), kNaN);
  }
  for (const CollectorSlot& slot : e->slots_) {
    if (slot.state != CollectorState::ok) continue;
    const ScanNeeds n = slot.collector->needs();
    needs.io = needs.io || n.io;
    needs.threads = needs.threads || n.threads;
    needs.pss = needs.pss || n.pss;
  }
  // Hooks run in priority order (core = 0, lower first); equal priorities keep config order.
  for (std::size_t i = 0; i < e->slots_.size(); ++i) e->call_order_.push_back(i);
  std::stable_sort(e->call_order_.begin(), e->call_order_.end(), [&](std::size_t a, std::size_t b) {
    auto prio = [&](std::size_t i) {
      return e->slots_[i].collector ? e->slots_[i].collector->priority() : 0;
    };
    return prio(a) < prio(b);
  });
  e->scanner_ = std::make_unique<ProcScanner>(e->opts_.roots, target, e->active_, needs);
  return e;
}

void Engine::defer_fd_budget() {
  fd_budget_set_ = true;
  scanner_->set_fd_budget(0);
}

void Engine::apply_fd_budget() {
  fd_budget_set_ = true;
  scanner_->set_fd_budget(open_file_budget(opts_.reserved_fds));
}

void Engine::set_target_pid(int pid) {
  opts_.target.pid = pid;
  scanner_->set_target_pid(pid);
}

std::string Engine::collect_slot(CollectorSlot& slot, const TickContext& ctx) {
  Results results;
  std::array<bool, kNumLevels> at{};
  for (Level l : levels_) at[level_index(l)] = slot.at_level[level_index(l)];
  std::string error = call_collector(*slot.collector, slot.spec.name, ctx, at, results);
  return error.empty() ? handle_results(slot, ctx, results) : error;
}

std::string Engine::handle_results(
    CollectorSlot& slot, const TickContext& ctx,
    std::array<std::optional<Result<RawValue>>, kNumLevels>& results) {
  std::string error;
  for (Level l : levels_) {
    const std::size_t li = level_index(l);
    if (!slot.at_level[li]) continue;
    auto out = std::span<double>(tick_.rows[li]).subspan(slot.offset[li], slot.width[li]);
    auto& raw = results[li];
    Result<void> handled = !raw        ? Result<void>(make_error(Errc::failed, "no value"))
                           : raw->ok() ? slot.handler->handle(l, raw->value(), ctx.time_s, out)
                                       : Result<void>(raw->error());
    if (!handled) {
      // Missing values of a collector restarting its child are not a failure, unless another
      // level failed for a reason of its own.
      const bool restarting = handled.error().code == Errc::restarting;
      if (error.empty()) slot.restarting = restarting;
      slot.restarting = slot.restarting && restarting;
      std::fill(out.begin(), out.end(), kNaN);
      if (error.empty())
        error = fmt::format("{} level: {}", level_name(l), handled.error().message);
    }
  }
  return error;
}

void Engine::finish_slot(CollectorSlot& slot, std::string error, double spent_s) {
  const double deadline = slot.spec.timeout_s.value_or(interval_s_ / 2);
  if (error.empty() && spent_s > deadline)
    error = fmt::format("took {:.1f} ms, over its deadline of {:.1f} ms", spent_s * 1e3,
                        deadline * 1e3);
  if (!error.empty()) {
    for (Level l : levels_) {  // a value that failed or came too late is not used
      const std::size_t li = level_index(l);
      if (slot.at_level[li])
        std::fill_n(tick_.rows[li].begin() + static_cast<long>(slot.offset[li]), slot.width[li],
                    kNaN);
    }
  }
  ++slot.calls;
  slot.total_s += spent_s;
  if (!error.empty() && slot.restarting)
    slot.last_error = error;  // neither a failure nor a success: the count stays
  else if (!error.empty())
    record_failure(slot, error);
  else
    slot.consecutive_errors = 0;
  slot.restarting = false;
}

void Engine::record_failure(CollectorSlot& slot, const std::string& message) {
  ++slot.errors;
  ++slot.consecutive_errors;
  slot.last_error = message;
  if (slot.consecutive_errors >= opts_.max_consecutive_failures) {
    slot.state = CollectorState::failed;
    slot.why = fmt::format("disabled after {} consecutive failures; last: {}",
                           slot.consecutive_errors, message);
    warn(fmt::format("collector '{}' {}", slot.spec.name, slot.why));
    const auto index = static_cast<std::size_t>(&slot - slots_.data());
    if (slot.guarded && watchdog_ && watchdog_->busy(index)) {
      // A worker is stuck inside the collector: leave it behind rather than wait forever.
      keep_alive_forever(std::shared_ptr<Collector>(std::move(slot.collector)));
    }
  }
}

const Engine::Tick& Engine::tick() {
  if (!fd_budget_set_) apply_fd_budget();
  TickContext& ctx = tick_.ctx;
  ctx.time_s = monotonic_now();
  ctx.wallclock_s = wallclock_now();
  ctx.tick = ticks_;
  ctx.dt_s = prev_time_s_ < 0 ? 0 : ctx.time_s - prev_time_s_;
  ctx.node = &node_;
  ctx.target = &opts_.target;
  ctx.roots = &opts_.roots;
  ctx.procs = &scanner_->scan(boottime_now());
  const double scan_done = monotonic_now();
  scan_s_ += scan_done - ctx.time_s;

  for (Level l : levels_)
    std::fill(tick_.rows[level_index(l)].begin(), tick_.rows[level_index(l)].end(), kNaN);
  // The guarded collectors go to the watchdog's worker as one batch, in call order; this thread
  // runs the others meanwhile, then waits for the batch (core/watchdog.hpp).
  std::vector<std::size_t> guarded;
  std::vector<std::shared_ptr<GuardedAnswer>> answers;
  if (watchdog_) {
    std::vector<Watchdog::Call> calls;
    std::shared_ptr<const ProcSnapshot> snapshot = scanner_->shared();
    for (std::size_t index : call_order_) {
      CollectorSlot& slot = slots_[index];
      if (slot.state != CollectorState::ok || !slot.guarded) continue;
      auto answer = std::make_shared<GuardedAnswer>();
      std::array<bool, kNumLevels> at{};
      for (Level l : levels_) at[level_index(l)] = slot.at_level[level_index(l)];
      calls.push_back({index, slot.spec.timeout_s.value_or(interval_s_ / 2),
                       [answer, snapshot, ctx, at, collector = slot.collector.get(),
                        name = slot.spec.name]() mutable {
                         ctx.procs = snapshot.get();
                         answer->error = call_collector(*collector, name, ctx, at, answer->results);
                       }});
      guarded.push_back(index);
      answers.push_back(std::move(answer));
    }
    if (!calls.empty()) watchdog_->start(std::move(calls));
  }
  for (std::size_t index : call_order_) {
    CollectorSlot& slot = slots_[index];
    if (slot.state != CollectorState::ok || slot.guarded) continue;
    const double t0 = monotonic_now();
    slot.restarting = false;
    std::string error = collect_slot(slot, ctx);
    finish_slot(slot, std::move(error), monotonic_now() - t0);
  }
  if (!guarded.empty()) {
    const std::vector<Watchdog::Report>& reports = watchdog_->wait();
    for (std::size_t k = 0; k < guarded.size(); ++k) {
      CollectorSlot& slot = slots_[guarded[k]];
      const double deadline = slot.spec.timeout_s.value_or(interval_s_ / 2);
      std::string error;
      switch (reports[k].outcome) {
        case Watchdog::Outcome::busy:
          error =
              fmt::format("still busy with an earlier tick that overran its deadline of {:.1f} ms",
                          deadline * 1e3);
          break;
        case Watchdog::Outcome::timed_out:
          scanner_->snapshot_abandoned();
          error = fmt::format("no answer within its deadline of {:.1f} ms", deadline * 1e3);
          break;
        case Watchdog::Outcome::done:
          error = answers[k]->error.empty() ? handle_results(slot, ctx, answers[k]->results)
                                            : answers[k]->error;
          break;
      }
      finish_slot(slot, std::move(error), reports[k].spent_s);
    }
  }
  // Degrade visibly rather than miss ticks: a tick that uses more than half the interval lists
  // /proc less often from now on (the slot is missed only if sampling the known pids alone does
  // not fit).
  // Only the /proc scan counts: a plugin that uses its deadline is contained by the deadline.
  const double tick_s = scan_done - ctx.time_s;
  if (ticks_ > 0 && tick_s > interval_s_ / 2 && scanner_->discover_every() < 64) {
    const unsigned every = scanner_->discover_every() * 4;
    scanner_->set_discover_every(every);
    if (degraded_since_tick_ == 0) degraded_since_tick_ = ticks_;
    warn(
        fmt::format("a tick took {:.1f} ms of a {:.1f} ms interval ({} processes on the node); "
                    "new processes are now looked for every {} ticks, known ones are still "
                    "sampled every tick",
                    tick_s * 1e3, interval_s_ * 1e3, scanner_->last().total_pids, every));
  }
  // The collectors saw this tick's zombies; sonde's own are reaped now (their exact rusage).
  scanner_->reap_own_zombies();
  prev_time_s_ = ctx.time_s;
  ++ticks_;
  return tick_;
}

}  // namespace sonde
