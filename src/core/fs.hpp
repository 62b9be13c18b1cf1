#pragma once
// File access through injectable roots, so tests can point the engine at a fixture tree.
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde {

/// Where the engine finds the kernel's files. Tests point these at tests/fixtures/<tree>/.
struct Roots {
  std::string proc = "/proc";  ///< procfs mount
  std::string sys = "/sys";    ///< sysfs mount
};

/// Reads a whole (small, virtual) file. Errors name the path and errno text.
Result<std::string> read_file(const std::string& path);

/// Reads into `buf` with pread at offset 0 from an fd kept open; returns bytes read or -errno.
long pread_all(int fd, std::string& buf);

/// Names of the entries of a directory (no "." or ".."), or an error naming it.
Result<std::vector<std::string>> list_dir(const std::string& path);

/// Target of a symbolic link, or an error.
Result<std::string> read_link(const std::string& path);

/// Writes `text` to `path` atomically (temporary file in the same directory, then rename).
Result<void> write_file_atomic(const std::string& path, std::string_view text);

}  // namespace sonde
