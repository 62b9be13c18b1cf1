#pragma once
// gzip (RFC 1952) in memory.
#include <cstddef>
#include <string>

namespace sonde {

/// gzip of `in` at zlib's compression `level` (0-9, or -1 for zlib's default), or "" when zlib
/// fails (a gzip stream is never empty: header and trailer are 18 bytes).
std::string gzip(const std::string& in, int level);

/// gzip() that hands zlib at most `chunk` bytes at a time (gzip uses 1 GiB; tests use small
/// chunks to check the loop that lets inputs over 4 GiB through zlib's 32-bit counts).
std::string gzip_in_chunks(const std::string& in, int level, std::size_t chunk);

}  // namespace sonde
