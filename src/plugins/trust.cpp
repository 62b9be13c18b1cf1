// Loading a plugin runs its code with sonde's privileges: refuse files another user could have
// written or swapped.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "plugins/plugins.hpp"

namespace sonde::plugins {
namespace {
Result<void> check_owner_and_mode(const struct stat& st, const std::string& what,
                                  const std::string& path) {
  const uid_t me = ::getuid();
  if (st.st_uid != 0 && st.st_uid != me)
    return make_error(Errc::unavailable,
                      fmt::format("refusing plugin {}: its {} is owned by uid {}, not by root or "
                                  "you (uid {})",
                                  path, what, st.st_uid, me));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return make_error(Errc::unavailable,
                      fmt::format("refusing plugin {}: its {} is writable by {} (mode {:o}); "
                                  "run chmod go-w on it",
                                  path, what, (st.st_mode & S_IWOTH) ? "others" : "its group",
                                  st.st_mode & 07777));
  return {};
}
}  // namespace

Result<int> open_trusted(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      return make_error(
          Errc::unavailable,
          fmt::format("refusing plugin {}: it is a symbolic link (give the real file)", path));
    return make_error(Errc::unavailable,
                      fmt::format("cannot open plugin {}: {}", path, std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(Errc::unavailable,
                      fmt::format("refusing plugin {}: not a regular file", path));
  }
  if (auto ok = check_owner_and_mode(st, "file", path); !ok) {
    ::close(fd);
    return ok.error();
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct stat dst {};
  if (::stat(dir.c_str(), &dst) != 0) {
    ::close(fd);
    return make_error(Errc::unavailable, fmt::format("cannot check the directory of plugin {}: {}",
                                                     path, std::strerror(errno)));
  }
  if (auto ok = check_owner_and_mode(dst, "directory", path); !ok) {
    ::close(fd);
    return ok.error();
  }
  return fd;
}

}  // namespace sonde::plugins
