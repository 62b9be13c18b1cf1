#pragma once
// The JSON lines a multi-node agent sends (docs/multinode.md): a node's "ready" line and one
// slurm-level sample, for the unit tests of the head (tests/unit/multinode_*_test.cpp).
#include <string>

#include <nlohmann/json.hpp>

namespace sonde::test {

/// `node` ready at `wallclock`, with the slurm level's columns cpu_util_avg and memory, 4 CPUs.
inline std::string ready(const std::string& node, double wallclock) {
  return nlohmann::json{
      {"status", "ready"},
      {"node", node},
      {"wallclock", wallclock},
      {"columns_by_level", {{"slurm", {"cpu_util_avg", "memory"}}}},
      {"node_info", {{"num_system_cpus", 4}, {"cpus_per_level", {{"slurm", {{"num_cpus", 4}}}}}}}}
      .dump();
}

/// One slurm-level sample at `wallclock` (its monotonic time 900 s before it).
inline std::string sample(double wallclock, double cpu, double mem) {
  return nlohmann::json{
      {"level", "slurm"},
      {"wallclock", wallclock},
      {"sample", {{"time", wallclock - 900}, {"cpu_util_avg", cpu}, {"memory", mem}}}}
      .dump();
}

}  // namespace sonde::test
