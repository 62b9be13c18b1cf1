#pragma once
// Shared pieces of the outputs: numbers, the description of a run's columns and node.
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"
#include "core/fs.hpp"
#include "core/live_summary.hpp"

namespace sonde {

/// Appends a number as CSV/JSON text (10 significant digits); NaN/Inf append `nan_text`.
void append_number(std::string& out, double v, std::string_view nan_text);

/// Appends a time in seconds to the microsecond (monotonic time is seconds since boot: with 10
/// significant digits it resolved only 1 ms after 116 days, while intervals go down to 1 ms).
void append_time(std::string& out, double time_s, std::string_view nan_text);

/// {"process": ["cpu_util_0", …], …} for the active levels (without time/wallclock).
nlohmann::json columns_by_level_json(const Engine& engine);

/// Node info and limits: num_cpus, num_system_cpus, cpu_handles, cpu_quota, memory_limits
/// (bytes per level) and their sources, mem_total_bytes, GPU count/name/memory.
nlohmann::json node_info_json(const Engine& engine);

/// The active levels' names.
nlohmann::json levels_json(const Engine& engine);

/// The end of a run in its manifest: end_wallclock, exit_status (null when unknown), complete,
/// ticks, ticks_missed and summary.
void set_manifest_end(nlohmann::json& manifest, double end_wallclock, const RunOutcome& outcome,
                      bool complete, const nlohmann::json& summary, std::uint64_t ticks,
                      std::uint64_t ticks_missed);

/// Opens (creating it if missing) the directory a new run is written to, with open_output_dir's
/// rules; a directory that already holds a run (manifest.json) is a configuration error whose
/// message ends with `advice` (e.g. "choose another --out").
Result<UniqueFd> open_new_run_dir(const std::string& dir, std::string_view advice);

}  // namespace sonde
