// gpu: per-GPU utilisation, memory-controller utilisation ("band"), memory in use (GiB) and power
// (W), from NVML and ROCm SMI (src/gpu). One query of every device per tick (snapshot), shared
// by all levels.
//
// The system level reads the devices. Other levels attribute per process, from the processes
// the driver lists on each device that belong to the level:
//   util  Σ of their SM utilisation samples (NVML process utilisation, AMD CU occupancy), capped
//         at 100; without samples, the device's utilisation when they hold memory on it;
//   band  Σ of their memory-controller samples, capped at 100; without samples, the device's;
//   mem   Σ of their used memory;
//   power the device's power × the level's share of the device's utilisation (util / device
//         util, at most 1); on an idle device, × its share of the device's used memory.
// A device that holds no process of the level gives 0 for it (measured: not used). A device
// whose driver cannot list processes, or that failed, gives NaN.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "collectors/builtin.hpp"
#include "core/nan.hpp"
#include "core/units.hpp"
#include "gpu/gpu.hpp"

namespace sonde::collectors {
namespace {

double value(const std::optional<double>& v) {
  return v ? *v : kNaN;
}

constexpr const char* kMetrics[] = {"util", "band", "mem", "power"};

class GpuCollector final : public Collector {
 public:
  /// `vendor`: "" for every GPU, or "nvidia" / "amd". `metrics`: the handler's metric names, a
  /// subset of kMetrics in any order (empty: all, in kMetrics order).
  GpuCollector(std::string vendor, std::vector<std::string> metrics)
      : vendor_(std::move(vendor)), metric_names_(std::move(metrics)) {}

  Result<void> setup() override {
    if (metric_names_.empty()) metric_names_.assign(std::begin(kMetrics), std::end(kMetrics));
    for (const auto& m : metric_names_) {
      auto it = std::find_if(std::begin(kMetrics), std::end(kMetrics),
                             [&](const char* k) { return m == k; });
      if (it == std::end(kMetrics))
        return make_error(Errc::unavailable,
                          fmt::format("unknown GPU metric '{}' in the handler's metrics (expected "
                                      "some of: util, band, mem, power)",
                                      m));
      order_.push_back(static_cast<std::size_t>(it - std::begin(kMetrics)));
    }
    gpus_ = gpu::open_gpus();
    if (!vendor_.empty())
      std::erase_if(gpus_.backends, [&](const auto& b) { return b->vendor() != vendor_; });
    std::size_t n = 0;
    for (const auto& b : gpus_.backends) n += static_cast<std::size_t>(b->device_count());
    if (n == 0) {
      std::string why = "no GPU";
      for (const auto& note : gpus_.notes) why += "; " + note;
      return make_error(Errc::unavailable, why);
    }
    // Discovery: what the devices are (also the node info).
    snap_ = gpu::query_all(gpus_, false);
    return {};
  }

  std::size_t devices(Level) const override { return snap_.devices.size(); }

  void contribute_node_info(NodeInfo& node) const override {
    node.num_gpus = static_cast<int>(snap_.devices.size());
    std::vector<std::string> names;
    double smallest = 0;
    for (const auto& d : snap_.devices) {
      if (!d.name.empty() && std::find(names.begin(), names.end(), d.name) == names.end())
        names.push_back(d.name);
      if (d.mem_total_bytes) {
        const double gib = static_cast<double>(*d.mem_total_bytes) / kGiB;
        smallest = smallest == 0 ? gib : std::min(smallest, gib);
      }
    }
    node.gpu_name = fmt::format("{}", fmt::join(names, ", "));
    node.gpu_memory_gib = smallest;
  }

  void snapshot(const TickContext& ctx) override {
    bool with_processes = false;
    for (Level l : kAllLevels)
      if (l != Level::system && !members(ctx, l).empty()) with_processes = true;
    snap_ = gpu::query_all(gpus_, with_processes);
  }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    MultiPerDevice all = measure(level, ctx);
    MultiPerDevice out;
    for (std::size_t i : order_) out.metrics.push_back(std::move(all.metrics[i]));
    return RawValue(std::move(out));
  }

  bool needs_watchdog() const override { return true; }  // a driver call can hang

 private:
  // Every metric of kMetrics, in that order.
  MultiPerDevice measure(Level level, const TickContext& ctx) const {
    const std::size_t n = snap_.devices.size();
    MultiPerDevice out;
    out.metrics.assign(4, std::vector<double>(n, kNaN));
    // metrics: 0 util, 1 band, 2 mem, 3 power (the handler's order in the default config)
    if (level == Level::system) {
      for (std::size_t i = 0; i < n; ++i) {
        const gpu::GpuDevice& d = snap_.devices[i];
        if (d.error) continue;
        out.metrics[0][i] = value(d.util_gpu);
        out.metrics[1][i] = value(d.util_mem);
        out.metrics[2][i] = d.mem_used_bytes ? static_cast<double>(*d.mem_used_bytes) / kGiB : kNaN;
        out.metrics[3][i] = value(d.power_w);
      }
      return out;
    }
    std::unordered_set<int> pids;
    for (auto idx : members(ctx, level)) pids.insert(ctx.procs->pids[idx].pid);
    for (std::size_t i = 0; i < n; ++i) {
      const gpu::GpuDevice& d = snap_.devices[i];
      if (d.error || !d.processes) continue;
      const gpu::ProcessUse use = gpu::process_use(d, pids);
      if (!use.any) {
        for (auto& m : out.metrics) m[i] = 0;
        continue;
      }
      out.metrics[0][i] = use.util;
      out.metrics[1][i] = use.mem_util ? *use.mem_util : value(d.util_mem);
      out.metrics[2][i] = use.memory_bytes ? *use.memory_bytes / kGiB : kNaN;
      out.metrics[3][i] = d.power_w ? *d.power_w * use.power_share : kNaN;
    }
    return out;
  }

  std::string vendor_;
  std::vector<std::string> metric_names_;
  std::vector<std::size_t> order_;  ///< index into kMetrics per handler metric
  gpu::Gpus gpus_;
  gpu::GpuSnapshot snap_;
};

}  // namespace

CollectorInfo gpu_info(const std::string& vendor) {
  const std::string target = vendor.empty()       ? "sonde.collectors.gpu"
                             : vendor == "nvidia" ? "sonde.collectors.gpu_nvml"
                                                  : "sonde.collectors.gpu_rocm";
  const std::string which = vendor.empty()       ? "NVIDIA (NVML) and AMD (ROCm SMI)"
                            : vendor == "nvidia" ? "NVIDIA GPUs only (NVML)"
                                                 : "AMD GPUs only (ROCm SMI)";
  return {target,
          "GPU utilisation, memory-controller utilisation (band), memory (GiB) and power (W) per "
          "device, " +
              which + "; per process at the non-system levels",
          {},
          false,
          [vendor](const CollectorArgs& a) {
            return std::make_unique<GpuCollector>(vendor, a.handler_metrics);
          }};
}

}  // namespace sonde::collectors
