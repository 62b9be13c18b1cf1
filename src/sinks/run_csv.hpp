#pragma once
// perf_<level>.csv, as every writer of a run directory writes it (the run directory sink, the
// multi-node head's store, `sonde export`, `sonde report --prometheus --save-run`): one header,
// one number format. Time and wallclock in seconds to the microsecond, values with 10
// significant digits, a value not measured (NaN) as an empty field.
#include <span>
#include <string>

#include "core/fs.hpp"
#include "core/result.hpp"

namespace sonde {

/// Appends the header line "time,wallclock,<columns…>\n"; `columns` are the values' columns.
void append_run_header(std::string& out, std::span<const std::string> columns);

/// Appends one row and its newline: time and wallclock with 6 decimals (append_time), values
/// with append_number, NaN and infinities as empty fields.
void append_run_row(std::string& out, double time_s, double wallclock_s,
                    std::span<const double> values);

/// A perf_<level>.csv being written row by row: created new (create_file_in, O_APPEND), each line
/// written with one write(), so that after a crash or SIGKILL every complete line is valid.
class RunCsvFile {
 public:
  RunCsvFile() = default;
  /// Creates `name` in `dir_fd` and writes its header; `shown` is the path errors name.
  static Result<RunCsvFile> create(int dir_fd, const std::string& name, const std::string& shown,
                                   std::span<const std::string> columns);
  /// Appends one row; false with errno set when the write failed (disk full).
  bool append(double time_s, double wallclock_s, std::span<const double> values);
  /// fsync, then close: the rows are on disk before the manifest says the run is complete.
  void sync_and_close();
  explicit operator bool() const { return static_cast<bool>(fd_); }

 private:
  UniqueFd fd_;
  std::string line_;
};

}  // namespace sonde
