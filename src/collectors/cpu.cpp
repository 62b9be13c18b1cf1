// cpu (percent). System level: per-core busy share of /proc/stat between two ticks. Other levels:
// the level's CPU time (own time of its members, and the new time of children they reaped, see
// PidSample) placed on the core each thread ran on, per-core columns over the CPUs the level may
// use (NodeInfo::level_cpu_ids), and cpu_util_avg = level CPU time / interval / the level's
// number of CPUs × 100.
//
// The levels are placed together, once per tick, so that they agree: no core of a level holds
// more than the node's /proc/stat shows busy on it, process <= user and process <= slurm on every
// core (the larger level starts from the process level's placement). Time the per-thread "last
// CPU" placement or clock-tick accounting puts above what a core ran (a thread that migrated, a
// tick per process and interval) moves to the level's other cores with room, else is carried into
// the next interval: no row exceeds what its level could use, and the per-core columns add up to
// the level's total, which stays exact over the run. The same for a process level whose CPU quota
// is below its CPU count: time above the quota in an interval (a burst) is carried.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "collectors/builtin.hpp"
#include "core/nan.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {

class CpuCollector final : public Collector {
 public:
  CpuCollector(const Roots& roots, const NodeInfo& node, double interval_s,
               std::function<void(const std::string&)> warn)
      : path_(roots.proc + "/stat"), node_(node), interval_s_(interval_s), warn_(std::move(warn)) {}

  Result<void> setup() override {
    // /proc/stat counts each core's time in clock ticks: an interval below two ticks cannot
    // resolve a core's share (rows where a core's counters did not move are left empty).
    const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
    if (warn_ && interval_s_ < 2 * tick)
      warn_(fmt::format(
          "interval {:g} s is below two clock ticks ({:g} s): CPU columns from /proc/stat count "
          "whole ticks per core, so rows are coarse, and a system-level row where a core's "
          "counters did not move is left empty (the next row covers both intervals)",
          interval_s_, 2 * tick));
    auto text = read_file(path_);
    if (!text) return text.error();
    auto st = procfs::parse_proc_stat(*text);
    if (!st) return st.error();
    system_ids_ = st->cpu_ids;
    if (system_ids_.empty()) return make_error(Errc::unavailable, path_ + ": no cpuN lines");
    int max_id = *std::max_element(system_ids_.begin(), system_ids_.end());
    for (const auto& ids : node_.level_cpu_ids)
      for (int id : ids) max_id = std::max(max_id, id);
    for (int id : node_.cpu_handles) max_id = std::max(max_id, id);
    slots_ = static_cast<std::size_t>(max_id) + 1;
    for (Level l : kAllLevels) {
      auto& index = handle_index_[level_index(l)];
      index.assign(slots_, -1);
      const auto& ids = level_ids(l);
      for (std::size_t i = 0; i < ids.size(); ++i)
        index[static_cast<std::size_t>(ids[i])] = static_cast<int>(i);
    }
    prev_ = std::move(*st);
    return {};
  }

  double carried_cpu_s(Level level) const override { return carry_[level_index(level)]; }

  std::size_t devices(Level level) const override {
    return level == Level::system ? system_ids_.size() : level_ids(level).size();
  }
  ScanNeeds needs() const override { return {.io = false, .threads = true}; }

