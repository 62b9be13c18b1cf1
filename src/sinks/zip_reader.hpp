#pragma once
// A zipped run directory (`zip -r run.zip RUN_DIR`), read as the run directory it holds.
#include <string>

#include "core/result.hpp"
#include "core/stored_run.hpp"

namespace sonde {

/// Reads the one run in the zip file `zip` (stored or deflated entries, no zip64, no
/// encryption): its run files (a multi-node run's `nodes/<node>/perf_<level>.csv` too) are
/// extracted to a temporary directory, within the bounds of run_data.hpp (kMaxZipBytes, the inflate
/// limits), and read with read_run_dir. Errors name the archive and the entry. `source` is the zip
/// file.
Result<RunData> read_run_zip(const std::string& zip);

}  // namespace sonde
