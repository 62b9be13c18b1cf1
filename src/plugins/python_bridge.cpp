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

#ifdef SONDE_SOURCE_TREE_FALLBACK
// This source tree's python/ (a build with SONDE_SOURCE_TREE_FALLBACK: CMakeLists.txt writes the
// definition into generated/source_python_dir.cpp).
extern const char* const kSourcePythonDir;
#endif

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
    if (const char* d = program_env("SONDE_PYTHON_DIR")) {
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
#ifdef SONDE_SOURCE_TREE_FALLBACK
  if (has_bridge(kSourcePythonDir)) return std::string(kSourcePythonDir);
#endif
  return make_error(Errc::unavailable,
                    "cannot find the sonde_plugin Python package (set SONDE_PYTHON_DIR to the "
                    "directory that holds sonde_plugin/)");
}

std::string python_interpreter() {
  if (!elevated_privileges())
    if (const char* p = program_env("SONDE_PYTHON")) return p;
  return "/usr/bin/python3";
}

bool is_python_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  });
}

Result<std::vector<std::string>> trusted_python_path(const std::vector<std::string>& candidates) {
  std::vector<std::string> out;
  for (const std::string& d : candidates) {
    auto walked = walk_trusted(d, "python path directory", TrustUse::run, /*follow_last=*/true);
    if (!walked) {
      if (walked.error().code == Errc::io) continue;  // missing or unreachable: Python skips it
      return make_error(Errc::unavailable, walked.error().message);
    }
    if (!S_ISDIR(walked->st.st_mode)) continue;
    // The resolved path: a relative entry (PYTHONPATH=examples/x) means what it meant here.
    if (std::find(out.begin(), out.end(), walked->real) == out.end()) out.push_back(walked->real);
  }
  return out;
}

std::vector<std::string> python_runner_argv(const std::string& what) {
  // -I rather than PYTHONPATH: the interpreter then reads no PYTHON* variable and puts neither
  // the current directory nor a script's directory on sys.path; only the directories checked
  // above are added, in front (as PYTHONPATH would be).
  static constexpr const char* kBootstrap =
      "import os, sys\n"
      "sys.path[:0] = [d for d in os.environ.get('SONDE_PYTHON_PATH', '').split(':') if d]\n"
      "import runpy\n"
      "runpy.run_module('sonde_plugin.runner', run_name='__main__', alter_sys=True)\n";
  return {python_interpreter(), "-I", "-c", kBootstrap, what};
}

Result<void> check_python_module(const std::string& what, const std::vector<std::string>& dirs) {
  std::string rel = what.substr(0, what.rfind('.'));
  std::replace(rel.begin(), rel.end(), '.', '/');
  for (const std::string& d : dirs) {
    for (const std::string& candidate : {d + "/" + rel + ".py", d + "/" + rel + "/__init__.py"}) {
      struct stat st {};
      if (::lstat(candidate.c_str(), &st) != 0) continue;
      auto fd = sonde::open_trusted(candidate, "python module", TrustUse::run);
      if (!fd) return make_error(Errc::unavailable, fd.error().message);
      UniqueFd checked(*fd);  // only the checks matter here
      return {};
    }
  }
  return {};
}

}  // namespace sonde::plugins
