// energy: power (W) and cumulative energy since the first tick (J) per energy domain, from the
// RAPL counters of the powercap sysfs interface (package, core, uncore, dram, psys: Intel and
// AMD, src/core/rapl.cpp) and the GPUs' energy counters (NVML total energy; ROCm SMI energy
// count; where a GPU has no counter, its power integrated over the interval).
//
// Columns (PerDeviceMultiAggregateHandler, metrics power and joules): entry i is the domain
// NodeInfo::energy.domains[i] (package-0, dram-0, …, gpu-0, …), written in the manifest.
//
// The system level has the whole domain. Other levels get the level's share of each interval's
// energy (written in the manifest as energy.method):
//   CPU domains of package N (package, core, uncore, dram): the level's CPU time on the CPUs of
//     package N (the per-thread placement of the /proc scan; time that cannot be placed is spread
//     over every CPU) / the busy time of those CPUs in /proc/stat, at most 1. Idle power stays
//     with the system level. psys: the same over every CPU.
//   GPUs: the share the gpu collector gives power: the level's SM utilisation / the device's,
//     or, on an idle device, its share of the device's used memory.
// A counter that cannot be read (root-only energy_uj, a zone that disappeared, a failing GPU) is
// not measured (NaN) at every level, never 0; its energy so far is kept for when it comes back.
#include <algorithm>
#include <array>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "collectors/builtin.hpp"
#include "core/nan.hpp"
#include "core/procfs.hpp"
#include "core/rapl.hpp"
#include "gpu/gpu.hpp"

namespace sonde::collectors {
namespace {

constexpr const char* kMethod =
    "system: the whole domain. Other levels: CPU domains of package N (package, core, uncore, "
    "dram) x the level's CPU time on package N's CPUs / their busy time in /proc/stat (at most 1; "
    "psys: over every CPU); GPUs x the level's share of the device's utilisation (else of its "
    "used memory), as gpu_power. Idle energy stays with the system level.";

struct Domain {
  std::string label;
  std::optional<rapl::Zone> zone;  ///< a RAPL zone, or
  std::size_t gpu = 0;             ///< an index into the GPU snapshot
  bool counted = false;            ///< part of the node's total (no domain counted twice)
  // Per tick.
  std::optional<double> prev;  ///< last reading (µJ for RAPL, mJ for GPUs)
  double delta_j = kNaN;       ///< this interval's energy, NaN when not measured
  bool readable = false;       ///< read this tick
  std::array<double, kNumLevels> share{};
  std::array<double, kNumLevels> total_j{};
};

class EnergyCollector final : public Collector {
 public:
  explicit EnergyCollector(const CollectorArgs& a)
      : roots_(*a.roots),
        want_gpus_(a.flag("gpus")),
        carbon_(std::get<double>(a.param("carbon_intensity"))),
        warn_(a.warn) {}

  Result<void> setup() override {
    if (!(carbon_ >= 0) || !std::isfinite(carbon_)) {
      const std::string why = fmt::format(
          "collector 'energy': carbon_intensity must be a number of g CO2/kWh >= 0, got {}",
          carbon_);
      if (warn_) warn_(why);
      return make_error(Errc::unavailable, why);
    }
    std::vector<std::string> notes;
    const auto zones = rapl::discover(roots_.sys, &notes);
    bool any_package = false;
    for (const auto& z : zones) any_package = any_package || z.kind == "package";
    std::vector<std::string> denied;
    for (const auto& z : zones) {
      Domain d;
      d.label = z.label;
      d.counted = z.kind == "package" || z.kind == "dram" || (z.kind == "psys" && !any_package);
      d.zone = z;
      const rapl::Reading r = rapl::read_energy(z);
      if (r.denied) denied.push_back(z.dir + "/energy_uj");
      domains_.push_back(std::move(d));
    }
    if (!denied.empty() && warn_)
      warn_(fmt::format("energy: {}{}", rapl::permission_hint(denied.front()),
                        denied.size() > 1 ? fmt::format(" ({} zones)", denied.size()) : ""));
    if (want_gpus_) {
      gpus_ = gpu::open_gpus();
      snap_ = gpu::query_all(gpus_, false);
      for (std::size_t i = 0; i < snap_.devices.size(); ++i) {
        Domain d;
        d.label = fmt::format("gpu-{}", i);
        d.gpu = i;
        d.counted = true;
        domains_.push_back(std::move(d));
      }
    }
    if (domains_.empty()) {
      std::string why = fmt::format(
          "no RAPL zone under {}/class/powercap (a virtual machine or a CPU without RAPL)",
          roots_.sys);
      if (want_gpus_) why += " and no GPU";
      for (const auto& n : notes) why += "; " + n;
      return make_error(Errc::unavailable, why);
    }
    if (!zones.empty()) read_topology();
    return {};
  }

  std::size_t devices(Level) const override { return domains_.size(); }
  ScanNeeds needs() const override { return {.io = false, .threads = true}; }
  bool needs_watchdog() const override { return !snap_.devices.empty(); }

