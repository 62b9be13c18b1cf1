#include "cli/serve_gpus.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <unordered_set>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/nan.hpp"

namespace sonde::cli {

std::unique_ptr<JobGpus> JobGpus::open() {
  gpu::Gpus gpus = gpu::open_gpus();
  int n = 0;
  for (const auto& b : gpus.backends) n += b->device_count();
  if (n == 0) return nullptr;
  return std::make_unique<JobGpus>(std::move(gpus));
}

JobGpus::JobGpus(gpu::Gpus gpus) : gpus_(std::move(gpus)) {}

std::vector<prom::JobGpuUse> JobGpus::attribute(const std::map<std::string, std::vector<int>>& pids,
                                                double now_s) {
  const gpu::GpuSnapshot snap = gpu::query_all(gpus_, !pids.empty());  // process lists: for jobs
  devices_.resize(snap.devices.size());
  std::vector<prom::JobGpuUse> out;
  for (std::size_t i = 0; i < snap.devices.size(); ++i) {
    const gpu::GpuDevice& d = snap.devices[i];
    DeviceState& st = devices_[i];
    // The device's energy since the last scan: its counter's growth, else power × time.
    double energy_j = 0;
    const double dt = st.prev_s ? now_s - *st.prev_s : 0;
    if (!d.error && d.energy_mj) {
      const double cur = static_cast<double>(*d.energy_mj);
      if (st.prev_mj && cur >= *st.prev_mj)
        energy_j = (cur - *st.prev_mj) / 1000.0;
      else if (st.prev_mj && d.power_w && dt > 0)  // the counter went back (driver reload)
        energy_j = *d.power_w * dt;
      st.prev_mj = cur;
    } else {
      st.prev_mj.reset();
      if (!d.error && d.power_w && dt > 0) energy_j = *d.power_w * dt;
    }
    st.prev_s = now_s;
    if (d.error || !d.processes) continue;
    for (const auto& [job, list] : pids) {
      const std::unordered_set<int> set(list.begin(), list.end());
      const gpu::ProcessUse use = gpu::process_use(d, set);
      if (!use.any) continue;
      prom::JobGpuUse u;
      u.job = job;
      u.gpu = static_cast<int>(i);
      u.utilization_ratio = std::isnan(use.util) ? kNaN : use.util / 100.0;
      u.memory_bytes = use.memory_bytes ? *use.memory_bytes : kNaN;
      u.power_watts =
          d.power_w && !std::isnan(use.power_share) ? *d.power_w * use.power_share : kNaN;
      u.energy_joules_delta = std::isnan(use.power_share) ? kNaN : energy_j * use.power_share;
      out.push_back(std::move(u));
    }
  }
  return out;
}

GuardedJobGpus::GuardedJobGpus(std::shared_ptr<JobGpus> gpus, double deadline_s)
    : gpus_(std::move(gpus)), deadline_s_(deadline_s) {}

std::vector<prom::JobGpuUse> GuardedJobGpus::attribute(
    const std::map<std::string, std::vector<int>>& pids) {
  // What the call touches is its own (shared_ptr): a late return writes nothing of ours.
  auto in = std::make_shared<const std::map<std::string, std::vector<int>>>(pids);
  auto out = std::make_shared<std::vector<prom::JobGpuUse>>();
  dog_.start({Watchdog::Call{.slot = 0, .deadline_s = deadline_s_, .run = [g = gpus_, in, out] {
                               try {
                                 *out = g->attribute(*in, monotonic_now());
                               } catch (...) {
                                 out->clear();  // nothing attributed this scan
                               }
                             }}});
  const Watchdog::Report r = dog_.wait().at(0);
  if (r.outcome == Watchdog::Outcome::done) {
    if (stuck_) {
      std::cerr << "sonde: note: serve --per-job: the GPU driver answers again; the jobs' GPU "
                   "series are back\n";
      stuck_ = false;
    }
    return std::move(*out);
  }
  if (!stuck_) {
    std::cerr << fmt::format(
        "sonde: warning: serve --per-job: the GPU driver did not answer within {} s; the jobs' "
        "GPU series are left out until it does (the other series go on)\n",
        deadline_s_);
    stuck_ = true;
  }
  return {};
}

std::vector<prom::MigSeries> mig_series(const gpu::GpuSnapshot& snap) {
  std::vector<prom::MigSeries> out;
  for (std::size_t i = 0; i < snap.devices.size(); ++i) {
    const gpu::GpuDevice& d = snap.devices[i];
    if (d.error || !d.mig_mode.value_or(false)) continue;
    for (const gpu::MigDevice& m : d.mig) {
      if (m.error) continue;
      prom::MigSeries s;
      s.gpu = static_cast<int>(i);
      s.uuid = m.uuid;
      s.profile = m.profile;
      if (m.gpu_instance_id) s.gpu_instance_id = *m.gpu_instance_id;
      if (m.compute_instance_id) s.compute_instance_id = *m.compute_instance_id;
      s.memory_used_bytes = m.mem_used_bytes ? static_cast<double>(*m.mem_used_bytes) : kNaN;
      s.memory_total_bytes = m.mem_total_bytes ? static_cast<double>(*m.mem_total_bytes) : kNaN;
      s.processes = m.processes ? static_cast<double>(m.processes->size()) : kNaN;
      s.utilization_ratio = m.util_gpu ? *m.util_gpu / 100.0 : kNaN;
      out.push_back(std::move(s));
    }
  }
  return out;
}

std::unique_ptr<GuardedMigGpus> GuardedMigGpus::open(double deadline_s) {
  auto gpus = std::make_shared<gpu::Gpus>(gpu::open_gpus());
  // Whether a GPU is in MIG mode: one query without process lists, on this thread (as the
  // collectors' setup queries the devices).
  const gpu::GpuSnapshot snap = gpu::query_all(*gpus, false);
  const bool any = std::any_of(snap.devices.begin(), snap.devices.end(),
                               [](const gpu::GpuDevice& d) { return d.mig_mode.value_or(false); });
  if (!any) return nullptr;
  return std::make_unique<GuardedMigGpus>(std::move(gpus), deadline_s);
}

GuardedMigGpus::GuardedMigGpus(std::shared_ptr<gpu::Gpus> gpus, double deadline_s)
    : gpus_(std::move(gpus)), deadline_s_(deadline_s) {}

std::vector<prom::MigSeries> GuardedMigGpus::series() {
  auto out = std::make_shared<std::vector<prom::MigSeries>>();
  dog_.start({Watchdog::Call{.slot = 0, .deadline_s = deadline_s_, .run = [g = gpus_, out] {
                               try {
                                 *out = mig_series(gpu::query_all(*g, true));
                               } catch (...) {
                                 out->clear();
                               }
                             }}});
  const Watchdog::Report r = dog_.wait().at(0);
  if (r.outcome == Watchdog::Outcome::done) {
    if (stuck_) {
      std::cerr << "sonde: note: serve: the GPU driver answers again; the MIG series are back\n";
      stuck_ = false;
    }
    return std::move(*out);
  }
  if (!stuck_) {
    std::cerr << fmt::format(
        "sonde: warning: serve: the GPU driver did not answer within {} s; the MIG series are "
        "left out until it does (the other series go on)\n",
        deadline_s_);
    stuck_ = true;
  }
  return {};
}

}  // namespace sonde::cli
