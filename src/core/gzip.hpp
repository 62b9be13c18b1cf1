#pragma once
// gzip (RFC 1952) in memory.
#include <string>

namespace sonde {

/// gzip of `in` at zlib's compression `level` (0-9, or -1 for zlib's default), or "" when zlib
/// fails (a gzip stream is never empty: header and trailer are 18 bytes).
std::string gzip(const std::string& in, int level);

}  // namespace sonde
