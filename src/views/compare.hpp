#pragma once
// `sonde compare RUN_A RUN_B`: two stored runs side by side (wall, CPU, memory, I/O, network,
// GPU, energy, with the change in %, and their tags), as text, JSON or a self-contained HTML
// page whose charts overlay the two runs over the time since each started.
#include <string>

#include <nlohmann/json.hpp>

#include "core/stored_run.hpp"

namespace sonde {

/// The comparison: {"a": RUN, "b": RUN, "rows": [ROW...], "tags": {"a": [...], "b": [...],
/// "only_a": [...], "only_b": [...]}}. RUN: {source, command, start_wallclock, level, host}.
/// ROW: {key, label, unit, a, b, change_pct}; a figure a run does not have is null, and so is
/// change_pct then, or when A's figure is 0. Each figure is the stored run's summary
/// (summarize_run, the same numbers as `sonde runs show` and the report) where it has the key,
/// else the summary `sonde run` wrote at the end (the kernel's figures: wait4's CPU and max RSS,
/// energy, GPU energy).
nlohmann::json compare_runs(const RunData& a, const RunData& b);

/// The comparison for a terminal: one line per figure that either run has.
std::string compare_text(const nlohmann::json& comparison);

/// A self-contained HTML page: the table, the tags, and per metric (CPU in cores, memory in GiB,
/// GPU utilisation where both runs have it) one SVG chart with both runs over the seconds since
/// each run's first row.
std::string compare_html(const nlohmann::json& comparison, const RunData& a, const RunData& b);

}  // namespace sonde
