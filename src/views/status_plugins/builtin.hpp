#pragma once
// The built-in status plugins: each is a sonde::sdk::StatusPlugin behind the same C table as a
// plugin library (src/views/status_hooks.cpp calls them alike).
#include <optional>
#include <string>

#include "views/status_hooks.hpp"

namespace sonde::status {

/// A container runtime's cgroup, recognised by its name (container.cpp has the rules).
struct ContainerId {
  std::string runtime;
  std::string id;
  std::string pod;  ///< kubernetes pod uid, "" outside kubepods
  /// "<runtime>:<first 12 hex digits>", the `container` field of status and the column of top.
  std::string label() const;
};
/// The container of one cgroup path (a line of /proc/<pid>/cgroup), nullopt outside one.
std::optional<ContainerId> container_of_cgroup(const std::string& cgroup_path);

StatusPluginRef host_status_plugin();       ///< host CPU, load, memory and swap lines
StatusPluginRef slurm_status_plugin();      ///< Slurm job id of each GPU process
StatusPluginRef container_status_plugin();  ///< container of each GPU process (cgroup)
}  // namespace sonde::status
