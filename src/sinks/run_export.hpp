#pragma once
// A stored run (from any reader) written out as a run directory, the layout RunDirSink writes.
#include <string>

#include "core/result.hpp"
#include "core/stored_run.hpp"

namespace sonde {

/// Writes `run` as a run directory (manifest.json + perf_<level>.csv, the layout of RunDirSink).
/// Refuses a directory that already holds a run. A multi-node run is written in its layout:
/// the aggregate as perf_<level>.csv, each node's rows as nodes/<node>/perf_<level>.csv.
Result<void> write_run_dir(const RunData& run, const std::string& dir);

}  // namespace sonde
