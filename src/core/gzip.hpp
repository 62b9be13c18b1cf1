#pragma once
// gzip (RFC 1952) in memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sonde {

/// gzip of `in` at zlib's compression `level` (0-9, or -1 for zlib's default), or "" when zlib
/// fails (a gzip stream is never empty: header and trailer are 18 bytes).
std::string gzip(const std::string& in, int level);

/// gzip() that hands zlib at most `chunk` bytes at a time (gzip uses 1 GiB; tests use small
/// chunks to check the loop that lets inputs over 4 GiB through zlib's 32-bit counts).
std::string gzip_in_chunks(const std::string& in, int level, std::size_t chunk);

/// The front of a gzip stream whose end is not known yet: the header and `in` compressed, cut
/// on a byte boundary after a full flush (no final block), so that gzip_finish can append any
/// tail. Built once for a text that many answers share (`sonde serve`'s page, per tick); each
/// answer then costs a copy and a CRC of its own tail, not a compression of the whole.
struct GzipPrefix {
  std::string bytes;       ///< empty when zlib failed
  std::uint32_t crc = 0;   ///< CRC-32 of `in`
  std::uint64_t size = 0;  ///< bytes of `in`
};
GzipPrefix gzip_prefix(std::string_view in, int level);

/// `prefix` followed by `tail` (stored, not compressed: a tail is a few lines) and the trailer:
/// one gzip member that inflates to the prefix's text and then `tail`. "" when `prefix` is.
std::string gzip_finish(const GzipPrefix& prefix, std::string_view tail);

}  // namespace sonde
