// Marks inside a run (core/marks.hpp, core/phases.hpp) through the real binary: a command that
// marks its phases with the C header, `sonde mark` and the Python module; each phase's figures
// against what the workload did in it (its own rusage, the bytes it wrote); the summary text, the
// stored run and the report's data; `sonde mark` outside a run.
#include <cmath>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

const nlohmann::json* phase(const nlohmann::json& phases, const std::string& name) {
  for (const auto& p : phases)
    if (p.at("name") == name) return &p;
  return nullptr;
}

TEST(Marks, PhasesOfACommandThatMarksThem) {
  const fs::path dir = scratch_dir();
  const std::string w = workload_binary();
  const std::string python_marks = (fs::path(SONDE_SOURCE_DIR) / "python" / "sonde").string();
  RunOptions o;
  o.env = {{"SONDE_WORKLOAD_RUSAGE", (dir / "rusage").string()}};
  // load: a 0.6 s burn between two marks of the C header; idle: a sleep; write: 20 MiB written
  // after `sonde mark`; end: marked from Python; then a line that is not a mark.
  const std::string script =
      "sleep 0.2; " + std::string(SONDE_MARK_C) + " load && " + w + " burn 0.6 && " + SONDE_MARK_C +
      " idle && sleep 0.4 && " + sonde_binary() + " mark write && " + w + " write 20 '" +
      (dir / "data.bin").string() + "' && /usr/bin/python3 -c \"import sys; " +
      "sys.path.insert(0, '" + python_marks + "'); import marks; assert marks.mark('end')\" && " +
      "echo 'not a mark' >> \"$SONDE_MARKS\"";
  const RunResult r = run_command(
      {sonde_binary(), "run", "--interval", "0.05", "--out", (dir / "out").string(),
       "--summary-json", (dir / "summary.json").string(), "--", "/bin/sh", "-c", script},
      o);
  ASSERT_EQ(r.status, 0) << r.describe();
  double burn = 0;
  {
    std::ifstream in(dir / "rusage");
    std::string mode;
    double cpu = 0;
    while (in >> mode >> cpu)
      if (mode == "burn") burn = cpu;
  }
  ASSERT_GT(burn, 0.6 * 0.99) << r.describe();

  const nlohmann::json s = read_json(dir / "summary.json");
  ASSERT_TRUE(s.contains("phases")) << s.dump(1);
  const nlohmann::json& phases = s.at("phases");
  std::vector<std::string> names;
  for (const auto& p : phases) names.push_back(p.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"(start)", "load", "idle", "write", "end"}));
  // Consecutive, from the run's start to its end.
  for (std::size_t i = 1; i < phases.size(); ++i)
    EXPECT_DOUBLE_EQ(phases[i].at("start_s").get<double>(),
                     phases[i - 1].at("end_s").get<double>());
  EXPECT_NEAR(phases.back().at("end_s").get<double>(), s.at("wall_s").get<double>(), 0.2);
  // A phase takes each row's share of the time it overlaps, so a boundary inside a row moves up
  // to half a row's CPU (one core at 0.05 s) either way, at each of the two ends: ±3 % and 0.05 s.
  const nlohmann::json* load = phase(phases, "load");
  ASSERT_NE(load, nullptr);
  EXPECT_NEAR(load->at("cpu_s").get<double>(), burn, burn * 0.03 + 0.05) << load->dump();
  // A burn of one thread takes at least its CPU time in wall time (more on a busy machine).
  EXPECT_GE(load->at("duration_s").get<double>(), burn * 0.97 - 0.05) << "the burn is the phase";
  // The 20 MiB land in "write", none in "load".
  const nlohmann::json* write = phase(phases, "write");
  ASSERT_NE(write, nullptr);
  const double mib = 1024.0 * 1024.0;
  EXPECT_NEAR(write->at("io_write_bytes").get<double>(), 20 * mib, 20 * mib * 0.03);
  EXPECT_LT(load->at("io_write_bytes").get<double>(), 1 * mib);
  // The line that is not a mark is skipped and said.
  EXPECT_NE(r.err.find("1 line(s) of the marks file"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("  phases       5 (marks of the program)"), std::string::npos) << r.err;

  // The run keeps its marks file and the phases; the report's data has them.
  const fs::path run = run_dir(dir / "out");
  EXPECT_TRUE(fs::exists(run / "marks.txt"));
  const nlohmann::json stored = read_json(run / "manifest.json").at("summary").at("phases");
  EXPECT_EQ(stored.size(), phases.size());
  const RunResult rep = run_command({sonde_binary(), "report", run.string(), "--uncompressed",
                                     "--out", (dir / "report.html").string()});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  std::ifstream in(dir / "report.html");
  const std::string html((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(html.find("\"phases\":[{"), std::string::npos);
  EXPECT_NE(html.find("\"name\":\"load\""), std::string::npos);
}

// Outside `sonde run` a mark has nowhere to go: `sonde mark` says so (exit 2), or with --quiet
// says nothing and exits 0, so that a script that marks its phases still runs unmonitored; the C
// header returns 0 and the Python module False.
TEST(Marks, OutsideARunAMarkSaysWhereItWouldGo) {
  RunOptions o;
  o.unset_env = {"SONDE_MARKS"};
  const RunResult plain = run_command({sonde_binary(), "mark", "load"}, o);
  EXPECT_EQ(plain.status, 2) << plain.describe();
  EXPECT_NE(plain.err.find("sonde: error: mark: $SONDE_MARKS is not set"), std::string::npos)
      << plain.err;
  EXPECT_EQ(run_command({sonde_binary(), "mark", "--quiet", "load"}, o).status, 0);
  EXPECT_EQ(run_command({SONDE_MARK_C, "load"}, o).status, 3);
  // An empty name is refused; a marks file that is gone is named.
  o.unset_env.clear();
  o.env = {{"SONDE_MARKS", (scratch_dir() / "gone.txt").string()}};
  const RunResult gone = run_command({sonde_binary(), "mark", "load"}, o);
  EXPECT_EQ(gone.status, 1) << gone.describe();
  EXPECT_NE(gone.err.find("gone.txt"), std::string::npos) << gone.err;
  EXPECT_EQ(run_command({sonde_binary(), "mark", " "}, o).status, 2);
}

}  // namespace
}  // namespace sonde::test
