#pragma once
// The one way sonde turns a JSON value into text. nlohmann's dump() throws (type_error 316) on a
// string that is not UTF-8, and such strings come from what users control: a command line, a
// process name, a GPU process's arguments, a label. Every writer goes through json_text(), which
// replaces each invalid byte with U+FFFD, as JSON readers expect, and never throws for text.
// scripts/lint (run by scripts/test) refuses a call of dump() anywhere else in src/ and
// python/native/.
#include <string>

#include <nlohmann/json.hpp>

namespace sonde {

/// `value` as JSON text: compact when `indent` < 0, else pretty-printed with `indent` spaces.
/// Invalid UTF-8 in strings (values and keys) is replaced by U+FFFD.
std::string json_text(const nlohmann::json& value, int indent = -1);

}  // namespace sonde
