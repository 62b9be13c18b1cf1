#pragma once
// Plugins: native shared libraries (C ABI, include/sonde/plugin.h), Python classes run by the
// shipped bridge, and any program speaking the JSON-lines protocol (docs/plugin-protocol.md).
#include <memory>
#include <string>
#include <vector>

#include "core/collector.hpp"
#include "core/config.hpp"

namespace sonde::plugins {

/// Where plugins are looked for, in order: $SONDE_PLUGIN_PATH (colon-separated),
/// $XDG_CONFIG_HOME/sonde/plugins (or ~/.config/sonde/plugins), <prefix>/lib/sonde/plugins.
/// Environment variables are ignored when sonde runs with elevated privileges.
std::vector<std::string> plugin_dirs();

/// True when sonde runs setuid/setgid or with capabilities beyond the invoking user's.
bool elevated_privileges();

/// Registers the factories for "plugin:", "python:" and "exec" targets.
void register_plugin_factories(Registry& registry);

/// Adds a collectors: entry for every plugin found in `dirs` that the configuration does not
/// name yet (native libraries through their default entry, *.yaml snippets as written).
/// Refused files are reported through `warn` and skipped.
void discover_plugins(Config& cfg, const std::vector<std::string>& dirs,
                      const std::function<void(const std::string&)>& warn);

// ---- native plugins (src/plugins/native.cpp) ----

/// "plugin:NAME" → the file: an absolute or ./relative path as given, else searched in `dirs`.
Result<std::string> resolve_plugin_file(const std::string& name,
                                        const std::vector<std::string>& dirs);

/// Loads a native plugin library (after the trust checks) and builds its collector in sonde's
/// process. Used by the "plugin:" factory and by the isolated plugin host.
Result<std::unique_ptr<Collector>> make_native_collector(const std::string& path,
                                                         const CollectorArgs& args);

// ---- process plugins (src/plugins/process_host.cpp) ----

/// A collector whose code runs in a child process speaking docs/plugin-protocol.md on its stdin
/// and stdout: `exec` (the `command` kwarg), `python:MODULE.CLASS` (the shipped runner), and
/// native plugins with `isolate: true` (sonde's own `plugin-host` subcommand).
Result<std::unique_ptr<Collector>> make_process_collector(std::vector<std::string> command,
                                                          std::string source, std::string file,
                                                          const CollectorArgs& args);

/// `sonde plugin-host FILE.so`: loads a native plugin and serves it over the protocol on
/// stdin/stdout (what `isolate: true` runs).
int run_plugin_host(const std::string& path);

// ---- trust (src/plugins/trust.cpp) ----

/// Opens a plugin file for loading after walking its path from "/" under the trust rule for
/// code (core/trust.hpp, TrustUse::run): no symbolic link as its last component, a regular file,
/// it and every directory above it owned by root or the invoking user and writable by nobody
/// else (sticky or not). Returns the open fd (close-on-exec): what was checked is what loads.
Result<int> open_trusted(const std::string& path);

}  // namespace sonde::plugins
