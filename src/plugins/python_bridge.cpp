// The Python bridge lookup (python_bridge.hpp).
#include "plugins/python_bridge.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/trust.hpp"
#include "plugins/plugins.hpp"

namespace sonde::plugins {
namespace {

namespace fs = std::filesystem;

std::string self_exe_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

bool has_bridge(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "sonde_plugin" / "runner.py", ec);
}

}  // namespace

Result<std::string> python_dir() {
  if (!elevated_privileges()) {
    if (const char* d = std::getenv("SONDE_PYTHON_DIR"); d && *d) {
      if (!has_bridge(d))
        return make_error(Errc::unavailable,
                          fmt::format("SONDE_PYTHON_DIR={} has no sonde_plugin/runner.py", d));
      return std::string(d);
    }
  }
  if (const std::string exe = self_exe_dir(); !exe.empty()) {
    const fs::path shipped = fs::path(exe) / ".." / "share" / "sonde" / "python";
    if (has_bridge(shipped)) return fs::weakly_canonical(shipped).string();
  }
#ifdef SONDE_SOURCE_PYTHON_DIR
  if (has_bridge(SONDE_SOURCE_PYTHON_DIR)) return std::string(SONDE_SOURCE_PYTHON_DIR);
#endif
  return make_error(Errc::unavailable,
                    "cannot find the sonde_plugin Python package (set SONDE_PYTHON_DIR to the "
                    "directory that holds sonde_plugin/)");
}

std::string python_interpreter() {
  if (!elevated_privileges())
    if (const char* p = std::getenv("SONDE_PYTHON"); p && *p) return p;
  return "/usr/bin/python3";
}

bool is_python_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  });
}

Result<void> check_python_module(const std::string& what, const std::vector<std::string>& dirs) {
  std::string rel = what.substr(0, what.rfind('.'));
  std::replace(rel.begin(), rel.end(), '.', '/');
  for (const std::string& d : dirs) {
    for (const std::string& candidate : {d + "/" + rel + ".py", d + "/" + rel + "/__init__.py"}) {
      struct stat st {};
      if (::lstat(candidate.c_str(), &st) != 0) continue;
      auto fd = sonde::open_trusted(candidate, "python module");
      if (!fd) return make_error(Errc::unavailable, fd.error().message);
      UniqueFd checked(*fd);  // only the checks matter here
      return {};
    }
  }
  return {};
}

}  // namespace sonde::plugins
