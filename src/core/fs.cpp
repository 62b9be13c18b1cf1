#include "core/fs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sonde {
namespace {

// A pid that exits between listing /proc and opening its files is routine, not a failure.
Error errno_error(const std::string& path, int err) {
  const Errc code = (err == ENOENT || err == ESRCH) ? Errc::vanished : Errc::io;
  return make_error(code, path + ": " + std::strerror(err));
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Close explicitly where its error matters (after writing).
  int release_close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

}  // namespace

Result<std::string> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
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

Result<void> write_file_atomic(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return make_error(Errc::io, tmp + ": " + std::strerror(errno));
  auto fail = [&tmp](int err) {
    ::unlink(tmp.c_str());
    return make_error(Errc::io, tmp + ": " + std::strerror(err));
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno);
    }
    done += static_cast<std::size_t>(n);
  }
  // Without fsync the rename can reach the disk before the data, leaving an empty file after a
  // crash: exactly what the atomic write is meant to prevent.
  if (::fsync(fd.get()) != 0) return fail(errno);
  if (fd.release_close() != 0) return fail(errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return make_error(Errc::io, "rename " + tmp + " -> " + path + ": " + std::strerror(err));
  }
  return {};
}

}  // namespace sonde
