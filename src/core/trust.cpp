// Trust rules for the files sonde reads as configuration, loads as code or starts as a program
// (docs/security.md): a file another user could have written or swapped is never used, whoever
// runs sonde. Paths are walked from "/" one descriptor at a time, as OpenSSH's StrictModes and
// sudo check them, so that a directory renamed between the check and the use changes nothing:
// the use goes through the descriptor that was checked.
#include "core/trust.hpp"

#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>

#include <fmt/format.h>

namespace sonde {

namespace {

constexpr int kMaxLinks = 40;             ///< as the kernel's MAXSYMLINKS
constexpr std::size_t kMaxShebang = 256;  ///< the kernel's BINPRM_BUF_SIZE

std::vector<std::string> split_path(std::string_view p) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= p.size()) {
    const auto slash = p.find('/', start);
    auto part =
        p.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!part.empty() && part != ".") out.emplace_back(part);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

std::string join_path(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) {
    s.push_back('/');
    s.append(p);
  }
  return s.empty() ? std::string("/") : s;
}

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

}  // namespace

bool secure_mode() {
  return ::getauxval(AT_SECURE) != 0;
}

const char* program_env(const char* name, bool secure) {
  if (secure) return nullptr;
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string program_search_path(bool secure) {
  const char* p = program_env("PATH", secure);
  return p ? std::string(p) : std::string(kSecurePath);
}

std::string untrusted_reason(const struct stat& st, std::string_view part, const std::string& name,
                             TrustUse use) {
  const uid_t me = ::getuid();
  const std::string what = name.empty() ? std::string(part) : fmt::format("{} {}", part, name);
  if (st.st_uid != 0 && st.st_uid != me)
    return fmt::format("its {} is owned by uid {}, not by root or you (uid {})", what, st.st_uid,
                       me);
  if (S_ISLNK(st.st_mode)) return {};  // a link's mode means nothing; its directory's does
  // A sticky directory (/tmp) may be writable by all for what is only read: in it only an
  // entry's owner (checked as the next component) may rename or remove the entry. Not for what
  // is executed or imported (OpenSSH's StrictModes refuses it too): a module search path or a
  // program directory there invites files nobody checked.
  const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) && use == TrustUse::read;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_dir) {
    const char* who = (st.st_mode & S_IWOTH) ? "others" : "its group";
    // A shared sticky directory (/tmp) is meant to be writable by all: the fix is to move what
    // is run out of it, not chmod.
    if (S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX))
      return fmt::format(
          "its {} is writable by {} (mode {:o}); programs, plugins and Python modules are not "
          "taken from below a directory others may write, sticky or not: move it elsewhere",
          what, who, st.st_mode & 07777);
    return fmt::format("its {} is writable by {} (mode {:o}); run chmod go-w on it", what, who,
                       st.st_mode & 07777);
  }
  return {};
}

