// open_gpus / query_all: every vendor backend that can be opened here.
#include "gpu/gpu.hpp"

#include <algorithm>
#include <cmath>

#include "core/nan.hpp"
#include "gpu/backends.hpp"

namespace sonde::gpu {

Gpus open_gpus() {
  Gpus g;
  std::string note;
  if (auto b = open_nvml({}, note)) {
    g.nvml_loaded = true;
    g.nvidia_driver = b->driver_version();
    if (b->device_count() > 0) g.backends.push_back(std::move(b));
  }
  if (!note.empty()) g.notes.push_back(note);
  note.clear();
  if (auto b = open_rocm({}, note)) {
    g.rocm_loaded = true;
    g.amd_driver = b->driver_version();
    if (b->device_count() > 0) g.backends.push_back(std::move(b));
  }
  if (!note.empty()) g.notes.push_back(note);
  return g;
}

GpuSnapshot query_all(Gpus& gpus, bool with_processes) {
  GpuSnapshot s;
  s.nvidia_driver = gpus.nvidia_driver;
  s.amd_driver = gpus.amd_driver;
  for (auto& b : gpus.backends) {
    const int n = b->device_count();
    for (int i = 0; i < n; ++i) s.devices.push_back(b->query(i, with_processes));
  }
  return s;
}

std::string mig_profile(const std::string& name) {
  const auto at = name.rfind("MIG ");
  if (at == std::string::npos) return {};
  std::string p = name.substr(at + 4);
  while (!p.empty() && p.back() == ' ') p.pop_back();
  return p;
}

ProcessUse process_use(const GpuDevice& d, const std::unordered_set<int>& pids) {
  ProcessUse use;
  double sm = 0, bw = 0, bytes = 0;
  for (const GpuProcess& p : *d.processes) {
    if (!pids.contains(p.pid)) continue;
    use.any = true;
    if (p.used_memory_bytes) bytes += static_cast<double>(*p.used_memory_bytes);
    if (p.sm_util) sm += *p.sm_util;
    if (p.mem_util) bw += *p.mem_util;
    if (p.used_memory_bytes) use.memory_bytes = bytes;
    if (p.sm_util) use.sm_util = std::min(sm, 100.0);
    if (p.mem_util) use.mem_util = std::min(bw, 100.0);
  }
  use.util = use.sm_util ? *use.sm_util : d.util_gpu ? *d.util_gpu : kNaN;
  use.power_share = kNaN;
  if (d.util_gpu && *d.util_gpu > 0 && !std::isnan(use.util))
    use.power_share = std::min(1.0, use.util / *d.util_gpu);
  else if (d.mem_used_bytes && *d.mem_used_bytes > 0 && use.memory_bytes)
    use.power_share = std::min(1.0, *use.memory_bytes / static_cast<double>(*d.mem_used_bytes));
  return use;
}

}  // namespace sonde::gpu
