#pragma once
// A `sonde run` with a plugin and its per-level tables, and the check that a plugin, whatever it
// does, leaves the built-in columns intact.
#include <cmath>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {

struct PluginRun {
  RunResult result;
  CsvTable process;
  CsvTable system;
};

// The built-in columns are unaffected by a plugin, whatever it does.
inline void expect_builtins_intact(const PluginRun& r) {
  const auto mem = r.process.numbers("memory");
  ASSERT_GE(mem.size(), 5u);
  EXPECT_EQ(count_nan(mem), 0u);
  const auto sys_mem = r.system.numbers("memory");
  EXPECT_EQ(count_nan(sys_mem), 0u);
  // Only the first tick (no interval yet) and the last one (taken when the program exits, maybe
  // within the same kernel clock tick as the one before) may lack a CPU figure.
  const auto cpu = r.system.numbers("cpu_util_avg");
  for (std::size_t i = 1; i + 1 < cpu.size(); ++i) EXPECT_FALSE(std::isnan(cpu[i])) << "row " << i;
  const auto time = r.system.numbers("time");
  EXPECT_EQ(count_nan(time), 0u);
}

}  // namespace sonde::test
