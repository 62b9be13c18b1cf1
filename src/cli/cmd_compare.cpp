// `sonde compare RUN_A RUN_B [--json] [--html FILE]` (views/compare.hpp).
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "sinks/run_reader.hpp"
#include "views/compare.hpp"

namespace sonde::cli {

int cmd_compare(const CompareOptions& o) {
  auto a = read_run(o.run_a);
  if (!a) {
    print_error(fmt::format("compare: run A: {}", a.error().message));
    return a.error().code == Errc::parse ? kExitUsage : kExitFailure;
  }
  auto b = read_run(o.run_b);
  if (!b) {
    print_error(fmt::format("compare: run B: {}", b.error().message));
    return b.error().code == Errc::parse ? kExitUsage : kExitFailure;
  }
  const nlohmann::json c = compare_runs(*a, *b);
  if (!o.html.empty()) {
    if (auto ok = write_file_atomic(o.html, compare_html(c, *a, *b)); !ok) {
      print_error(fmt::format("compare: --html {}: {}", o.html, ok.error().message));
      return kExitFailure;
    }
    std::cerr << fmt::format("sonde: comparison written to {}\n", o.html);
  }
  std::cout << (o.json ? json_text(c, 2) + "\n" : compare_text(c));
  return kExitOk;
}

}  // namespace sonde::cli