  void contribute_node_info(NodeInfo& node) const override {
    node.energy.domains.clear();
    node.energy.counted.clear();
    for (const auto& d : domains_) {
      node.energy.domains.push_back(d.label);
      if (d.counted) node.energy.counted.push_back(d.label);
    }
    node.energy.method = kMethod;
    node.energy.carbon_intensity_g_per_kwh = carbon_;
  }

  void snapshot(const TickContext& ctx) override {
    const double dt = ctx.dt_s;
    read_cpus(dt);
    bool with_processes = false;
    for (Level l : kAllLevels)
      if (l != Level::system && ctx.procs && !members(ctx, l).empty()) with_processes = true;
    if (!snap_.devices.empty()) snap_ = gpu::query_all(gpus_, with_processes);
    for (Domain& d : domains_) read_domain(d, dt);
    // Level shares.
    std::array<std::vector<double>, kNumLevels> level_cpu_s;  // per package slot
    for (Level l : kAllLevels) {
      const auto li = level_index(l);
      if (l != Level::system && ctx.procs && dt > 0) level_cpu_s[li] = level_seconds(ctx, l);
      for (Domain& d : domains_) {
        if (l == Level::system)
          d.share[li] = 1;
        else if (!ctx.procs || dt <= 0)
          d.share[li] = 0;
        else if (d.zone)
          d.share[li] = cpu_share(d.zone->package, level_cpu_s[li]);
        else
          d.share[li] = gpu_share(d.gpu, ctx, l);
      }
    }
    for (Domain& d : domains_)
      for (Level l : kAllLevels) {
        const auto li = level_index(l);
        if (d.readable && std::isfinite(d.delta_j) && std::isfinite(d.share[li]))
          d.total_j[li] += d.delta_j * d.share[li];
      }
  }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    const auto li = level_index(level);
    MultiPerDevice out;
    out.metrics.assign(2, std::vector<double>(domains_.size(), kNaN));
    for (std::size_t i = 0; i < domains_.size(); ++i) {
      const Domain& d = domains_[i];
      if (!d.readable || std::isnan(d.share[li])) continue;
      if (ctx.dt_s > 0 && std::isfinite(d.delta_j))
        out.metrics[0][i] = d.delta_j * d.share[li] / ctx.dt_s;
      out.metrics[1][i] = d.total_j[li];
    }
    return RawValue(std::move(out));
  }

 private:
  // The package of every CPU (sysfs topology); a CPU without topology belongs to the only package
  // when there is one.
  void read_topology() {
    auto text = read_file(roots_.proc + "/stat");
    if (!text) return;
    auto st = procfs::parse_proc_stat(*text);
    if (!st) return;
    prev_stat_ = *st;
    int only = -1, packages = 0;
    for (const auto& d : domains_)
      if (d.zone && d.zone->kind == "package") {
        only = d.zone->package;
        ++packages;
      }
    int max_id = 0;
    for (int id : st->cpu_ids) max_id = std::max(max_id, id);
    cpu_package_.assign(static_cast<std::size_t>(max_id) + 1, -1);
    for (int id : st->cpu_ids) {
      auto pkg = read_file(
          fmt::format("{}/devices/system/cpu/cpu{}/topology/physical_package_id", roots_.sys, id));
      int v = -1;
      if (pkg) {
        try {
          v = std::stoi(*pkg);
        } catch (...) {
          v = -1;
        }
      }
      if (v < 0 && packages == 1) v = only;
      cpu_package_[static_cast<std::size_t>(id)] = v;
    }
  }

  // Busy seconds per CPU id this interval (/proc/stat).
  void read_cpus(double dt) {
    busy_s_.assign(cpu_package_.size(), 0.0);
    if (cpu_package_.empty()) return;
    auto text = read_file(roots_.proc + "/stat");
    if (!text) return;
    auto st = procfs::parse_proc_stat(*text);
    if (!st) return;
    if (dt > 0 && prev_stat_)
      for (std::size_t i = 0; i < st->cpu_ids.size(); ++i) {
        const int id = st->cpu_ids[i];
        if (id < 0 || static_cast<std::size_t>(id) >= busy_s_.size()) continue;
        for (std::size_t j = 0; j < prev_stat_->cpu_ids.size(); ++j) {
          if (prev_stat_->cpu_ids[j] != id) continue;
          const auto& a = prev_stat_->per_cpu[j];
          const auto& b = st->per_cpu[i];
          const double total = static_cast<double>(b.total()) - static_cast<double>(a.total());
          const double busy = static_cast<double>(b.busy()) - static_cast<double>(a.busy());
          if (total > 0)
            busy_s_[static_cast<std::size_t>(id)] = std::clamp(busy / total, 0.0, 1.0) * dt;
          break;
        }
      }
    prev_stat_ = std::move(*st);
  }

