#pragma once
// Reading a file whole, within a bound: what the readers of stored runs use so that a huge or
// endless file (a FIFO, /dev/zero) is an error naming it, never a process that eats the node.
#include <cstdint>
#include <string>

#include "core/result.hpp"

namespace sonde {

/// At most `max_bytes` of the open file `fd` (named `shown` in errors); more is an error.
Result<std::string> read_bounded(int fd, const std::string& shown, std::uint64_t max_bytes);

}  // namespace sonde
