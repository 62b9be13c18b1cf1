#include "collectors/builtin.hpp"

namespace sonde {

void register_builtin_collectors(Registry& registry) {
  registry.add(collectors::process_info());
  registry.add(collectors::cpu_info());
  registry.add(collectors::memory_info());
  registry.add(collectors::memory_rss_info());
  registry.add(collectors::io_info());
  registry.add(collectors::network_info());
  registry.add(collectors::procs_info());
  registry.add(collectors::gpu_info());
  registry.add(collectors::gpu_info("nvidia"));
  registry.add(collectors::gpu_info("amd"));
  registry.add(collectors::energy_info());
}

}  // namespace sonde
