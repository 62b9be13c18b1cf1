#pragma once
// Opens a stored run however it is stored: a run directory, a zipped run directory, or a run in
// a SQLite database. Above both readers (sinks/run_data.hpp, sinks/zip_reader.hpp,
// sinks/sqlite.hpp), which know nothing of each other.
#include <string>

#include "core/result.hpp"
#include "core/stored_run.hpp"

namespace sonde {

/// Reads a stored run named the way the command line names it: a run directory, a zipped one
/// (RUN.zip), or a run in a SQLite database, `FILE.sqlite#ID` (`FILE.sqlite`: its latest run;
/// see read_run_sqlite).
Result<RunData> read_run(const std::string& spec);

}  // namespace sonde
