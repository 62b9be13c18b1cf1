#pragma once
// The Sink adapters of `sonde run/record/stream`: the run directory (CSV), the SQLite database,
// the JSON stream, and the running statistics the summary is computed from.
#include <memory>

#include "core/live_summary.hpp"
#include "core/marks.hpp"
#include "core/phases.hpp"
#include "core/process_table.hpp"
#include "sinks/csv_run_dir.hpp"
#include "sinks/sink.hpp"
#include "sinks/sqlite.hpp"

namespace sonde {

/// The run directory: begin/end set the manifest's keys, write appends the CSV rows.
std::unique_ptr<Sink> make_run_dir_sink(std::unique_ptr<RunDirSink> dir);
/// The same keys and rows in a shared SQLite database.
std::unique_ptr<Sink> make_sqlite_sink(std::unique_ptr<SqliteSink> db);
/// JUmPER's protocol on `fd`: begin writes the `ready` line; the engine's first tick (a baseline,
/// with undefined rates) is not written. A closed reader is SinkStatus::closed. `protocol` 1 is
/// JUmPER's older protocol (src/sinks/json_stream_v1.hpp).
std::unique_ptr<Sink> make_json_stream_sink(int fd, const Engine& engine, int protocol = 2);
/// Adds every tick to `stats` (which must outlive the sink).
std::unique_ptr<Sink> make_stats_sink(RunStats& stats);
/// Feeds `table` the members of `level` at each tick, times in seconds since the run's start
/// (its baseline tick, else its first).
std::unique_ptr<Sink> make_process_table_sink(ProcessTable& table, Level level);
/// At each tick, reads the program's new marks from `marks` and gives `phases` the row of
/// `level` (its CPU, memory, I/O and GPU columns; wall-clock times). Both must outlive the sink.
std::unique_ptr<Sink> make_phase_sink(Phases& phases, MarkReader& marks, const Engine& engine,
                                      Level level);

}  // namespace sonde
