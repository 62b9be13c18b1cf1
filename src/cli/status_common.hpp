#pragma once
// What `sonde status`, `sonde gpustat` and `sonde top` share (src/cli/status_common.cpp).
#include <string>
#include <vector>

#include "views/status_hooks.hpp"

namespace sonde::cli {

/// Colours by default: stdout is a terminal, $TERM is not "dumb", $NO_COLOR is unset or empty.
bool auto_color();
/// The built-in status plugins, then those of the plugin directories (a name clash is skipped
/// with a warning on stderr).
std::vector<status::StatusPluginRef> all_status_plugins();
/// The settings of `command` from the environment: $SONDE_PROC_ROOT (not under AT_SECURE),
/// $SONDE_STATUS_HOOK_TIMEOUT (a warning when malformed).
status::StatusSettings status_settings(const std::string& command);

}  // namespace sonde::cli
