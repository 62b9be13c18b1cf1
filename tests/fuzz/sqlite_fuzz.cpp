// Fuzz target: the SQLite run reader (src/sinks/sqlite.hpp: list_runs_sqlite, read_run_sqlite).
// The input is written to runs.sqlite in a scratch directory (SQLite reads files, not buffers),
// listed, and its latest run and every listed run (the first few) read back.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "run_checks.hpp"
#include "sinks/sqlite.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sonde::fuzz;
  const std::string dir = scratch_dir() + "/db";
  remove_tree(dir);  // with SQLite's -journal and -wal files of the last input
  check(std::filesystem::create_directory(dir), "creating the scratch database directory");
  const std::string db = dir + "/runs.sqlite";
  write_file(db, std::string_view(reinterpret_cast<const char*>(data), size));
  if (auto runs = sonde::list_runs_sqlite(db); runs.ok()) {
    std::size_t n = 0;
    for (const auto& stored : *runs) {
      if (++n > 4) break;
      if (auto run = sonde::read_run_sqlite(db, stored.id); run.ok()) check_run(*run);
    }
  }
  if (auto run = sonde::read_run_sqlite(db, std::nullopt); run.ok()) check_run(*run);
  remove_tree(dir);
  return 0;
}
