#pragma once
// What every front end (the CLI, the Python extension) builds an engine from: the roots from the
// environment and a list of levels.
#include <string>
#include <vector>

#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde {

/// Parses "process,user" (unknown names and duplicates are errors, Errc::config, naming --levels).
Result<std::vector<Level>> parse_levels(const std::string& text);
/// Roots from $SONDE_PROC_ROOT / $SONDE_SYS_ROOT (for tests), else /proc and /sys.
Roots roots_from_env();

}  // namespace sonde
