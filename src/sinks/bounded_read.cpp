#include "sinks/bounded_read.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace sonde {

Result<std::string> read_bounded(int fd, const std::string& shown, std::uint64_t max_bytes) {
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, fmt::format("cannot read {}: {}", shown, std::strerror(errno)));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error(Errc::parse, fmt::format("{} is larger than {} MiB, the most sonde reads "
                                                 "of such a file",
                                                 shown, max_bytes >> 20));
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace sonde
