#pragma once
// Which files sonde may read as configuration, load as code or start as a program: the rules of
// docs/security.md, in one place for configuration files, plugins, the programs that exec and
// python collectors start, and the environment variables that name programs or libraries.
#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.hpp"
#include "core/result.hpp"

namespace sonde {

/// True when sonde runs setuid/setgid or with capabilities beyond the invoking user's
/// (AT_SECURE): environment variables that name files are then ignored.
bool secure_mode();

/// The value of the environment variable `name` when it may choose a program, library or
/// directory sonde uses: nullptr when unset or empty, and always when `secure` (AT_SECURE: the
/// environment is the invoking user's, sonde's privileges are not).
const char* program_env(const char* name, bool secure = secure_mode());

/// The directories searched for a program named without '/': $PATH, or where it is unset, or
/// under AT_SECURE (`secure`), kSecurePath.
inline constexpr const char* kSecurePath =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
std::string program_search_path(bool secure = secure_mode());
/// What `name` (no '/') resolves to in program_search_path(), as execvp and env find it (the
/// first executable match), or "".
std::string search_program(const std::string& name);

/// What a file is used for, which decides how strict the rule is for the directories above it.
enum class TrustUse {
  read,  ///< configuration: a sticky directory (/tmp) may be writable by all
  run,   ///< executed, loaded or imported: no directory on the path may be writable by others
};

/// The trust rule for one file or directory: owned by root or the invoking user (the real uid),
/// not writable by its group or by others (for TrustUse::read, a directory with the sticky bit,
/// as /tmp, may be). Returns why not ("its file is owned by uid 1001, not by root or you (uid
/// 0)"), or an empty string. `part` is "file" or "directory", `name` an optional path named in
/// the message.
std::string untrusted_reason(const struct stat& st, std::string_view part,
                             const std::string& name = {}, TrustUse use = TrustUse::read);

/// A path walked from "/" under the rule: every directory, link and the final file passed it.
struct CheckedPath {
  UniqueFd fd;        ///< O_PATH descriptor of the final file (close-on-exec)
  struct stat st {};  ///< its fstat
  std::string real;   ///< its absolute path with every link resolved (for messages)
};

/// Walks `path` (relative paths from the current directory) one component at a time from "/":
/// each is opened with openat(O_PATH|O_NOFOLLOW) beneath the descriptor of the one before and
/// checked with fstat, so that what was checked is what the returned descriptor names, whatever
/// is renamed meanwhile. A symbolic link must itself pass the owner rule; it is followed
/// (`follow_last` for the final component) by walking its target in the same way, at most 40
/// of them. Errors: Errc::unavailable for a refusal ("refusing WHAT PATH: why"), Errc::io when a
/// component cannot be opened ("cannot read WHAT PATH: No such file or directory").
Result<CheckedPath> walk_trusted(const std::string& path, std::string_view what, TrustUse use,
                                 bool follow_last);

/// Opens `path` for reading after walking it under the rule (walk_trusted): no symbolic link as
/// its last component, a regular file. Errors: Errc::unavailable for a file the rules refuse
/// ("refusing WHAT PATH: why"), Errc::io for one that cannot be opened (the message names the
/// errno text). Returns the fd (close-on-exec), opened without blocking on a FIFO.
Result<int> open_trusted(const std::string& path, std::string_view what,
                         TrustUse use = TrustUse::read);

/// Opens a secret (a TLS private key, a password file) for reading: open_trusted's rule (so a
/// file another user owns, or one in a directory others can write, is refused), and not
/// readable by others (its group may read it, as Debian's ssl-cert group reads keys). The
/// message names `what` ("refusing --tls-key /k.pem: it is readable by others (mode 644); run
/// chmod 600 on it").
Result<int> open_private(const std::string& path, std::string_view what);

/// A program checked before sonde starts it: what is executed is `exe`, the descriptor that was
/// checked (execveat with AT_EMPTY_PATH), never the path again.
struct TrustedProgram {
  UniqueFd exe;  ///< O_PATH descriptor of the binary to execute: the program, or its interpreter
  /// For a `#!` script: the script opened for reading, handed to its interpreter as /dev/fd/N
  /// (N chosen by the caller) after `interpreter`; empty for a binary.
  UniqueFd script;
  std::vector<std::string> interpreter;  ///< the interpreter's argv before the script's name
  std::string real;                      ///< the program's resolved path
};

/// The program `path` names (absolute, or relative to the current directory), checked under the
/// rule for TrustUse::run: every component from "/", its links, and the file, which must be
/// a regular, executable file. A `#!` script's interpreter passes the same rule (and is not a
/// script itself); `#!/usr/bin/env NAME` is resolved here, NAME in kSecurePath-or-$PATH and
/// checked, as env would find it. Errc::unavailable when refused ("refusing program PATH: why").
Result<TrustedProgram> trusted_program(const std::string& path);

/// Reads a whole file opened by open_trusted, up to `max_bytes` (a larger file is an error
/// naming `path`). Closes `fd`.
Result<std::string> read_trusted(int fd, const std::string& path, std::size_t max_bytes);

}  // namespace sonde
