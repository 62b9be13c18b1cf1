#include "core/gzip.hpp"

#include <zlib.h>

#include <algorithm>
#include <limits>

namespace sonde {

std::string gzip(const std::string& in, int level) {
  return gzip_in_chunks(in, level, std::size_t{1} << 30);
}

std::string gzip_in_chunks(const std::string& in, int level, std::size_t chunk) {
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  // zlib counts in uInt (32 bits): the input and the output are given in chunks (1 GiB from
  // gzip()), so that an input over 4 GiB is compressed whole, not cut at its size modulo 2^32.
  const std::size_t kChunk =
      std::clamp<std::size_t>(chunk, 1, std::numeric_limits<uInt>::max() / 2);
  std::string out;
  std::size_t in_pos = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    const std::size_t in_now = std::min(kChunk, in.size() - in_pos);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_pos));
    z.avail_in = static_cast<uInt>(in_now);
    const bool last = in_pos + in_now == in.size();
    // Room for this chunk's output: deflateBound of the chunk (deflate may need several calls
    // for a chunk when the room runs out; the loop then goes on with avail_in left).
    const std::size_t room = std::min<std::size_t>(
        deflateBound(&z, static_cast<uLong>(in_now)) + (in_now == 0 ? 65536 : 4096),
        std::numeric_limits<uInt>::max() / 2);
    const std::size_t used = out.size();
    out.resize(used + room);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    z.avail_out = static_cast<uInt>(room);
    rc = deflate(&z, last ? Z_FINISH : Z_NO_FLUSH);
    out.resize(used + room - z.avail_out);
    in_pos += in_now - z.avail_in;
    if (rc == Z_BUF_ERROR) rc = Z_OK;  // no progress possible without more room: loop again
  }
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : std::string();
}

GzipPrefix gzip_prefix(std::string_view in, int level) {
  GzipPrefix p;
  z_stream z{};
  if (deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return p;
  constexpr std::size_t kChunk = std::size_t{1} << 30;
  std::string out;
  std::size_t in_pos = 0;
  bool ok = true;
  // Z_FULL_FLUSH after the last input: everything so far is out, byte-aligned, in blocks none
  // of which is final; what follows may be any new blocks (here, gzip_finish's stored ones).
  do {
    const std::size_t in_now = std::min(kChunk, in.size() - in_pos);
    const bool last = in_pos + in_now == in.size();
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_pos));
    z.avail_in = static_cast<uInt>(in_now);
    do {
      const std::size_t room = deflateBound(&z, static_cast<uLong>(z.avail_in)) + 4096;
      const std::size_t used = out.size();
      out.resize(used + room);
      z.next_out = reinterpret_cast<Bytef*>(out.data() + used);
      z.avail_out = static_cast<uInt>(room);
      const int rc = deflate(&z, last ? Z_FULL_FLUSH : Z_NO_FLUSH);
      out.resize(used + room - z.avail_out);
      if (rc != Z_OK && rc != Z_BUF_ERROR) ok = false;
    } while (ok && (z.avail_in > 0 || z.avail_out == 0));
    in_pos += in_now;
  } while (ok && in_pos < in.size());
  deflateEnd(&z);
  if (!ok) return p;
  p.bytes = std::move(out);
  p.size = in.size();
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t at = 0; at < in.size(); at += kChunk) {
    const std::size_t n = std::min(kChunk, in.size() - at);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(in.data() + at), static_cast<uInt>(n));
  }
  p.crc = static_cast<std::uint32_t>(crc);
  return p;
}

std::string gzip_finish(const GzipPrefix& prefix, std::string_view tail) {
  if (prefix.bytes.empty()) return {};
  std::string out;
  out.reserve(prefix.bytes.size() + tail.size() + tail.size() / 65535 * 5 + 5 + 8);
  out = prefix.bytes;
  const auto put16 = [&out](std::size_t v) {
    out += static_cast<char>(v & 0xff);
    out += static_cast<char>((v >> 8) & 0xff);
  };
  const auto put32 = [&out](std::uint64_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  // Stored blocks (RFC 1951 3.2.4), at most 65535 bytes each, the last one final. The prefix
  // ends byte-aligned, so each block's 3 header bits start a byte (the rest of it is padding).
  std::size_t at = 0;
  do {
    const std::size_t n = std::min<std::size_t>(65535, tail.size() - at);
    const bool final = at + n == tail.size();
    out += static_cast<char>(final ? 1 : 0);
    put16(n);
    put16(~n & 0xffff);
    out.append(tail.substr(at, n));
    at += n;
  } while (at < tail.size());
  uLong tail_crc = crc32(0L, Z_NULL, 0);
  tail_crc =
      crc32(tail_crc, reinterpret_cast<const Bytef*>(tail.data()), static_cast<uInt>(tail.size()));
  put32(crc32_combine(prefix.crc, tail_crc, static_cast<z_off_t>(tail.size())));
  put32(prefix.size + tail.size());  // ISIZE: the length modulo 2^32
  return out;
}

}  // namespace sonde
