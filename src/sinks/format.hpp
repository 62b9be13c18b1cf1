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

/// Where each level's CPU, memory and I/O figures come from (the manifest's `level_sources`, the
/// agent's end line): at the start, and at the end with what changed (the slurm level's job
/// cgroup, found at the first scan that saw a member in it; a level whose member left its
/// cgroup). `no_cgroup_why`: why `sonde run` made no cgroup for the process level ("" if it did
/// or was not asked to).
nlohmann::json level_sources_json(const Engine& engine, const std::string& no_cgroup_why);

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
