#pragma once
// The physical invariants every run directory sonde writes must satisfy, whatever the workload
// (tests/support/run_helpers.cpp's run_dir() checks every run an integration test looks at):
//  - no negative value in a rate, percentage or memory column;
//  - no core above 100 %, no level above the CPUs it may use (beyond clock-tick jitter);
//  - per-core columns add up to the level's total;
//  - process <= user <= system in core terms, per core too, and for memory (shared pages once);
//  - no rate over less than a quarter of the interval (unless the manifest marks the final row).
#include <filesystem>
#include <string>
#include <vector>

namespace sonde::test {

/// Every violation found in the run directory `run`, one message each (empty: none). Throws when
/// the run cannot be read.
std::vector<std::string> run_invariant_violations(const std::filesystem::path& run);

}  // namespace sonde::test
