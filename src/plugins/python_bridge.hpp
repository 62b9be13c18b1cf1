#pragma once
// Where the shipped Python bridge (sonde_plugin/runner.py) and the interpreter are, and the
// checks on a python:MODULE.CLASS target before its runner is started.
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde::plugins {

/// $SONDE_PYTHON_DIR, else <prefix>/share/sonde/python next to the binary, else the source tree:
/// the directory that holds sonde_plugin/. Environment variables are ignored with elevated
/// privileges.
Result<std::string> python_dir();

/// $SONDE_PYTHON, else /usr/bin/python3.
std::string python_interpreter();

/// A Python identifier (ASCII letters, digits, `_`, and any non-ASCII character).
bool is_python_identifier(std::string_view s);

/// The Python import path sonde gives a collector's runner: those of `candidates` (the bridge's
/// directory, then $PYTHONPATH's entries) that pass the trust rule for code (every component
/// from "/" owned by root or the invoking user and writable by nobody else, sticky or not);
/// missing ones are left out. A directory that exists and fails the rule is an error naming it
/// ("refusing python path directory /tmp/x: its directory is writable by others ...").
Result<std::vector<std::string>> trusted_python_path(const std::vector<std::string>& candidates);

/// The runner's command line: the interpreter in isolated mode (-I: no current directory, no
/// PYTHON* variables, no user site), whose sys.path gets $SONDE_PYTHON_PATH (set by sonde to
/// trusted_python_path()) in front before the runner is imported.
std::vector<std::string> python_runner_argv(const std::string& what);

/// The file of MODULE in python:MODULE.CLASS, when it lies in one of `dirs` (sonde's own
/// PYTHONPATH; elsewhere it is the interpreter's installed packages): it and its directory must
/// pass the trust rules, as a native plugin must.
Result<void> check_python_module(const std::string& what, const std::vector<std::string>& dirs);

}  // namespace sonde::plugins
