// Trust rules for the files sonde reads as configuration, loads as code or starts as a program
// (docs/security.md): a file another user could have written or swapped is never used, whoever
// runs sonde.
#include "core/trust.hpp"

#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/fs.hpp"

namespace sonde {

namespace {

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? std::string(".") : dir;
}

/// Why the directory `dir` fails the rule ("" when it passes, or when it cannot be checked:
/// then `err` is set).
std::string check_dir(const std::string& dir, bool name_it, int& err) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    err = errno;
    return {};
  }
  return untrusted_reason(st, "directory", name_it ? dir : std::string());
}

}  // namespace

bool secure_mode() {
  return ::getauxval(AT_SECURE) != 0;
}

std::string untrusted_reason(const struct stat& st, std::string_view part,
                             const std::string& name) {
  const uid_t me = ::getuid();
  const std::string what = name.empty() ? std::string(part) : fmt::format("{} {}", part, name);
  if (st.st_uid != 0 && st.st_uid != me)
    return fmt::format("its {} is owned by uid {}, not by root or you (uid {})", what, st.st_uid,
                       me);
  // A sticky directory (/tmp) may be writable by all: in it only a file's owner (checked
  // separately) may rename or remove the file.
  const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir)
    return fmt::format("its {} is writable by {} (mode {:o}); run chmod go-w on it", what,
                       (st.st_mode & S_IWOTH) ? "others" : "its group", st.st_mode & 07777);
  return {};
}

Result<int> open_trusted(const std::string& path, std::string_view what) {
  // O_NONBLOCK: a FIFO put where a file is expected must not hang the open.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd) {
    const int err = errno;
    if (err == ELOOP)
      return make_error(
          Errc::unavailable,
          fmt::format("refusing {} {}: it is a symbolic link (give the real file)", what, path));
    errno = err;
    return make_error(Errc::io,
                      fmt::format("cannot read {} {}: {}", what, path, std::strerror(err)));
  }
  const auto refuse = [&](const std::string& why) {
    return make_error(Errc::unavailable, fmt::format("refusing {} {}: {}", what, path, why));
  };
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (auto why = untrusted_reason(st, "file"); !why.empty()) return refuse(why);
  int err = 0;
  const std::string dir = parent_dir(path);
  if (auto why = check_dir(dir, false, err); !why.empty()) return refuse(why);
  if (err != 0) return refuse(fmt::format("cannot check its directory: {}", std::strerror(err)));
  // Back to blocking reads (a regular file ignores the flag; this keeps reads plain).
  ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
  return fd.release();
}

Result<std::string> trusted_program(const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return make_error(Errc::unavailable, fmt::format("refusing program {}: {}", path, why));
  };
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr)
    return make_error(Errc::unavailable,
                      fmt::format("cannot run '{}': {}", path, std::strerror(errno)));
  const std::string real = buf;
  // O_PATH: a program may be executable without being readable; fstat is all that is needed.
  const UniqueFd fd(::open(real.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd)
    return make_error(Errc::unavailable,
                      fmt::format("cannot run '{}': {}", path, std::strerror(errno)));
  struct stat st {};
  const int rc = ::fstat(fd.get(), &st);
  if (rc != 0 || !S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (!(st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH))) return refuse("it is not executable");
  const bool linked = real != path;
  if (auto why = untrusted_reason(st, "file", linked ? real : std::string()); !why.empty())
    return refuse(why);
  // The real file's directory, and the directory of the path as given (where a link to it
  // lives: whoever may write there may point the link elsewhere).
  for (const std::string& dir : {parent_dir(real), parent_dir(path)}) {
    int err = 0;
    if (auto why = check_dir(dir, true, err); !why.empty()) return refuse(why);
    if (err != 0)
      return refuse(fmt::format("cannot check its directory {}: {}", dir, std::strerror(err)));
  }
  return real;
}

Result<std::string> read_trusted(int fd_in, const std::string& path, std::size_t max_bytes) {
  const UniqueFd fd(fd_in);  // closed on every return
  std::string text;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return make_error(Errc::io, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error(Errc::config,
                        fmt::format("{}: larger than {} bytes, the most sonde reads as a "
                                    "configuration file",
                                    path, max_bytes));
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

}  // namespace sonde
