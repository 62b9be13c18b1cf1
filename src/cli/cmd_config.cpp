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
  const Roots roots = roots_from_env();
  auto target = discover_target(roots, ::getpid());
  if (!target) {
    print_error(target.error().message);
    return kExitFailure;
  }
  target->pid = ::getpid();
  EngineOptions eo;
  eo.roots = roots;
  eo.target = *target;
  const Registry registry = make_registry();
  auto engine = Engine::create(cfg, eo, registry);
  if (!engine) {
    print_error(engine.error().message);
    return engine.error().code == Errc::config ? kExitUsage : kExitFailure;
  }
  std::cout << file << ": ok\n";
  return kExitOk;
}

}  // namespace sonde::cli