  void snapshot(const TickContext& ctx) override {
    read_system();
    if (ctx.dt_s > 0 && ctx.procs) place_levels(ctx);
  }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level == Level::system) {
      if (!system_error_.empty()) return make_error(Errc::io, system_error_);
      return RawValue(PerDevice{system_pct_, std::nullopt});
    }
    PerDevice out;
    const auto& ids = level_ids(level);
    if (ctx.dt_s <= 0) {  // the first tick has no interval to measure
      out.values.assign(ids.size(), kNaN);
      out.mean = kNaN;
      return RawValue(std::move(out));
    }
    const auto& placed = placed_[level_index(level)];
    double used = 0;
    out.values.assign(ids.size(), 0.0);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const double v = placed[static_cast<std::size_t>(ids[i])];
      out.values[i] = 100.0 * v / ctx.dt_s;
      used += v;
    }
    out.mean = 100.0 * used / ctx.dt_s / level_cpus(level);
    return RawValue(std::move(out));
  }

 private:
  // The level's CPUs; node info built without per-level sets (plugins' JSON) falls back to the
  // target's CPUs.
  const std::vector<int>& level_ids(Level l) const {
    const auto& ids = node_.level_cpu_ids[level_index(l)];
    if (!ids.empty()) return ids;
    return l == Level::system ? system_ids_ : node_.cpu_handles;
  }
  double level_cpus(Level l) const {
    const double n = node_.level_num_cpus[level_index(l)];
    if (n > 0) return n;
    return l == Level::system   ? static_cast<double>(system_ids_.size())
           : node_.num_cpus > 0 ? node_.num_cpus
                                : static_cast<double>(level_ids(l).size());
  }

  // /proc/stat: the system level's per-core percentages, and each core's busy share (the cap of
  // every other level on that core).
  void read_system() {
    system_error_.clear();
    system_pct_.assign(system_ids_.size(), kNaN);
    busy_share_.assign(slots_, 1.0);  // unknown: the whole interval
    auto text = read_file(path_);
    if (!text) {
      system_error_ = text.error().message;
      return;
    }
    auto st = procfs::parse_proc_stat(*text);
    if (!st) {
      system_error_ = st.error().message;
      return;
    }
    // Two ticks within one clock tick of the kernel (e.g. the last sample of `sonde run` right
    // after a scheduled one, or an interval below a tick) where some core's counters did not
    // move: not measured (every cell and the aggregates), and the baseline stays, so that the
    // next row covers both intervals.
    auto shares = procfs::busy_shares(prev_, *st, system_ids_);
    if (!shares) return;
    for (std::size_t i = 0; i < system_ids_.size(); ++i) {
      if (!(*shares)[i]) continue;  // CPU went offline
      const double share = *(*shares)[i];
      system_pct_[i] = 100.0 * share;
      if (static_cast<std::size_t>(system_ids_[i]) < slots_)
        busy_share_[static_cast<std::size_t>(system_ids_[i])] = share;
    }
    prev_ = std::move(*st);
  }

  // Seconds per CPU id that the members of `level` ran this interval (own and reaped time),
  // before any cap; time on a CPU outside the level's set is spread over the set.
  std::vector<double> raw(Level level, const TickContext& ctx) const {
    std::vector<double> out(slots_, 0.0);
    const auto& index = handle_index_[level_index(level)];
    const auto& ids = level_ids(level);
    const double unplaced = place_cpu_shares(ctx, level, [&](int cpu, double seconds) {
      if (cpu < 0 || static_cast<std::size_t>(cpu) >= slots_ ||
          index[static_cast<std::size_t>(cpu)] < 0)
        return false;
      out[static_cast<std::size_t>(cpu)] += seconds;
      return true;
    });
    if (unplaced > 0 && !ids.empty())
      for (int id : ids)
        out[static_cast<std::size_t>(id)] += unplaced / static_cast<double>(ids.size());
    return out;
  }

  // A level whose cgroup the kernel accounts (`sonde run`'s command): its time is the cgroup's,
  // exact to the nanosecond, per CPU id where the kernel keeps that (v1), else the members' reads
  // (`raw`) scaled to the exact total. Time on a CPU outside the level's set is spread over it.
  std::vector<double> exact(std::vector<double> raw, const CgroupDelta& cg, Level level) const {
    if (!cg.valid) return raw;
    const auto& index = handle_index_[level_index(level)];
    const auto& ids = level_ids(level);
    if (ids.empty()) return raw;
    double sum = 0;
    for (double v : raw) sum += v;
    std::vector<double> out(slots_, 0.0);
    double unplaced = 0;
    if (!cg.cpu_s_by_id.empty()) {
      for (std::size_t id = 0; id < cg.cpu_s_by_id.size(); ++id) {
        if (id < slots_ && index[id] >= 0)
          out[id] += cg.cpu_s_by_id[id];
        else
          unplaced += cg.cpu_s_by_id[id];
      }
    } else if (sum > 0) {
      for (std::size_t j = 0; j < slots_; ++j) out[j] = raw[j] * cg.cpu_s / sum;
    } else {
      unplaced = cg.cpu_s;
    }
    if (unplaced > 0)
      for (int id : ids)
        out[static_cast<std::size_t>(id)] += unplaced / static_cast<double>(ids.size());
    return out;
  }

  // Adds `want` (seconds per CPU id) onto `placed` without any CPU going above `cap`; what does
  // not fit where it ran goes to the level's other CPUs with room, in proportion to their room.
  // Returns what fits nowhere.
  static double fill(std::vector<double>& placed, std::vector<double> want,
                     const std::vector<double>& cap) {
    double excess = 0, room = 0;
    for (std::size_t j = 0; j < placed.size(); ++j) {
      const double free = std::max(0.0, cap[j] - placed[j]);
      const double take = std::min(want[j], free);
      placed[j] += take;
      excess += want[j] - take;
      room += free - take;
    }
    if (excess <= 0 || room <= 0) return std::max(0.0, excess);
    const double moved = std::min(excess, room);
    for (std::size_t j = 0; j < placed.size(); ++j) {
      const double free = std::max(0.0, cap[j] - placed[j]);
      placed[j] += moved * free / room;
    }
    return excess - moved;
  }

  // Scales `placed` down to at most `limit` seconds in all; returns what was taken off.
  static double cap_total(std::vector<double>& placed, double limit) {
    double sum = 0;
    for (double v : placed) sum += v;
    if (!(limit > 0) || sum <= limit) return 0;
    for (double& v : placed) v *= limit / sum;
    return sum - limit;
  }

  void place_levels(const TickContext& ctx) {
    const double dt = ctx.dt_s;
    auto cap_of = [&](Level l) {
      std::vector<double> cap(slots_, 0.0);
      for (int id : level_ids(l)) cap[static_cast<std::size_t>(id)] = busy_share_[id] * dt;
      return cap;
    };
    // A carry is spread like this interval's own placement, or evenly when there is none.
    auto with_carry = [&](std::vector<double> want, Level l) {
      double& carry = carry_[level_index(l)];
      if (carry <= 0) return want;
      double sum = 0;
      for (double v : want) sum += v;
      const auto& ids = level_ids(l);
      for (int id : ids) {
        const auto j = static_cast<std::size_t>(id);
        want[j] += sum > 0 ? carry * want[j] / sum : carry / static_cast<double>(ids.size());
      }
      carry = 0;
      return want;
    };
    const auto pi = level_index(Level::process);
    auto& process = placed_[pi];
    process.assign(slots_, 0.0);
    const std::vector<double> process_want = with_carry(
        exact(raw(Level::process, ctx), ctx.procs->cgroup[pi], Level::process), Level::process);
    carry_[pi] = fill(process, process_want, cap_of(Level::process));
    // A CPU quota narrower than the level's CPUs (its 100 %) is a limit the kernel keeps over its
    // period, not within every interval: a group bursts past it. What goes above it is carried.
    carry_[pi] += cap_total(process, level_cpus(Level::process) * dt);
    for (Level l : {Level::user, Level::slurm}) {
      const auto li = level_index(l);
      auto& placed = placed_[li];
      // The larger level holds the process level (it is a superset of it) and adds its other
      // members where they ran.
      placed.assign(slots_, 0.0);
      // The slurm level from the job's cgroup where it has one (ProcScanner::find_job_cgroup).
      std::vector<double> want = with_carry(exact(raw(l, ctx), ctx.procs->cgroup[li], l), l);
      const auto& index = handle_index_[li];
      // The process level's time is part of this level's want: taken off it core by core, and
      // what the process level placed on another core than this level would have (moved by the
      // caps, or a carry) is taken off the rest of the want.
      double owed = 0;
      for (std::size_t j = 0; j < slots_; ++j) {
        if (index[j] < 0) continue;
        placed[j] = process[j];
        const double take = std::min(want[j], process[j]);
        want[j] -= take;
        owed += process[j] - take;
      }
      for (std::size_t j = 0; j < slots_ && owed > 0; ++j) {
        const double take = std::min(want[j], owed);
        want[j] -= take;
        owed -= take;
      }
      carry_[li] = fill(placed, want, cap_of(l));
    }
  }

  std::string path_;
  const NodeInfo& node_;
  double interval_s_;
  std::function<void(const std::string&)> warn_;
  std::vector<int> system_ids_;
  std::size_t slots_ = 0;  // CPU ids 0..slots_-1
  procfs::ProcStat prev_;
  std::vector<double> system_pct_;
  std::string system_error_;
  std::vector<double> busy_share_;  // per CPU id: busy share of the interval (/proc/stat)
  // Per level: seconds placed per CPU id this tick, and what did not fit, for the next interval.
  std::array<std::vector<double>, kNumLevels> placed_;
  std::array<double, kNumLevels> carry_{};
  // Per level: CPU id → index in the level's CPU set, -1 if not in it.
  std::array<std::vector<int>, kNumLevels> handle_index_;
};
}  // namespace

CollectorInfo cpu_info() {
  return {"sonde.collectors.cpu",
          "CPU utilisation per core and avg/min/max, percent",
          {},
          true,
          [](const CollectorArgs& a) -> std::unique_ptr<Collector> {
            return std::make_unique<CpuCollector>(*a.roots, *a.node, a.interval_s, a.warn);
          }};
}

}  // namespace sonde::collectors
