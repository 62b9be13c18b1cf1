#include "core/fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

namespace sonde {
namespace {

// A pid that exits between listing /proc and opening its files is routine, not a failure.
Error errno_error(const std::string& path, int err) {
  const Errc code = (err == ENOENT || err == ESRCH) ? Errc::vanished : Errc::io;
  return make_error(code, path + ": " + std::strerror(err));
}

}  // namespace

Result<std::string> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return errno_error(path, errno);
  // procfs and sysfs report st_size 0 (or a page size), so read until EOF instead.
  std::string out;
  std::size_t used = 0;
  out.resize(4096);
  while (true) {
    if (used == out.size()) out.resize(out.size() * 2);
    const ssize_t n = ::read(fd.get(), out.data() + used, out.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(path, errno);
    }
    if (n == 0) break;
    used += static_cast<std::size_t>(n);
  }
  out.resize(used);
  return out;
}

long pread_all(int fd, std::string& buf) {
  // `buf` keeps its size between calls (it is the caller's reusable buffer); only the first
  // returned-count bytes are this read's data. It grows when a file no longer fits.
  if (buf.size() < 4096) buf.resize(4096);
  std::size_t used = 0;
  while (true) {
    const std::size_t want = buf.size() - used;
    const ssize_t n = ::pread(fd, buf.data() + used, want, static_cast<off_t>(used));
    if (n < 0) {
      if (errno == EINTR) continue;
      return -static_cast<long>(errno);
    }
    used += static_cast<std::size_t>(n);
    // seq_file fills the buffer as far as the data goes, so a short read means end of file;
    // stopping there saves the extra syscall per file that waiting for 0 would cost.
    if (static_cast<std::size_t>(n) < want) break;
    buf.resize(buf.size() * 2);
  }
  return static_cast<long>(used);
}

// `sonde run` spawns its command before this is called: the command keeps the limit it was given.
std::size_t open_file_budget(std::size_t reserved) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 512;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const rlim_t reserve = 256 + static_cast<rlim_t>(reserved);
  if (rl.rlim_cur == RLIM_INFINITY) return std::size_t{1} << 20;
  if (rl.rlim_cur > 2 * reserve) return static_cast<std::size_t>(rl.rlim_cur - reserve);
  // A low limit: half of what is left after the others' share (none when nothing is left).
  return rl.rlim_cur > static_cast<rlim_t>(reserved)
             ? static_cast<std::size_t>(rl.rlim_cur - static_cast<rlim_t>(reserved)) / 2
             : 0;
}

Result<std::vector<std::string>> list_dir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return errno_error(path, errno);
  std::vector<std::string> names;
  while (true) {
    errno = 0;
    const dirent* ent = ::readdir(dir);
    if (ent == nullptr) {
      const int err = errno;
      ::closedir(dir);
      if (err != 0) return errno_error(path, err);
      break;
    }
    const std::string_view name = ent->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  return names;
}

Result<std::string> read_link(const std::string& path) {
  std::string out(256, '\0');
  while (true) {
    const ssize_t n = ::readlink(path.c_str(), out.data(), out.size());
    if (n < 0) return errno_error(path, errno);
    // readlink truncates silently: a full buffer may be a cut-off target, so retry larger.
    if (static_cast<std::size_t>(n) < out.size()) {
      out.resize(static_cast<std::size_t>(n));
      return out;
    }
    out.resize(out.size() * 2);
  }
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int UniqueFd::close() {
  const int rc = ::close(fd_);
  fd_ = -1;
  return rc;
}

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool is_plain_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\0", 2)) == std::string_view::npos;
}

std::string node_dir_name(std::string_view name) {
  std::string s(name.substr(0, 200));
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  if (s.empty() || s == "." || s == "..") return {};
  return s;
}

namespace {

std::string owner_text(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  std::vector<char> buf(4096);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found)
    out += std::string(" (") + found->pw_name + ")";
  return out;
}

// "dir/" and "dir" name the same directory, but a trailing slash makes open() follow a link.
std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// A name no other user can guess in advance (so cannot plant): 64 random bits.
std::string random_suffix() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, 0) != static_cast<ssize_t>(sizeof r)) {
    // getrandom cannot fail for 8 bytes after boot; mix what we have rather than give up.
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    r = static_cast<std::uint64_t>(ts.tv_nsec) * 0x9E3779B97F4A7C15ull ^
        static_cast<std::uint64_t>(::getpid());
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(r));
  return buf;
}

}  // namespace