Result<CheckedPath> walk_trusted(const std::string& path, std::string_view what, TrustUse use,
                                 bool follow_last) {
  const auto refuse = [&](const std::string& why) {
    return make_error(Errc::unavailable, fmt::format("refusing {} {}: {}", what, path, why));
  };
  // The first directory or link that fails the rule. The walk goes on to the file itself
  // (opening O_PATH descriptors has no effect): when the file fails too, its own reason is the
  // one given, as it is the one the user named.
  std::string dir_refusal;
  const auto cannot = [&](int err) {
    if (!dir_refusal.empty()) return refuse(dir_refusal);
    return make_error(Errc::io,
                      fmt::format("cannot read {} {}: {}", what, path, std::strerror(err)));
  };
  const auto note = [&](std::string why) {
    if (dir_refusal.empty()) dir_refusal = std::move(why);
  };
  if (path.empty()) return cannot(ENOENT);
  std::string abs = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return cannot(errno);
    abs = cwd;
    abs.push_back('/');
    abs.append(path);
  }
  abs = join_path(split_path(abs));  // no "//" or "/./": compared with resolved paths below
  // The directory of the path as given is not named in messages (the path already names it);
  // every other directory is.
  const std::string given_dir = parent_of(abs);
  std::deque<std::string> todo;
  for (auto& p : split_path(abs)) todo.push_back(std::move(p));

  CheckedPath cur;
  std::vector<std::string> real;  // components of cur's resolved path
  const auto open_root = [&]() -> bool {
    cur.fd.reset(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
    real.clear();
    return cur.fd && ::fstat(cur.fd.get(), &cur.st) == 0;
  };
  const auto check_dir = [&]() -> std::string {
    const std::string name = join_path(real);
    return untrusted_reason(cur.st, "directory", name == given_dir ? std::string() : name, use);
  };
  if (!open_root()) return cannot(errno);
  note(check_dir());

  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    const bool last = todo.empty();
    if (!S_ISDIR(cur.st.st_mode)) return cannot(ENOTDIR);
    if (name == "..") {
      // The physical parent, as the kernel resolves "..": checked again (it passed on the way
      // down unless a link's target led here).
      UniqueFd up(::openat(cur.fd.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!up) return cannot(errno);
      cur.fd = std::move(up);
      if (::fstat(cur.fd.get(), &cur.st) != 0) return cannot(errno);
      if (!real.empty()) real.pop_back();
      note(check_dir());
      continue;
    }
    UniqueFd next(::openat(cur.fd.get(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (!next) return cannot(errno);
    struct stat st {};
    if (::fstat(next.get(), &st) != 0) return cannot(errno);
    real.push_back(name);
    const std::string here = join_path(real);
    if (S_ISLNK(st.st_mode)) {
      if (last && !follow_last)
        return refuse(here == abs
                          ? "it is a symbolic link (give the real file)"
                          : fmt::format("{} is a symbolic link (give the real file)", here));
      // Whoever owns a link in a sticky directory may point it elsewhere.
      note(untrusted_reason(st, "link", here, use));
      if (++links > kMaxLinks) return cannot(ELOOP);
      char buf[PATH_MAX];
      const ssize_t n = ::readlinkat(next.get(), "", buf, sizeof buf);
      if (n < 0) return cannot(errno);
      if (static_cast<std::size_t>(n) >= sizeof buf) return cannot(ENAMETOOLONG);
      const std::string_view target(buf, static_cast<std::size_t>(n));
      real.pop_back();
      const auto parts = split_path(target);
      todo.insert(todo.begin(), parts.begin(), parts.end());
      if (!target.empty() && target[0] == '/') {
        if (!open_root()) return cannot(errno);
        note(check_dir());
      }
      continue;
    }
    cur.fd = std::move(next);
    cur.st = st;
    if (S_ISDIR(st.st_mode)) {
      note(check_dir());
    } else if (auto why = untrusted_reason(st, "file", here == abs ? std::string() : here, use);
               !why.empty()) {
      return refuse(why);
    }
  }
  if (!dir_refusal.empty()) return refuse(dir_refusal);
  cur.real = join_path(real);
  return cur;
}

Result<int> open_trusted(const std::string& path, std::string_view what, TrustUse use) {
  auto walked = walk_trusted(path, what, use, /*follow_last=*/false);
  if (!walked) return walked.error();
  if (!S_ISREG(walked->st.st_mode))
    return make_error(Errc::unavailable,
                      fmt::format("refusing {} {}: not a regular file", what, path));
  // The checked inode itself, reopened for reading through its descriptor: never by name.
  const std::string by_fd = fmt::format("/proc/self/fd/{}", walked->fd.get());
  UniqueFd fd(::open(by_fd.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return make_error(Errc::io,
                      fmt::format("cannot read {} {}: {}", what, path, std::strerror(errno)));
  return fd.release();
}

Result<int> open_private(const std::string& path, std::string_view what) {
  auto fd = open_trusted(path, what, TrustUse::read);
  if (!fd) return fd.error();
  UniqueFd owned(*fd);
  struct stat st {};
  if (::fstat(owned.get(), &st) != 0)
    return make_error(Errc::io,
                      fmt::format("cannot read {} {}: {}", what, path, std::strerror(errno)));
  if (st.st_mode & S_IROTH)
    return make_error(Errc::unavailable,
                      fmt::format("refusing {} {}: it is readable by others (mode {:o}); run "
                                  "chmod 600 on it",
                                  what, path, st.st_mode & 07777));
  return owned.release();
}

namespace {

/// The first line of a `#!` script (without "#!"), or nullopt for anything else (a binary, or a
/// file sonde may execute but not read: the kernel then runs it as a binary or not at all).
Result<std::string> shebang_line(const CheckedPath& file, UniqueFd& opened) {
  const std::string by_fd = fmt::format("/proc/self/fd/{}", file.fd.get());
  UniqueFd fd(::open(by_fd.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::string();
  char buf[kMaxShebang];
  ssize_t n;
  while ((n = ::pread(fd.get(), buf, sizeof buf, 0)) < 0 && errno == EINTR) {
  }
  if (n < 2 || buf[0] != '#' || buf[1] != '!') return std::string();
  const std::string_view text(buf, static_cast<std::size_t>(n));
  auto nl = text.find('\n');
  if (nl == std::string_view::npos) {
    if (static_cast<std::size_t>(n) == sizeof buf)
      return make_error(Errc::unavailable,
                        fmt::format("its #! line is longer than {} bytes", kMaxShebang - 1));
    nl = text.size();  // a one-line script without a final newline
  }
  opened = std::move(fd);
  return std::string(text.substr(2, nl - 2));
}

/// A binary to execute under the rule: a regular, executable file that is not itself a script.
Result<CheckedPath> checked_binary(const std::string& path, const std::string& for_msg,
                                   std::string_view role) {
  auto walked = walk_trusted(path, "program", TrustUse::run, /*follow_last=*/true);
  if (!walked) {
    // "refusing program S: its interpreter /x: its file is ..." names both.
    std::string msg = walked.error().message;
    const std::string head = fmt::format("program {}: ", path);
    if (const auto at = msg.find(head); at != std::string::npos) msg = msg.substr(at + head.size());
    return make_error(Errc::unavailable,
                      fmt::format("refusing program {}: {} {}: {}", for_msg, role, path, msg));
  }
  return walked;
}

}  // namespace

std::string search_program(const std::string& name) {
  const std::string path = program_search_path();
  std::string_view rest = path;
  for (;;) {
    const auto colon = rest.find(':');
    const std::string_view dir = rest.substr(0, colon);
    std::string candidate(dir.empty() ? std::string_view(".") : dir);
    candidate += '/';
    candidate += name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) return {};
    rest.remove_prefix(colon + 1);
  }
}

Result<TrustedProgram> trusted_program(const std::string& path) {
  const auto refuse = [&](const std::string& why) {
    return make_error(Errc::unavailable, fmt::format("refusing program {}: {}", path, why));
  };
  auto walked = walk_trusted(path, "program", TrustUse::run, /*follow_last=*/true);
  if (!walked) {
    if (walked.error().code == Errc::io) {
      // As execve would say it: "cannot run 'x': No such file or directory".
      const auto colon = walked.error().message.rfind(": ");
      return make_error(Errc::unavailable, fmt::format("cannot run '{}': {}", path,
                                                       walked.error().message.substr(colon + 2)));
    }
    return walked.error();
  }
  const struct stat& st = walked->st;
  if (!S_ISREG(st.st_mode)) return refuse("not a regular file");
  if (!(st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH))) return refuse("it is not executable");

  TrustedProgram prog;
  prog.real = walked->real;
  UniqueFd script;
  auto line = shebang_line(*walked, script);
  if (!line) return refuse(line.error().message);
  if (!script) {  // a binary: executed through the descriptor that was checked
    prog.exe = std::move(walked->fd);
    return prog;
  }
  // A script: the kernel would look its interpreter up by name, unchecked. Its interpreter is
  // checked instead and executed by descriptor, with the checked script as /dev/fd/N.
  std::string_view rest = *line;
  const auto skip_blanks = [&] {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  };
  skip_blanks();
  const auto end = rest.find_first_of(" \t");
  std::string interp(rest.substr(0, end));
  rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  skip_blanks();
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\t' || rest.back() == '\r'))
    rest.remove_suffix(1);
  const std::string arg(rest);  // the kernel passes the rest of the line as one argument
  if (interp.empty() || interp[0] != '/')
    return refuse(fmt::format("its #! line names no absolute interpreter ('{}')", interp));
  auto bin = checked_binary(interp, path, "its interpreter");
  if (!bin) return bin.error();
  if (!S_ISREG(bin->st.st_mode) || !(bin->st.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH)))
    return refuse(fmt::format("its interpreter {} is not an executable file", interp));
  {
    UniqueFd nested;
    auto nested_line = shebang_line(*bin, nested);
    if (!nested_line || nested)
      return refuse(fmt::format("its interpreter {} is a script itself", interp));
  }
  prog.interpreter = {interp};
  const std::string base = interp.substr(interp.rfind('/') + 1);
  if (base == "env" && !arg.empty()) {
    // `#!/usr/bin/env NAME`: env would search PATH for NAME, unchecked. Resolved and checked
    // here, then NAME is executed directly.
    if (arg[0] == '-' || arg.find_first_of(" \t=/") != std::string::npos)
      return refuse(
          fmt::format("its #! line '{}' runs env with options; name an interpreter by "
                      "its absolute path",
                      *line));
    const std::string found = search_program(arg);
    if (found.empty()) return refuse(fmt::format("its interpreter '{}' is not in PATH", arg));
    bin = checked_binary(found, path, "its interpreter");
    if (!bin) return bin.error();
    UniqueFd nested;
    auto nested_line = shebang_line(*bin, nested);
    if (!nested_line || nested)
      return refuse(fmt::format("its interpreter {} is a script itself", found));
    prog.interpreter = {found};
  } else if (!arg.empty()) {
    prog.interpreter.push_back(arg);
  }
  prog.exe = std::move(bin->fd);
  prog.script = std::move(script);
  return prog;
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
