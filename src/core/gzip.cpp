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

}  // namespace sonde
