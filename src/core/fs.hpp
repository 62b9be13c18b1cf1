#pragma once
// File access through injectable roots, so tests can point the engine at a fixture tree; and the
// one place where sonde creates files (docs/security.md, "Files sonde writes"): output directories
// owned by the invoking user, files created with O_EXCL|O_NOFOLLOW, replaced by rename.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde {

/// Where the engine finds the kernel's files. Tests point these at tests/fixtures/<tree>/.
struct Roots {
  std::string proc = "/proc";  ///< procfs mount
  std::string sys = "/sys";    ///< sysfs mount

  /// A mount point as mountinfo gives it (seen by the host), with those under /sys re-rooted at
  /// `sys`, so that a fixture tree (tests/fixtures/<tree>/sys) stands in for the real sysfs.
  std::string mount_dir(const std::string& mount_point) const {
    if (mount_point.rfind("/sys/", 0) == 0) return sys + mount_point.substr(4);
    return mount_point;
  }
};

/// Reads a whole (small, virtual) file. Errors name the path and errno text.
Result<std::string> read_file(const std::string& path);

/// Reads into `buf` with pread at offset 0 from an fd kept open; returns bytes read or -errno.
long pread_all(int fd, std::string& buf);

/// Raises the soft open-file limit to the hard one (sonde keeps /proc files open across ticks)
/// and returns how many files may be kept open: the limit less `reserved` (what another part of
/// sonde holds, e.g. serve's connections) and 256 for sinks, plugins and per-tick opens. Only
/// sonde's own limit changes (a command spawned before keeps the limit it was given).
std::size_t open_file_budget(std::size_t reserved);

/// Names of the entries of a directory (no "." or ".."), or an error naming it.
Result<std::vector<std::string>> list_dir(const std::string& path);

/// Target of a symbolic link, or an error.
Result<std::string> read_link(const std::string& path);

/// An owning file descriptor: closed once, by the destructor or by close().
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  /// Gives up ownership.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);
  /// Closes now, where its error matters (after writing); 0 or -1 with errno.
  int close();

 private:
  int fd_ = -1;
};

/// Opens the directory `path` to create files in (O_DIRECTORY; its last component is never a
/// symbolic link). With `create`, a missing directory is made (mode 0755; parents too). The
/// directory must be owned by the effective user or by root: another user could otherwise swap
/// or plant entries in it; an error (Errc::config) names it and its owner.
Result<UniqueFd> open_output_dir(const std::string& path, bool create);

/// Creates the new regular file `name` (a plain name, no `/`) in `dirfd` with
/// O_CREAT|O_EXCL|O_NOFOLLOW: an existing entry, a planted symbolic link included, is an error,
/// never opened. `shown` is the path that errors name. `flags` adds to O_WRONLY|O_CLOEXEC.
Result<UniqueFd> create_file_in(int dirfd, const std::string& name, const std::string& shown,
                                int flags = 0, mode_t mode = 0644);

/// Replaces (or creates) `name` in `dirfd` atomically with `text`: a temporary file with an
/// unpredictable name created with O_EXCL, written, fsynced, then renamed over `name` with
/// renameat. An existing `name` that is not a regular file (a symbolic link, a FIFO) is refused.
Result<void> replace_file_in(int dirfd, const std::string& name, std::string_view text,
                             const std::string& shown);

/// Writes `text` to `path` atomically: open_output_dir(parent, false) then replace_file_in. The
/// last component of `path` is never followed when it is a link.
Result<void> write_file_atomic(const std::string& path, std::string_view text);

/// Opens the regular file `name` (a plain name: not empty, no `/`, not `.` or `..`) in `dirfd`
/// for reading: O_NOFOLLOW|O_NONBLOCK, then fstat; a link, FIFO, device or directory is an error
/// naming `shown` that says nothing of what the entry holds. `size_bytes` gets st_size.
Result<UniqueFd> open_regular_in(int dirfd, const std::string& name, const std::string& shown,
                                 std::uint64_t* size_bytes = nullptr);

/// Writes all of `text` to `fd`: short writes are continued and EINTR retried. False on an error,
/// with errno set (a write that makes no progress is EIO), so that a caller can name it.
bool write_all(int fd, std::string_view text);

/// Whether `name` is a plain file name: not empty, not `.`/`..`, no `/` and no NUL.
bool is_plain_name(std::string_view name);

/// A node's name as the name of its directory (nodes/<node>/ of a multi-node run): at most 200
/// bytes of it, [A-Za-z0-9._-] kept and every other byte replaced by '_'; "" when nothing usable
/// is left ("", "." or "..").
std::string node_dir_name(std::string_view name);

}  // namespace sonde
