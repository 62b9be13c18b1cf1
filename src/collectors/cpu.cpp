// cpu (percent). System level: per-core busy share of /proc/stat between two ticks. Other levels:
// the level's CPU time placed on the core each thread ran on (per-core columns over the CPUs the
// target may use), and cpu_util_avg = level CPU time / interval / num_cpus × 100, including the
// time of children that exited and were reaped between two ticks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

class CpuCollector final : public Collector {
 public:
  CpuCollector(const Roots& roots, const NodeInfo& node)
      : path_(roots.proc + "/stat"), node_(node) {}

  Result<void> setup() override {
    auto text = read_file(path_);
    if (!text) return text.error();
    auto st = procfs::parse_proc_stat(*text);
    if (!st) return st.error();
    system_ids_ = st->cpu_ids;
    if (system_ids_.empty()) return make_error(Errc::unavailable, path_ + ": no cpuN lines");
    int max_id = *std::max_element(system_ids_.begin(), system_ids_.end());
    for (int id : node_.cpu_handles) max_id = std::max(max_id, id);
    handle_index_.assign(static_cast<std::size_t>(max_id) + 1, -1);
    for (std::size_t i = 0; i < node_.cpu_handles.size(); ++i)
      handle_index_[static_cast<std::size_t>(node_.cpu_handles[i])] = static_cast<int>(i);
    return {};
  }

  std::size_t devices(Level level) const override {
    return level == Level::system ? system_ids_.size() : node_.cpu_handles.size();
  }
  ScanNeeds needs() const override { return {.io = false, .threads = true}; }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level == Level::system) return collect_system();
    return collect_level(level, ctx);
  }

 private:
  Result<RawValue> collect_system() {
    auto text = read_file(path_);
    if (!text) return text.error();
    auto st = procfs::parse_proc_stat(*text);
    if (!st) return st.error();
    PerDevice out;
    out.values.assign(system_ids_.size(), kNaN);
    // Two ticks within one clock tick of the kernel (e.g. the last sample of `sonde run` right
    // after a scheduled one) see no time pass: not measured, and the baseline stays.
    if (!prev_.per_cpu.empty() && st->total.total() == prev_.total.total())
      return RawValue(std::move(out));
    if (!prev_.per_cpu.empty()) {
      for (std::size_t i = 0; i < system_ids_.size(); ++i) {
        const auto cur = find(*st, system_ids_[i]);
        const auto old = find(prev_, system_ids_[i]);
        if (!cur || !old) continue;  // CPU went offline
        const double busy = static_cast<double>(cur->busy()) - static_cast<double>(old->busy());
        const double total = static_cast<double>(cur->total()) - static_cast<double>(old->total());
        if (total > 0) out.values[i] = std::clamp(100.0 * busy / total, 0.0, 100.0);
      }
    }
    prev_ = std::move(*st);
    return RawValue(std::move(out));
  }

  static std::optional<procfs::CpuTimes> find(const procfs::ProcStat& st, int id) {
    for (std::size_t i = 0; i < st.cpu_ids.size(); ++i)
      if (st.cpu_ids[i] == id) return st.per_cpu[i];
    return std::nullopt;
  }

  Result<RawValue> collect_level(Level level, const TickContext& ctx) {
    const auto& procs = *ctx.procs;
    PerDevice out;
    const std::size_t n = node_.cpu_handles.size();
    if (ctx.dt_s <= 0) {  // the first tick has no interval to measure
      out.values.assign(n, kNaN);
      out.mean = kNaN;
      return RawValue(std::move(out));
    }
    out.values.assign(n, 0.0);
    const auto& mem = members(ctx, level);
    double own = 0, children = 0, placed = 0;
    for (auto i : mem) {
      const PidSample& p = procs.pids[i];
      own += p.cpu_delta_s;
      children += p.child_cpu_delta_s;
      for (auto s = p.share_begin; s < p.share_end; ++s) {
        const CpuShare& share = procs.shares[s];
        const int idx = handle(share.cpu);
        if (idx < 0) continue;  // ran on a CPU the target may not use (user/slurm levels)
        out.values[static_cast<std::size_t>(idx)] += share.seconds;
        placed += share.seconds;
      }
    }
    // Children reaped since the last tick: their whole life lands in the parent's cutime; the
    // part we already counted while they were alive is subtracted.
    const auto bit = static_cast<std::uint8_t>(1u << level_index(level));
    for (const VanishedPid& v : procs.vanished) {
      if (!(v.level_mask & bit)) continue;
      const bool parent_in_level = std::any_of(mem.begin(), mem.end(), [&](std::uint32_t i) {
        return procs.pids[i].pid == v.ppid && procs.pids[i].child_cpu_delta_s > 0;
      });
      if (parent_in_level) children -= v.last_total_cpu_s;
    }
    const double reaped = std::max(0.0, children);
    if (reaped > 0) {
      if (placed > 0) {
        // Spread like the level's own time in this interval.
        for (double& v : out.values) v += reaped * (v / placed);
      } else {
        // Nothing of the level ran itself: place it where the reaping parents ran.
        double weight = 0;
        for (auto i : mem) weight += procs.pids[i].child_cpu_delta_s;
        for (auto i : mem) {
          const PidSample& p = procs.pids[i];
          const int idx = handle(p.processor);
          if (p.child_cpu_delta_s > 0 && idx >= 0 && weight > 0)
            out.values[static_cast<std::size_t>(idx)] += reaped * p.child_cpu_delta_s / weight;
        }
      }
    }
    // Per-core values are clamped at 100: clock-tick accounting jitters by a tick per interval.
    for (double& v : out.values) v = std::min(100.0, 100.0 * v / ctx.dt_s);
    const double cpus = node_.num_cpus > 0 ? node_.num_cpus : static_cast<double>(n);
    out.mean = 100.0 * (own + reaped) / ctx.dt_s / cpus;
    return RawValue(std::move(out));
  }

  int handle(int cpu) const {
    if (cpu < 0 || static_cast<std::size_t>(cpu) >= handle_index_.size()) return -1;
    return handle_index_[static_cast<std::size_t>(cpu)];
  }

  std::string path_;
  const NodeInfo& node_;
  std::vector<int> system_ids_;
  std::vector<int> handle_index_;  // CPU id → index in cpu_handles, -1 if not available
  procfs::ProcStat prev_;
};
}  // namespace

CollectorInfo cpu_info() {
  return {"sonde.collectors.cpu",
          "CPU utilisation per core and avg/min/max, percent",
          {},
          true,
          [](const CollectorArgs& a) -> std::unique_ptr<Collector> {
            return std::make_unique<CpuCollector>(*a.roots, *a.node);
          }};
}

}  // namespace sonde::collectors
