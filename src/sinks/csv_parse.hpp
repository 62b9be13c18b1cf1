#pragma once
// CSV as sonde's run files hold it: the number fields of perf_<level>.csv (one line, fields split
// at commas, no quoting) and RFC 4180 records (quoted fields, `""` inside, newlines inside the
// quotes) of cell_history.csv. Pure functions on text, no files.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde::csv {

/// One number field of a perf file: a number, empty (NaN), or the text nan/inf. A value that is
/// not finite (nan, inf, or out of the range of a double such as 1e10000000) is "not measured":
/// NaN, never 0 or a made-up huge number. False when the field is not a number.
bool parse_number(std::string_view f, double& out);

/// The fields of one line split at every comma (no quoting).
std::vector<std::string_view> split_commas(std::string_view line);

/// Text from a file for an error message: at most `max` characters, non-printable ones as `?`.
std::string printable(std::string_view s, std::size_t max);

/// Called with each record's fields and the line it starts on (1-based); an error stops the
/// parse and is returned.
using RecordFn = std::function<Result<void>(std::vector<std::string>& fields, std::size_t line)>;

/// Parses the RFC 4180 records of `text` (from the file `path`, named in errors) and calls
/// `on_record` for each complete one, in order: fields separated by `,`, records by `\n` (a `\r`
/// outside quotes is dropped), a field starting with `"` quoted up to the next lone `"`. An empty
/// line is a record with one empty field. A record cut short by the end of the text (the writer
/// was killed) is dropped. Text after a closing quote other than `,` or the end of the line is
/// an error "PATH:LINE: expected `,` or the end of the line after a quoted field".
Result<void> parse_rfc4180(std::string_view text, const std::string& path,
                           const RecordFn& on_record);

}  // namespace sonde::csv
