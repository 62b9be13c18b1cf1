// Loading a plugin runs its code with sonde's privileges: refuse files another user could have
// written or swapped (the rules of src/core/trust.cpp, shared with configuration files and the
// programs that exec and python collectors start).
#include "core/trust.hpp"
#include "plugins/plugins.hpp"

namespace sonde::plugins {

Result<int> open_trusted(const std::string& path) {
  auto fd = sonde::open_trusted(path, "plugin", TrustUse::run);
  if (!fd && fd.error().code == Errc::io) return make_error(Errc::unavailable, fd.error().message);
  return fd;
}

}  // namespace sonde::plugins
