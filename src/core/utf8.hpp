#pragma once
// UTF-8 checks for text that comes from outside (command lines, label values, marks' names).
#include <cstddef>
#include <string>
#include <string_view>

namespace sonde {

/// Length of the valid UTF-8 sequence at the front of `v` (not empty), 0 when it is not one
/// (overlong forms, surrogates and code points past U+10FFFF are not valid).
std::size_t utf8_length(std::string_view v);
/// Whether all of `v` is valid UTF-8.
bool is_utf8(std::string_view v);
/// `v` with each byte that is not part of a valid sequence replaced by U+FFFD.
std::string valid_utf8(std::string_view v);

}  // namespace sonde
