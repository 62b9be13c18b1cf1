// What `sonde status`, `sonde gpustat` and `sonde top` share: the status plugins (built-in and
// from the plugin directories), their settings from the environment, colours by default.
#include "cli/status_common.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "core/trust.hpp"
#include "plugins/plugins.hpp"

namespace sonde::cli {

bool auto_color() {
  if (::isatty(STDOUT_FILENO) != 1) return false;
  const char* term = std::getenv("TERM");
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  const char* no_color = std::getenv("NO_COLOR");
  return no_color == nullptr || *no_color == '\0';
}

std::vector<status::StatusPluginRef> all_status_plugins() {
  auto plugins = status::builtin_status_plugins();
  std::vector<std::string> warnings;
  for (auto& p : status::find_status_plugins(plugins::plugin_dirs(), warnings)) {
    const bool clash = std::any_of(plugins.begin(), plugins.end(),
                                   [&](const auto& b) { return b.name == p.name; });
    if (clash)
      warnings.push_back(fmt::format("status plugin {}: the name '{}' is a built-in one; skipped",
                                     p.source, p.name));
    else
      plugins.push_back(std::move(p));
  }
  for (const auto& w : warnings) std::cerr << "sonde: warning: " << w << "\n";
  return plugins;
}

status::StatusSettings status_settings(const std::string& command) {
  status::StatusSettings settings;
  settings.command = command;
  if (const char* p = program_env("SONDE_PROC_ROOT"))
    settings.proc_root = p;  // not under AT_SECURE
  if (const char* t = std::getenv("SONDE_STATUS_HOOK_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (end != t && *end == '\0' && v > 0 && v <= 3600)
      settings.hook_timeout_s = v;
    else
      std::cerr << fmt::format(
          "sonde: warning: SONDE_STATUS_HOOK_TIMEOUT='{}' is not a number of seconds in (0, 3600]; "
          "using {} s\n",
          t, settings.hook_timeout_s);
  }
  return settings;
}

}  // namespace sonde::cli
