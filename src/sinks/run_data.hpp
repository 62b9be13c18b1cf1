#pragma once
// A run directory, read back (manifest.json + perf_<level>.csv, and the cell_history.csv of a
// Jupyter session), and the bounds of what sonde reads of any stored run. The run's types are in
// core/stored_run.hpp; read_run (sinks/run_reader.hpp) also opens zipped runs and SQLite runs.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/result.hpp"
#include "core/stored_run.hpp"
// Kept for the users of this header: summarize_run and level_num_cpus
// (core/stored_summary.hpp), and read_run, which opens a run directory, a zipped one or a SQLite
// run (sinks/run_reader.hpp).
#include "core/stored_summary.hpp"
#include "sinks/run_reader.hpp"

namespace sonde {

/// What sonde reads of a stored run, at most (docs/security.md, "Resource bounds"); more is an
/// error naming the file.
inline constexpr std::uint64_t kMaxManifestBytes = 16u << 20;     ///< manifest.json
inline constexpr std::uint64_t kMaxCellHistoryBytes = 64u << 20;  ///< cell_history.csv
inline constexpr std::size_t kMaxRunFileLines = 1u << 24;         ///< lines of a perf_<level>.csv
inline constexpr std::size_t kMaxRunLineBytes = 1u << 20;         ///< bytes of one CSV line
inline constexpr std::uint64_t kMaxRunValues = 1u << 26;   ///< values of a run (512 MiB as double)
inline constexpr std::uint64_t kMaxZipBytes = 256u << 20;  ///< a zipped run, read whole
/// What a zip's entries may inflate to, in all: kMaxZipInflateRatio times the archive's size
/// (at least kZipInflateFloorBytes), and never more than kMaxZipInflatedBytes.
inline constexpr std::uint64_t kMaxZipInflateRatio = 100;
inline constexpr std::uint64_t kZipInflateFloorBytes = 64u << 20;
inline constexpr std::uint64_t kMaxZipInflatedBytes = 2ull << 30;

/// Reads a run directory. A truncated last line (the run was killed) is skipped; a malformed
/// file is an error naming the file and line. The run's files are plain names inside `dir`
/// (manifest `files` naming `/etc/passwd` or `../x` is an error), regular files opened without
/// following links, read within the bounds above; an error never quotes a file that is not a
/// run file. A multi-node run (manifest `nodes`, docs/report.md) also gets its nodes
/// (RunData::nodes) from `nodes/<node>/perf_<level>.csv`; node names must be plain names.
Result<RunData> read_run_dir(const std::string& dir);

/// The manifest of the run directory open as `dir_fd` (named `dir` in errors), within the bounds
/// above (size, nesting); what `sonde runs list` reads of each run directory.
Result<nlohmann::json> read_run_manifest(int dir_fd, const std::string& dir);

}  // namespace sonde
