#pragma once
// The built-in status plugins: each is a sonde::sdk::StatusPlugin behind the same C table as a
// plugin library (src/views/status_hooks.cpp calls them alike).
#include "views/status_hooks.hpp"

namespace sonde::status {
StatusPluginRef host_status_plugin();       ///< host CPU, load, memory and swap lines
StatusPluginRef slurm_status_plugin();      ///< Slurm job id of each GPU process
StatusPluginRef container_status_plugin();  ///< container of each GPU process (cgroup)
}  // namespace sonde::status
