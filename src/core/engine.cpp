#include "core/engine.hpp"

#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace sonde {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// A collector whose worker is stuck in its code can never be destroyed safely: it is kept,
// reachable, until the process ends.
void keep_alive_forever(std::unique_ptr<Collector> c) {
  static std::mutex mutex;
  static auto* kept = new std::vector<std::unique_ptr<Collector>>();  // never destroyed
  std::lock_guard lock(mutex);
  kept->push_back(std::move(c));
}

// Raises the soft open-file limit to the hard one (sonde keeps /proc files open across ticks)
// and returns how many files the scanner may keep open. Only sonde's own limit changes; `sonde run`
// spawns its command before this is called, so the command keeps the limit it was given.
std::size_t fd_budget() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 512;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const rlim_t reserve = 256;  // for sinks, plugins and per-tick opens
  return rl.rlim_cur > 2 * reserve ? static_cast<std::size_t>(rl.rlim_cur - reserve)
                                   : static_cast<std::size_t>(rl.rlim_cur / 2);
}
}  // namespace

double monotonic_now() {
  return clock_s(CLOCK_MONOTONIC);
}
double wallclock_now() {
  return clock_s(CLOCK_REALTIME);
}
double boottime_now() {
  return clock_s(CLOCK_BOOTTIME);
}

timespec to_timespec(double seconds) {
  if (seconds < 0) seconds = 0;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  return ts;
}

std::string_view state_name(CollectorState s) {
  switch (s) {
    case CollectorState::ok: return "ok";
    case CollectorState::unavailable: return "unavailable";
    case CollectorState::disabled: return "disabled";
    case CollectorState::failed: return "failed";
  }
  return "?";
}

Engine::~Engine() {
  for (auto& s : slots_)
    if (s.collector && s.state == CollectorState::ok && !(s.watchdog && s.watchdog->busy()))
      s.collector->teardown();
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
    if (l != Level::system && target.pid <= 0) {
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
      if (slot.collector->needs_watchdog()) slot.watchdog = std::make_unique<Watchdog>();
    }
  }

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
  scanner_->set_fd_budget(fd_budget());
}

void Engine::set_target_pid(int pid) {
  opts_.target.pid = pid;
  scanner_->set_target_pid(pid);
}

std::string Engine::collect_slot(CollectorSlot& slot, const TickContext& ctx) {
  using Results = std::array<std::optional<Result<RawValue>>, kNumLevels>;
  if (!slot.watchdog) {
    Results results;
    slot.collector->snapshot(ctx);
    for (Level l : levels_)
      if (slot.at_level[level_index(l)]) results[level_index(l)] = slot.collector->collect(l, ctx);
    return handle_results(slot, ctx, results);
  }
  // Code sonde does not control runs on the collector's worker, with its own copies of what it
  // reads and writes, so that a late answer can never touch this tick's or the next tick's data.
  auto results = std::make_shared<Results>();
  auto snapshot = scanner_->shared();
  std::array<bool, kNumLevels> at = slot.at_level;
  for (Level l : kAllLevels) at[level_index(l)] = at[level_index(l)] && active_[level_index(l)];
  Collector* collector = slot.collector.get();
  const auto outcome = slot.watchdog->run(
      [results, snapshot, ctx, at, collector] {
        TickContext own = ctx;
        own.procs = snapshot.get();
        collector->snapshot(own);
        for (Level l : kAllLevels)
          if (at[level_index(l)]) (*results)[level_index(l)] = collector->collect(l, own);
      },
      slot.spec.timeout_s.value_or(interval_s_ / 2));
  if (outcome == Watchdog::Outcome::busy)
    return fmt::format("still busy with an earlier tick that overran its deadline of {:.1f} ms",
                       slot.spec.timeout_s.value_or(interval_s_ / 2) * 1e3);
  if (outcome == Watchdog::Outcome::timed_out)
    return fmt::format("no answer within its deadline of {:.1f} ms",
                       slot.spec.timeout_s.value_or(interval_s_ / 2) * 1e3);
  return handle_results(slot, ctx, *results);
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

void Engine::record_failure(CollectorSlot& slot, const std::string& message) {
  ++slot.errors;
  ++slot.consecutive_errors;
  slot.last_error = message;
  if (slot.consecutive_errors >= opts_.max_consecutive_failures) {
    slot.state = CollectorState::failed;
    slot.why = fmt::format("disabled after {} consecutive failures; last: {}",
                           slot.consecutive_errors, message);
    warn(fmt::format("collector '{}' {}", slot.spec.name, slot.why));
    if (slot.watchdog && slot.watchdog->busy()) {
      // Its worker is stuck inside the collector: leave both behind rather than wait forever.
      slot.watchdog->abandon();
      keep_alive_forever(std::move(slot.collector));
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
  for (std::size_t index : call_order_) {
    CollectorSlot& slot = slots_[index];
    if (slot.state != CollectorState::ok) continue;
    const double t0 = monotonic_now();
    slot.restarting = false;
    std::string error = collect_slot(slot, ctx);
    const double spent = monotonic_now() - t0;
    const double deadline = slot.spec.timeout_s.value_or(interval_s_ / 2);
    if (error.empty() && spent > deadline)
      error = fmt::format("took {:.1f} ms, over its deadline of {:.1f} ms", spent * 1e3,
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
    slot.total_s += spent;
    if (!error.empty() && slot.restarting)
      slot.last_error = error;  // neither a failure nor a success: the count stays
    else if (!error.empty())
      record_failure(slot, error);
    else
      slot.consecutive_errors = 0;
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
  prev_time_s_ = ctx.time_s;
  ++ticks_;
  return tick_;
}

}  // namespace sonde
