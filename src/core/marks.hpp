#pragma once
// Marks inside a run: the program names its phases ("load", "train", "write") and sonde shows
// each phase as a span in the report and a row in the summary. `sonde run` gives its command the
// path of a marks file in $SONDE_MARKS; `sonde mark NAME`, `sonde.mark(NAME)` in Python and
// sonde_mark() of include/sonde/mark.h append one line to it:
//
//   <unix time, seconds with decimals> <name>\n
//
// A line is one write(2) of at most kMaxMarkLine bytes to a file opened O_APPEND, so lines of
// concurrent writers never interleave. A mark begins a phase that lasts until the next mark or
// the end of the run. sonde reads the file as the program writes it, bounded: what the program
// writes there is never trusted (a line too long, not a number, not UTF-8 is skipped or cleaned).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde {

/// The environment variable that names the marks file of the run a process belongs to.
inline constexpr const char* kMarksEnv = "SONDE_MARKS";
/// Longest line (name and time) a writer sends, and sonde reads.
inline constexpr std::size_t kMaxMarkLine = 256;
/// Most marks one run keeps; later ones are counted as dropped.
inline constexpr std::size_t kMaxMarks = 10000;

struct Mark {
  double wall_s = 0;  ///< CLOCK_REALTIME, seconds since the epoch
  std::string name;   ///< 1..200 bytes of valid UTF-8, no control characters
};

/// The name as it is stored: control characters become spaces, surrounding spaces go, invalid
/// UTF-8 becomes U+FFFD, at most 200 bytes (cut at a character boundary). Empty: no name.
std::string clean_mark_name(std::string_view name);

/// One line of the marks file (without its newline); nullopt when it is not "<time> <name>" with
/// a finite positive time and a name left after cleaning.
std::optional<Mark> parse_mark_line(std::string_view line);

/// The line for `name` at `wall_s`, with its newline; an error when the name is empty after
/// cleaning.
Result<std::string> format_mark_line(std::string_view name, double wall_s);

/// Appends a mark to the file at `path` (which must exist: sonde made it): one write(2), O_APPEND,
/// never following a symbolic link. The error names the file.
Result<void> append_mark(const std::string& path, std::string_view name, double wall_s);

/// Reads the marks a program appends to its file, from where the last poll stopped; a partial
/// last line waits for its newline. At most kMaxMarks marks and 1 MiB per poll.
class MarkReader {
 public:
  explicit MarkReader(std::string path) : path_(std::move(path)) {}
  /// The new complete lines' marks (bad lines are counted in skipped()).
  std::vector<Mark> poll();
  const std::string& path() const { return path_; }
  std::size_t skipped() const { return skipped_; }
  std::size_t dropped() const { return dropped_; }

 private:
  std::string path_;
  long long offset_ = 0;
  std::string partial_;
  bool overlong_ = false;
  std::size_t kept_ = 0, skipped_ = 0, dropped_ = 0;
};

}  // namespace sonde
