#pragma once
// The one way sonde turns a JSON value into text. nlohmann's dump() throws (type_error 316) on a
// string that is not UTF-8, and such strings come from what users control: a command line, a
// process name, a GPU process's arguments, a label. Every writer goes through json_text(), which
// replaces each invalid byte with U+FFFD, as JSON readers expect, and never throws for text.
// scripts/lint (run by scripts/test) refuses a call of dump() anywhere else in src/ and
// python/native/.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sonde {

/// `value` as JSON text: compact when `indent` < 0, else pretty-printed with `indent` spaces.
/// Invalid UTF-8 in strings (values and keys) is replaced by U+FFFD.
std::string json_text(const nlohmann::json& value, int indent = -1);
/// The same for a JSON value that keeps its keys in insertion order (the stream's lines, status
/// --json): an overload, so that the order is never lost to a conversion.
std::string json_text(const nlohmann::ordered_json& value, int indent = -1);

/// Whether `text` nests arrays and objects at most `max_depth` deep (brackets inside strings do
/// not count). One pass over the bytes, stopping at the first level too deep.
bool json_nesting_within(std::string_view text, std::size_t max_depth);

/// JSON from text sonde did not write (a stored run's manifest, another user's database): never
/// throws, and text nested deeper than `max_depth` is refused before it is parsed, as a
/// discarded value (is_discarded()): a value nested a million deep costs gigabytes to hold and
/// overflows the stack when it is printed or copied.
nlohmann::json parse_json_bounded(std::string_view text, std::size_t max_depth = 64);

}  // namespace sonde
