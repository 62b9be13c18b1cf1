#include "core/setup.hpp"

#include "core/trust.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace sonde {

Roots roots_from_env() {
  Roots r;
  if (const char* p = program_env("SONDE_PROC_ROOT")) r.proc = p;
  if (const char* s = program_env("SONDE_SYS_ROOT")) r.sys = s;
  return r;
}

Result<std::vector<Level>> parse_levels(const std::string& text) {
  std::vector<Level> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string name =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    auto l = parse_level(name);
    if (!l)
      return make_error(Errc::config,
                        fmt::format("--levels: unknown level '{}' (expected a "
                                    "comma-separated list of process, user, slurm, system)",
                                    name));
    for (Level seen : out)
      if (seen == *l)
        return make_error(Errc::config, fmt::format("--levels: '{}' is given twice", name));
    out.push_back(*l);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace sonde
