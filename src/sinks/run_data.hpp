#pragma once
// A stored run, read back: from a run directory (manifest.json + perf_<level>.csv, and the
// cell_history.csv of a Jupyter session) or from a SQLite database (src/sinks/sqlite.hpp). What
// `sonde report`, `sonde runs` and the Jupyter package read.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde {

struct LevelTable {
  Level level = Level::system;
  /// Every column of the level's rows, `time` and `wallclock` first, as in perf_<level>.csv.
  std::vector<std::string> columns;
  /// One row per tick; a missing value (empty CSV field, SQL NULL) is NaN.
  std::vector<std::vector<double>> rows;
  /// Index of `name` in `columns`, or nullopt.
  std::optional<std::size_t> find(const std::string& name) const;
};

/// One executed notebook cell (cell_history.csv of a Jupyter session).
///
/// cell_history.csv (written by the Jupyter package next to manifest.json) is RFC 4180 CSV with
/// the header `index,start_wallclock,end_wallclock,code`: the execution count (integer), the
/// cell's start and end as epoch seconds, and its source code, quoted with `"` (a `"` inside is
/// doubled; newlines allowed inside the quotes). A truncated last record is skipped.
struct CellRecord {
  int index = 0;  ///< execution count
  double start_wallclock = 0, end_wallclock = 0;
  std::string code;
};

struct RunData {
  nlohmann::json manifest;         ///< as written by RunDirSink (keys: levels, interval, ...)
  std::vector<LevelTable> levels;  ///< in the manifest's level order
  std::vector<CellRecord> cells;   ///< empty outside Jupyter sessions
  std::string source;              ///< the directory, or "FILE.sqlite#ID"
  const LevelTable* find(Level level) const;
};

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

/// What 100 % CPU means at `level` in a manifest's node_info: cpus_per_level.<level>.num_cpus,
/// else (older runs) num_system_cpus for the node and num_cpus for the other levels; NaN if none.
double level_num_cpus(const nlohmann::json& node, Level level);

/// Reads a run directory. A truncated last line (the run was killed) is skipped; a malformed
/// file is an error naming the file and line. The run's files are plain names inside `dir`
/// (manifest `files` naming `/etc/passwd` or `../x` is an error), regular files opened without
/// following links, read within the bounds above; an error never quotes a file that is not a
/// run file.
Result<RunData> read_run_dir(const std::string& dir);

/// Reads a stored run named the way the command line names it: a run directory, or a run in a
/// SQLite database, `FILE.sqlite#ID` (`FILE.sqlite`: its latest run; see read_run_sqlite).
Result<RunData> read_run(const std::string& spec);

/// The summary of a stored run, or of the rows whose wallclock lies in `window` (a notebook
/// cell): per level and per metric group (CPU, memory, GPU utilisation, GPU memory, ...) the
/// mean/min/max and the limit, plus the bottleneck tags, with the same keys and tag rules as
/// summary_json (core/summary.hpp) where they overlap.
///
/// Keys: the top-level keys of summary_json for its level (process, else system): command,
/// exit_status, wall_s, level, ticks, num_cpus, cpu_mean_cores, cpu_peak_cores, cpu_seconds,
/// memory_peak_gib, memory_limit_gib, read_bytes, written_bytes, net_sent_bytes,
/// net_recv_bytes, tags; plus host, start_wallclock, end_wallclock, window ([from, to] or null)
/// and `levels`: {level: {ticks, duration_s, num_cpus, groups: {group: {mean, min, max, limit,
/// unit}}, totals: {read_bytes, written_bytes, read_ops, write_ops, net_sent_bytes,
/// net_recv_bytes, net_sent_packets, net_recv_packets}}}. Groups: `cpu` (cpu_util_avg, percent
/// of the level's CPUs, limit 100), `cpu_cores` (the same in cores, limit num_cpus), `memory`
/// (GiB, limit the level's memory limit), and when gpu_* columns exist `gpu_util`, `gpu_band`
/// (percent, limit 100), `gpu_mem` (GiB per device on average, limit one device's memory).
/// A statistic without a measured value is null.
nlohmann::json summarize_run(const RunData& run,
                             std::optional<std::pair<double, double>> window = std::nullopt);

}  // namespace sonde
