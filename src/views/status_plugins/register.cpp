// Explicit registration of the built-in status plugins.
#include "views/status_plugins/builtin.hpp"

namespace sonde::status {

std::vector<StatusPluginRef> builtin_status_plugins() {
  return {host_status_plugin(), slurm_status_plugin(), container_status_plugin()};
}

}  // namespace sonde::status
