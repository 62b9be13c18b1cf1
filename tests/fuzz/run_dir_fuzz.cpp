// Fuzz target: the run directory reader (read_run_dir in src/sinks/run_data.hpp: manifest.json,
// the RFC 4180 CSV of perf_<level>.csv and cell_history.csv). The input is a run directory in one
// text, each file after a line "--- NAME" (NAME: letters, digits, '_', '.', '-'; other lines before
// the first such line are ignored):
//
//   --- manifest.json
//   {"levels": ["system"], "files": {"system": "perf_system.csv"}}
//   --- perf_system.csv
//   time,wallclock,cpu_util_avg
//   0,1700000000,12.5
//
// The files are written into a scratch directory that the reader then reads.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "run_checks.hpp"
#include "sinks/run_data.hpp"

namespace {

bool plain_name(std::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sonde::fuzz;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  const std::string dir = scratch_dir() + "/run";
  remove_tree(dir);
  check(std::filesystem::create_directory(dir), "creating the scratch run directory");
  std::string name, contents;
  auto flush = [&] {
    if (!name.empty()) write_file(dir + "/" + name, contents);
    name.clear();
    contents.clear();
  };
  while (!rest.empty()) {
    const auto nl = rest.find('\n');
    const std::string_view line =
        rest.substr(0, nl == std::string_view::npos ? rest.size() : nl + 1);
    rest.remove_prefix(line.size());
    std::string_view header = line;
    if (!header.empty() && header.back() == '\n') header.remove_suffix(1);
    if (header.substr(0, 4) == "--- " && plain_name(header.substr(4))) {
      flush();
      name = header.substr(4);
    } else if (!name.empty()) {
      contents += line;
    }
  }
  flush();
  if (auto run = sonde::read_run_dir(dir); run.ok()) check_run(*run);
  remove_tree(dir);
  return 0;
}
