// The sinks' error policy end to end (src/sinks/sink.hpp): an output that fails is reported once
// and disabled; the run, its program and the summary go on, and the run is marked incomplete.
#include <string>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

TEST(Sinks, AFullRunDirectoryIsReportedOnceAndTheRunGoesOn) {
  const fs::path out = scratch_dir() / "run";
  // 16 blocks of 512 bytes per file: the manifest fits, the CSV rows outgrow it within ~1 s.
  const std::string cmd = std::string("ulimit -f 16; trap '' XFSZ; exec ") + sonde_binary() +
                          " run --interval 0.02 --out " + out.string() + " -- " +
                          workload_binary() + " sleep 3";
  const RunResult r = run_command({"/bin/sh", "-c", cmd});
  EXPECT_EQ(r.status, 0) << r.describe();
  const auto first = r.err.find("no more rows are written");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(first, r.err.rfind("no more rows are written")) << "reported once: " << r.err;
  EXPECT_NE(r.err.find("sonde summary"), std::string::npos) << "the run went on: " << r.err;
  const nlohmann::json manifest = read_json(out / "manifest.json");
  EXPECT_EQ(manifest.value("complete", true), false) << manifest.dump(2);
  EXPECT_GT(manifest.value("ticks", 0), 100) << "sampling went on after the failure";
  EXPECT_EQ(manifest.value("exit_status", -1), 0);
}

}  // namespace
}  // namespace sonde::test