  void read_domain(Domain& d, double dt) {
    d.delta_j = kNaN;
    d.readable = false;
    if (d.zone) {
      const rapl::Reading r = rapl::read_energy(*d.zone);
      if (!r.uj) {
        if (!r.denied && !reported_.contains(d.label) && warn_) {
          reported_.insert(d.label);
          warn_(fmt::format("energy: domain {} is not measured from now on: {}", d.label, r.error));
        }
        d.prev.reset();
        return;
      }
      d.readable = true;
      if (d.prev) d.delta_j = rapl::delta_joules(*d.zone, *d.prev, *r.uj);
      d.prev = *r.uj;
      return;
    }
    if (d.gpu >= snap_.devices.size()) return;
    const gpu::GpuDevice& g = snap_.devices[d.gpu];
    if (g.error) {
      d.prev.reset();
      return;
    }
    if (g.energy_mj) {
      const double cur = static_cast<double>(*g.energy_mj);
      d.readable = true;
      if (d.prev && cur >= *d.prev)
        d.delta_j = (cur - *d.prev) / 1000.0;
      else if (d.prev && g.power_w && dt > 0)  // the counter went back (driver reload)
        d.delta_j = *g.power_w * dt;
      d.prev = cur;
      return;
    }
    d.prev.reset();
    if (!g.power_w) return;  // neither a counter nor power: not measured
    d.readable = true;
    if (dt > 0) d.delta_j = *g.power_w * dt;  // power integrated over the interval
  }

  // The level's CPU seconds per package (index: package id; the last slot: every CPU).
  std::vector<double> level_seconds(const TickContext& ctx, Level level) const {
    int max_pkg = 0;
    for (int p : cpu_package_) max_pkg = std::max(max_pkg, p);
    std::vector<double> out(static_cast<std::size_t>(max_pkg) + 2, 0.0);
    const double unplaced = place_cpu_shares(ctx, level, [&](int cpu, double seconds) {
      if (cpu < 0 || static_cast<std::size_t>(cpu) >= cpu_package_.size()) return false;
      const int pkg = cpu_package_[static_cast<std::size_t>(cpu)];
      if (pkg >= 0) out[static_cast<std::size_t>(pkg)] += seconds;
      out.back() += seconds;
      return true;
    });
    if (unplaced > 0) {
      // Spread over every CPU: each package gets its CPUs' part.
      std::vector<double> cpus(out.size(), 0.0);
      double n = 0;
      for (int p : cpu_package_) {
        if (p >= 0) cpus[static_cast<std::size_t>(p)] += 1;
        n += 1;
      }
      for (std::size_t k = 0; k + 1 < out.size(); ++k) out[k] += unplaced * cpus[k] / n;
      out.back() += unplaced;
    }
    return out;
  }

  double cpu_share(int package, const std::vector<double>& level_s) const {
    if (level_s.empty()) return kNaN;
    double busy = 0, used = 0;
    bool any = false;
    for (std::size_t id = 0; id < cpu_package_.size(); ++id) {
      if (package >= 0 && cpu_package_[id] != package) continue;
      busy += busy_s_[id];
      any = true;
    }
    if (!any || (package >= 0 && static_cast<std::size_t>(package) + 1 >= level_s.size()))
      return kNaN;  // no CPU known on this package: cannot attribute
    used = package >= 0 ? level_s[static_cast<std::size_t>(package)] : level_s.back();
    if (used <= 0) return 0;
    return busy > 0 ? std::min(1.0, used / busy) : 1.0;
  }

  // The level's share of the GPU's power, as the gpu collector's (gpu::process_use).
  double gpu_share(std::size_t index, const TickContext& ctx, Level level) const {
    if (index >= snap_.devices.size()) return kNaN;
    const gpu::GpuDevice& d = snap_.devices[index];
    if (d.error || !d.processes) return kNaN;
    std::unordered_set<int> pids;
    for (auto idx : members(ctx, level)) pids.insert(ctx.procs->pids[idx].pid);
    const gpu::ProcessUse use = gpu::process_use(d, pids);
    return use.any ? use.power_share : 0;
  }

  Roots roots_;
  bool want_gpus_ = true;
  double carbon_ = 0;
  std::function<void(const std::string&)> warn_;
  std::vector<Domain> domains_;
  gpu::Gpus gpus_;
  gpu::GpuSnapshot snap_;
  std::vector<int> cpu_package_;  ///< per CPU id: its package, -1 unknown
  std::vector<double> busy_s_;    ///< per CPU id: busy seconds this interval
  std::optional<procfs::ProcStat> prev_stat_;
  std::unordered_set<std::string> reported_;
};

}  // namespace

CollectorInfo energy_info() {
  return {"sonde.collectors.energy",
          "Power (W) and energy since the start (J) per RAPL domain (package, core, uncore, dram, "
          "psys) and per GPU (NVML, ROCm SMI); the level's share at the non-system levels",
          {{"carbon_intensity", ParamType::number, 480.0,
            "grams of CO2 per kWh for the CO2 estimate (default: the 2023 world average of the "
            "Ember Global Electricity Review 2024)"},
           {"gpus", ParamType::boolean, true, "also the GPUs' energy counters"}},
          false,
          [](const CollectorArgs& a) -> std::unique_ptr<Collector> {
            return std::make_unique<EnergyCollector>(a);
          }};
}

}  // namespace sonde::collectors
