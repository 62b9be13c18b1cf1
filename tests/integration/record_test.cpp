// `sonde record`: attach to a running pid, record the system for a duration, and leave a valid
// run directory behind even when killed with SIGKILL.
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

std::size_t complete_lines(const fs::path& path) {
  const std::string text = read_file(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(Record, SigkillLeavesAValidRunDirectory) {
  const fs::path dir = scratch_dir();
  const fs::path out = dir / "out";
  BackgroundProcess sonde(
      {sonde_binary(), "record", "--system", "--interval", "0.05", "--out", out.string()});
  sleep_for(1.5);
  // On a slow machine give it more time to write its rows; this bounds the test, not sonde.
  for (int i = 0; i < 200 && sonde.running(); ++i) {
    std::error_code ec;
    bool enough = false;
    if (fs::exists(out)) {
      for (const auto& entry : fs::recursive_directory_iterator(out, ec))
        if (entry.path().filename() == "perf_system.csv" && complete_lines(entry.path()) >= 11)
          enough = true;
    }
    if (enough) break;
    sonde.poll();
    sleep_for(0.1);
  }
  ASSERT_TRUE(sonde.running()) << "sonde record exited by itself: status " << *sonde.poll()
                               << "; stderr: " << sonde.err();
  sonde.signal(SIGKILL);
  const std::optional<int> status = sonde.wait(30);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 128 + SIGKILL);

  const fs::path run = run_dir(out);
  const CsvTable table = read_csv(run / "perf_system.csv", {.allow_incomplete_last_line = true});
  ASSERT_GE(table.header.size(), 3u);
  EXPECT_EQ(table.header[0], "time");
  EXPECT_EQ(table.header[1], "wallclock");
  EXPECT_GE(table.rows.size(), 10u);

  const nlohmann::json manifest = read_json(run / "manifest.json");
  ASSERT_TRUE(manifest.contains("complete")) << manifest.dump(2);
  EXPECT_EQ(manifest.at("complete"), false) << manifest.dump(2);
}

TEST(Record, PidEndsWhenTheProcessExits) {
  BackgroundProcess burn({workload_binary(), "burn", "2"});
  const fs::path dir = scratch_dir();
  BackgroundProcess sonde({sonde_binary(), "record", "--pid", std::to_string(burn.pid()),
                           "--duration", "60", "--out", (dir / "out").string()});
  // Reap the workload as soon as it exits (a zombie child of ours would still be in /proc), and
  // wait for sonde, which must stop well before its 60 s duration.
  std::optional<int> status;
  for (int i = 0; i < 450 && !status; ++i) {
    burn.poll();
    status = sonde.wait(0.1);
  }
  ASSERT_TRUE(status.has_value()) << "sonde record --pid did not exit after the pid did";
  EXPECT_EQ(burn.poll(), std::optional<int>(0));
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();

  const fs::path run = run_dir(dir / "out");
  const CsvTable table = read_csv(run / "perf_process.csv");
  EXPECT_FALSE(table.rows.empty());
  const nlohmann::json manifest = read_json(run / "manifest.json");
  EXPECT_EQ(manifest.at("target_pid"), burn.pid());
  EXPECT_EQ(manifest.at("complete"), true);
}

TEST(Record, SystemForADuration) {
  const fs::path dir = scratch_dir();
  const RunResult r = run_command(
      {sonde_binary(), "record", "--system", "--duration", "1", "--out", (dir / "out").string()},
      {{}, {}, 60});
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = run_dir(dir / "out");
  const CsvTable table = read_csv(run / "perf_system.csv");
  EXPECT_FALSE(table.rows.empty());
  const nlohmann::json manifest = read_json(run / "manifest.json");
  EXPECT_EQ(manifest.at("complete"), true);
  EXPECT_FALSE(manifest.at("end_wallclock").is_null());
}

// record --pid names the process it watched (manifest, summary, directory name), and `runs list`
// with no database finds the run directories under ./sonde-runs/ (issue 25, item 9).
TEST(Record, PidNamesTheProcessAndRunsListFindsTheRunDirectories) {
  BackgroundProcess sleeper({workload_binary(), "sleep", "30"});
  const fs::path dir = scratch_dir();
  const std::string pid = std::to_string(sleeper.pid());
  auto in_dir = [&](const std::string& command) {
    return run_command({"sh", "-c", "cd '" + dir.string() + "' && exec " + command}, {{}, {}, 60});
  };
  const std::string sonde = "'" + std::string(sonde_binary()) + "'";
  RunResult r = in_dir(sonde + " record --pid " + pid + " --duration 0.5");
  ASSERT_EQ(r.status, 0) << r.describe();
  const std::string workload = workload_binary();
  EXPECT_NE(r.err.find("process      pid " + pid + ": " + workload + " sleep 30"),
            std::string::npos)
      << r.err;

  const fs::path runs = dir / "sonde-runs";
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(runs)) dirs.push_back(e.path());
  ASSERT_EQ(dirs.size(), 1u);
  const std::string name = dirs[0].filename().string();
  EXPECT_EQ(name.substr(name.size() - 20), "-sonde-test-workload") << name;
  const nlohmann::json manifest = read_json(dirs[0] / "manifest.json");
  EXPECT_EQ(manifest.at("target_command"), (nlohmann::json{workload, "sleep", "30"}));
  EXPECT_EQ(manifest.at("summary").at("target_pid"), sleeper.pid());

  r = in_dir(sonde + " run --quiet -- true");
  ASSERT_EQ(r.status, 0) << r.describe();
  r = in_dir(sonde + " runs list");
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("RUN DIRECTORY"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pid " + pid + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("-true "), std::string::npos) << r.out;
  r = in_dir(sonde + " runs list --json");
  ASSERT_EQ(r.status, 0) << r.describe();
  const nlohmann::json listed = nlohmann::json::parse(r.out);
  ASSERT_EQ(listed.size(), 2u) << r.out;
  EXPECT_EQ(listed[0].at("command"), (nlohmann::json{workload, "sleep", "30"}));
  EXPECT_EQ(listed[1].at("command"), nlohmann::json{"true"});
  EXPECT_EQ(listed[1].at("exit_status"), 0);
  EXPECT_EQ(listed[1].at("complete"), true);

  // Nothing there: said, not an error.
  const fs::path empty = scratch_dir();
  r = run_command({"sh", "-c", "cd '" + empty.string() + "' && exec " + sonde + " runs list"});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("no runs"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace sonde::test
