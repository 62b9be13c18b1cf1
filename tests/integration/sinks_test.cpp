// The sinks' error policy end to end (src/sinks/sink.hpp): an output that fails is reported once
// and disabled; the run, its program and the summary go on, and the run is marked incomplete.
#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

TEST(Sinks, AFullRunDirectoryIsReportedOnceAndTheRunGoesOn) {
  const fs::path out = scratch_dir() / "run";
  // 16 blocks of 512 bytes per file: the manifest fits, the CSV rows outgrow it. The program
  // lives until a CSV file has reached that limit (sonde could write no more of it), then 2 s
  // longer: how many rows that takes depends on how fast this machine ticks, not the truth. One
  // process that forks nothing, so that the manifest's process table stays small enough to fit.
  const std::string program =
      "import glob, os, sys, time\n"
      "for _ in range(1200):\n"
      "    if any(os.path.getsize(f) >= 8192 for f in glob.glob(sys.argv[1] + '/perf_*.csv')):\n"
      "        time.sleep(2)\n"
      "        break\n"
      "    time.sleep(0.05)\n";
  const std::string cmd = std::string("ulimit -f 16; trap '' XFSZ; exec ") + sonde_binary() +
                          " run --interval 0.02 --out " + out.string() +
                          " -- /usr/bin/python3 -c " + shell_quote(program) + " " +
                          shell_quote(out.string());
  const RunResult r = run_command({"/bin/sh", "-c", cmd});
  EXPECT_EQ(r.status, 0) << r.describe();
  const auto first = r.err.find("no more rows are written");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(first, r.err.rfind("no more rows are written")) << "reported once: " << r.err;
  EXPECT_NE(r.err.find("sonde summary"), std::string::npos) << "the run went on: " << r.err;
  const nlohmann::json manifest = read_json(out / "manifest.json");
  EXPECT_EQ(manifest.value("complete", true), false) << manifest.dump(2);
  // Sampling went on after the failure: more ticks than the fullest file holds rows.
  std::size_t most_rows = 0;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".csv") {
      EXPECT_LE(fs::file_size(e.path()), 8192u) << e.path();
      most_rows = std::max(most_rows, lines_of(read_file(e.path())).size() - 1);
    }
  EXPECT_GT(manifest.value("ticks", std::size_t{0}), most_rows + 2)
      << "sampling went on after the failure";
  EXPECT_EQ(manifest.value("exit_status", -1), 0);
}

}  // namespace
}  // namespace sonde::test
