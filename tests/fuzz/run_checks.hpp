#pragma once
// What every stored-run reader promises of a run it accepted (tests/fuzz/run_*_fuzz.cpp): each row
// has one value per column, `sonde report`'s summary can be computed, and the run written back as
// a run directory (`sonde runs export`) reads back with the same shape.
#include <cstdio>
#include <string>

#include "fuzz_common.hpp"
#include "sinks/run_data.hpp"
#include "sinks/sqlite.hpp"

namespace sonde::fuzz {

inline void check_run(const RunData& run) {
  for (const auto& table : run.levels)
    for (const auto& row : table.rows)
      check(row.size() == table.columns.size(), "a stored row has one value per column");
  (void)summarize_run(run);
  const std::string out = scratch_dir() + "/export";
  remove_tree(out);
  auto written = write_run_dir(run, out);
  if (written) {
    auto back = read_run_dir(out);
    if (!back) std::fprintf(stderr, "re-reading the export: %s\n", back.error().message.c_str());
    check(back.ok(), "an exported run reads back");
    check(back->levels.size() == run.levels.size(), "an exported run keeps its levels");
    for (std::size_t i = 0; i < run.levels.size(); ++i) {
      check(back->levels[i].columns == run.levels[i].columns, "an exported run keeps its columns");
      check(back->levels[i].rows.size() == run.levels[i].rows.size(),
            "an exported run keeps its rows");
    }
  }
  remove_tree(out);
}

}  // namespace sonde::fuzz
