// `sonde mark NAME`: a phase of the run this process belongs to begins now (core/marks.hpp).
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/clock.hpp"
#include "core/marks.hpp"
#include "core/trust.hpp"

namespace sonde::cli {

int cmd_mark(const MarkOptions& o) {
  std::string name;
  for (const std::string& word : o.name) name += (name.empty() ? "" : " ") + word;
  const char* path = program_env(kMarksEnv);
  if (path == nullptr || *path == '\0') {
    // Outside `sonde run` a mark has nowhere to go; a script that marks its phases still runs.
    if (!o.quiet)
      print_error(
          fmt::format("mark: ${} is not set: run the program under `sonde run` to mark "
                      "its phases (--quiet: say nothing and exit 0)",
                      kMarksEnv));
    return o.quiet ? kExitOk : kExitUsage;
  }
  if (auto ok = append_mark(path, name, wallclock_now()); !ok) {
    print_error("mark: " + ok.error().message);
    return ok.error().code == Errc::config ? kExitUsage : kExitFailure;
  }
  return kExitOk;
}

}  // namespace sonde::cli