Result<UniqueFd> open_output_dir(const std::string& path_in, bool create) {
  const std::string path = without_trailing_slashes(path_in);
  if (path.empty()) return make_error(Errc::config, "empty output directory name");
  if (create) {
    const std::filesystem::path parent = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    if (ec)
      return make_error(Errc::io,
                        "cannot create directory " + parent.string() + ": " + ec.message());
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
      return make_error(Errc::io, "cannot create directory " + path + ": " + std::strerror(errno));
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      return make_error(Errc::config, path +
                                          " is a symbolic link; sonde does not write through "
                                          "links: give the directory itself");
    if (err == ENOTDIR) return make_error(Errc::config, path + " is not a directory");
    return make_error(Errc::io, path + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(Errc::io, path + ": " + std::strerror(errno));
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0)
    return make_error(Errc::config, "refusing to write into " + path + ": it is owned by " +
                                        owner_text(st.st_uid) + ", not by you (" + owner_text(me) +
                                        ") or root; another user could plant or swap files in it");
  return fd;
}

Result<UniqueFd> create_file_in(int dirfd, const std::string& name, const std::string& shown,
                                int flags, mode_t mode) {
  if (!is_plain_name(name)) return make_error(Errc::config, shown + ": not a plain file name");
  UniqueFd fd(::openat(dirfd, name.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | flags, mode));
  if (!fd) {
    const int err = errno;
    if (err == EEXIST)
      return make_error(Errc::config, shown +
                                          " already exists (sonde creates its output files "
                                          "new, it never opens an existing entry or link)");
    return make_error(Errc::io, "cannot create " + shown + ": " + std::strerror(err));
  }
  return fd;
}

Result<void> replace_file_in(int dirfd, const std::string& name, std::string_view text,
                             const std::string& shown) {
  if (!is_plain_name(name)) return make_error(Errc::config, shown + ": not a plain file name");
  struct stat st {};
  if (::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    return make_error(Errc::config,
                      shown +
                          (S_ISLNK(st.st_mode) ? " is a symbolic link" : " is not a regular file") +
                          "; sonde replaces only regular files, it never writes through links");
  std::string tmp;
  UniqueFd fd;
  for (int attempt = 0; attempt < 16 && !fd; ++attempt) {
    tmp = name + ".tmp." + random_suffix();
    fd.reset(
        ::openat(dirfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!fd && errno != EEXIST) break;
  }
  if (!fd)
    return make_error(Errc::io,
                      "cannot create a temporary file for " + shown + ": " + std::strerror(errno));
  auto fail = [&](int err, const std::string& what) {
    ::unlinkat(dirfd, tmp.c_str(), 0);
    return make_error(Errc::io, what + ": " + std::strerror(err));
  };
  if (!write_all(fd.get(), text)) return fail(errno, "cannot write " + shown);
  // Without fsync the rename can reach the disk before the data, leaving an empty file after a
  // crash: exactly what the atomic write is meant to prevent.
  if (::fsync(fd.get()) != 0) return fail(errno, "cannot write " + shown);
  if (fd.close() != 0) return fail(errno, "cannot write " + shown);
  // renameat replaces the directory entry: a link planted at `name` after the check above is
  // replaced, never followed.
  if (::renameat(dirfd, tmp.c_str(), dirfd, name.c_str()) != 0)
    return fail(errno, "cannot rename a temporary file to " + shown);
  return {};
}

Result<void> write_file_atomic(const std::string& path, std::string_view text) {
  const std::size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? std::string(".") : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (!is_plain_name(name))
    return make_error(Errc::config, path + ": expected a file name, not a directory");
  auto dirfd = open_output_dir(dir, false);
  if (!dirfd) return dirfd.error();
  return replace_file_in(dirfd->get(), name, text, path);
}

Result<UniqueFd> open_regular_in(int dirfd, const std::string& name, const std::string& shown,
                                 std::uint64_t* size_bytes) {
  if (!is_plain_name(name))
    return make_error(Errc::parse, shown +
                                       ": not a plain file name (a run's files are names "
                                       "inside the run: no `/`, no `..`)");
  UniqueFd fd(::openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    if (err == ELOOP)
      return make_error(Errc::parse, shown +
                                         " is a symbolic link; sonde does not follow links "
                                         "in a run");
    return make_error(err == ENOENT ? Errc::io : Errc::io, shown + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return make_error(Errc::io, shown + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return make_error(Errc::parse, shown + " is not a regular file");
  if (size_bytes) *size_bytes = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

}  // namespace sonde
