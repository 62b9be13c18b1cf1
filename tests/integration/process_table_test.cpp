// The run's per-process table (core/process_table.hpp) through the real binary: a shell starting
// a burner and a process holding memory; each row against that process's own rusage and the
// memory it touched; the table in the summary text, the stored run and the report's data.
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

// Each workload process appends "MODE CPU_SECONDS" (its own rusage) when it exits.
std::map<std::string, double> rusage_by_mode(const fs::path& file) {
  std::map<std::string, double> out;
  std::ifstream in(file);
  std::string mode;
  double cpu = 0;
  while (in >> mode >> cpu) out[mode] = cpu;
  return out;
}

const nlohmann::json* row_running(const nlohmann::json& processes, const std::string& word) {
  for (const auto& r : processes.at("processes"))
    if (r.at("command").get<std::string>().find(word) != std::string::npos) return &r;
  return nullptr;
}

TEST(ProcessTable, EachProcessAgainstItsOwnRusage) {
  const fs::path dir = scratch_dir();
  const std::string w = workload_binary();
  RunOptions o;
  o.env = {{"SONDE_WORKLOAD_RUSAGE", (dir / "rusage").string()}};
  const RunResult r =
      run_command({sonde_binary(), "run", "--interval", "0.1", "--out", (dir / "out").string(),
                   "--summary-json", (dir / "summary.json").string(), "--", "/bin/sh", "-c",
                   w + " burn 0.8 & " + w + " hold 150 1.0; wait"},
                  o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto truth = rusage_by_mode(dir / "rusage");
  ASSERT_TRUE(truth.count("burn") && truth.count("hold")) << r.describe();

  const nlohmann::json s = read_json(dir / "summary.json");
  const nlohmann::json& p = s.at("processes");
  EXPECT_GE(p.at("count").get<int>(), 3) << "the shell, the burner and the holder";
  const nlohmann::json* burn = row_running(p, "burn 0.8");
  const nlohmann::json* hold = row_running(p, "hold 150");
  ASSERT_NE(burn, nullptr) << p.dump(1);
  ASSERT_NE(hold, nullptr) << p.dump(1);
  // Per-process reads are /proc's, in clock ticks: ±3 % and a tick or two. What a process ran
  // after the last tick that saw it reaches the row of the process that reaped it (the shell):
  // a row may be short by up to one interval (0.1 s), never long.
  for (const auto& [row, mode] : {std::pair{burn, "burn"}, std::pair{hold, "hold"}}) {
    const double cpu = row->at("cpu_s").get<double>(), want = truth.at(mode);
    EXPECT_LE(cpu, want * 1.03 + 0.03) << mode;
    EXPECT_GE(cpu, want * 0.97 - 0.03 - 0.1) << mode;
  }
  EXPECT_EQ(p.at("processes")[0].at("pid"), burn->at("pid")) << "ordered by CPU time";
  // The holder touched 150 MiB (Pss: its own pages, not shared).
  EXPECT_GE(hold->at("memory_peak_gib").get<double>(), 150.0 / 1024);
  EXPECT_LE(hold->at("memory_peak_gib").get<double>(), 160.0 / 1024);
  EXPECT_LT(burn->at("memory_peak_gib").get<double>(), 0.02);
  EXPECT_LE(burn->at("first_s").get<double>(), burn->at("last_s").get<double>());
  // The rows and what no row holds add up to the level's CPU time.
  EXPECT_NEAR(p.at("cpu_s_sum").get<double>() + p.at("cpu_s_outside").get<double>(),
              s.at("cpu_seconds").get<double>(), 0.02 * s.at("cpu_seconds").get<double>() + 0.02);

  // The summary text shows the table; the stored run and the report's data keep it.
  EXPECT_NE(r.err.find("  processes    "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("burn 0.8"), std::string::npos) << r.err;
  const fs::path run = run_dir(dir / "out");
  const nlohmann::json stored = read_json(run / "manifest.json").at("summary").at("processes");
  EXPECT_EQ(stored.at("count"), p.at("count"));
  EXPECT_EQ(stored.at("processes")[0].at("pid"), burn->at("pid"));
  const RunResult rep = run_command({sonde_binary(), "report", run.string(), "--uncompressed",
                                     "--out", (dir / "report.html").string()});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  std::ifstream in(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("\"processes\":{"), std::string::npos);
}

}  // namespace
}  // namespace sonde::test
