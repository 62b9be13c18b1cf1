#pragma once
// Which files sonde may read as configuration, load as code or start as a program: the rules of
// docs/security.md, in one place for configuration files, plugins and the programs that exec and
// python collectors start.
#include <sys/stat.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/result.hpp"

namespace sonde {

/// True when sonde runs setuid/setgid or with capabilities beyond the invoking user's
/// (AT_SECURE): environment variables that name files are then ignored.
bool secure_mode();

/// The trust rule for one file or directory: owned by root or the invoking user (the real uid),
/// not writable by its group or by others (a directory with the sticky bit, as /tmp, may be).
/// Returns why not ("its file is owned by uid 1001, not by root or you (uid 0)"), or an empty
/// string. `part` is "file" or "directory", `name` an optional path named in the message.
std::string untrusted_reason(const struct stat& st, std::string_view part,
                             const std::string& name = {});

/// Opens `path` for reading after checking it and the directory that holds it: no symbolic link
/// as its last component (O_NOFOLLOW), a regular file, and the trust rule for both. Errors:
/// Errc::unavailable for a file the rules refuse ("refusing WHAT PATH: why"), Errc::io for one
/// that cannot be opened (the message names the errno text). Returns the fd (close-on-exec).
Result<int> open_trusted(const std::string& path, std::string_view what);

/// The file a program path names, checked before sonde starts it: the path (absolute, or
/// relative to the current directory) is resolved through its links, and the real file, the
/// directory that holds it and the directory that holds `path` itself must pass the trust rule;
/// the file must be a regular, executable file. Returns the resolved path, which is what sonde
/// then executes (so a link changed later is not followed). Errc::unavailable when refused.
Result<std::string> trusted_program(const std::string& path);

/// Reads a whole file opened by open_trusted, up to `max_bytes` (a larger file is an error
/// naming `path`). Closes `fd`.
Result<std::string> read_trusted(int fd, const std::string& path, std::size_t max_bytes);

}  // namespace sonde
