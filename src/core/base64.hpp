#pragma once
// Standard base64 (RFC 4648, alphabet A-Z a-z 0-9 + /, with '=' padding): the report's embedded
// data, Slurm's AdminComment line and HTTP basic auth all use this one alphabet.
#include <string>
#include <string_view>

namespace sonde {

/// `in` as base64, padded to a multiple of 4 characters.
std::string base64_encode(std::string_view in);

/// Decodes padded base64 into `out`; false on bad input (a length that is not a multiple of 4, a
/// character outside the alphabet, padding anywhere but in the last two places).
bool base64_decode(std::string_view in, std::string& out);

}  // namespace sonde
