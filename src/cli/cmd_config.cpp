// sonde config show | check FILE
#include <iostream>

#include "cli/commands.hpp"
#include "core/engine.hpp"

namespace sonde::cli {

int cmd_config_show(const CommonOptions& common, bool defaults) {
  if (defaults) {
    std::cout << default_config_yaml();
    return kExitOk;
  }
  auto cfg = load(common);
  if (!cfg) return kExitUsage;
  std::cout << dump_config(*cfg);
  return kExitOk;
}

int cmd_config_check(const std::string& file) {
  // The file on top of the defaults only (not the user's other files), checked as deeply as a
  // run would: collector targets, parameters, handlers and columns.
  Config cfg;
  if (auto ok = merge_config_text(cfg, default_config_yaml(), "<defaults>"); !ok) {
    print_error(ok.error().message);
    return kExitFailure;
  }
  if (auto ok = merge_config_file(cfg, file, true); !ok) {
    print_error(ok.error().message);
    return kExitUsage;
  }
  const Registry registry = make_registry();
  int status = kExitOk;
  if (!engine_for_shell(cfg, registry, status)) return status;
  std::cout << file << ": ok\n";
  return kExitOk;
}

}  // namespace sonde::cli
