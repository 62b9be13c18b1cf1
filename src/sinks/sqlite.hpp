#pragma once
// Runs in one SQLite database that many runs share (docs/sqlite.md has the schema and example
// queries). The database is in WAL mode; each tick is one short transaction, so several runs can
// write to the same file at once and a run killed with SIGKILL keeps every committed tick. The
// run's row says `complete = 0` until the run ends cleanly.
//
// The parts, one file each: sinks/sqlite_db.hpp (connection, statements, schema),
// sinks/sqlite_writer.hpp (SqliteSink), sinks/sqlite_reader.hpp (listing and reading runs);
// sinks/run_export.hpp (write_run_dir) writes a run read back as a run directory.
#include "sinks/run_export.hpp"
#include "sinks/sqlite_db.hpp"
#include "sinks/sqlite_reader.hpp"
#include "sinks/sqlite_writer.hpp"
