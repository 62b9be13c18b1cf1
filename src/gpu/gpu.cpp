// open_gpus / query_all: every vendor backend that can be opened here.
#include "gpu/gpu.hpp"

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

}  // namespace sonde::gpu
