// The node-saturated tag (core/summary.hpp): the node's CPUs busy while the program got less than
// the CPUs available to it. The test makes the node busy itself (one burner per CPU beside the
// command), so the tag's truth comes from the workload, not from how busy the machine happens to
// be; the figures the summary text gives come from the same run.
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/summary.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

/// `sonde run` of `command` beside one burner per CPU, so that the node is busy because of the
/// test itself; the burners are gone when it returns.
RunResult run_beside_burners(const fs::path& dir, const std::vector<std::string>& command) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<std::unique_ptr<BackgroundProcess>> burners;
  for (long i = 0; i < cpus; ++i)
    burners.push_back(std::make_unique<BackgroundProcess>(
        std::vector<std::string>{workload_binary(), "burn", "30"}));
  const std::string out = (dir / "out").string(), summary = (dir / "summary.json").string();
  std::vector<std::string> args = {
      sonde_binary(), "run", "--interval",     "0.1",   "--levels", "process,system",
      "--out",        out,   "--summary-json", summary, "--"};
  args.insert(args.end(), command.begin(), command.end());
  const RunResult r = run_command(args);
  for (auto& b : burners) b->kill_and_wait();
  return r;
}

TEST(Tags, NodeSaturatedWhenOtherProcessesTakeTheCpus) {
  const fs::path dir = scratch_dir();
  const RunResult r = run_beside_burners(dir, {workload_binary(), "burn", "0.6"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const nlohmann::json s = read_json(dir / "summary.json");
  ASSERT_TRUE(s.contains("node_cpu_mean_pct")) << s.dump(1);
  EXPECT_GE(s.at("node_cpu_mean_pct").get<double>(), 90.0) << "one burner per CPU beside it";
  const auto tags = s.at("tags").get<std::vector<std::string>>();
  EXPECT_NE(std::find(tags.begin(), tags.end(), "node-saturated"), tags.end()) << s.dump(1);
  // One burning thread among cpus+1 of them gets less than a core.
  EXPECT_LT(s.at("cpu_mean_cores").get<double>(), 1.0);
  EXPECT_NE(r.err.find("the node was busy (its CPUs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("your program got"), std::string::npos) << r.err;
  // The stored run's summary says the same.
  const nlohmann::json stored = read_json(run_dir(dir / "out") / "manifest.json").at("summary");
  const auto stored_tags = stored.at("tags").get<std::vector<std::string>>();
  EXPECT_NE(std::find(stored_tags.begin(), stored_tags.end(), "node-saturated"), stored_tags.end());
}

// A program that sleeps on a busy node used no CPU it was denied: no tag, no "your program got
// 0.00 of N cores" line.
TEST(Tags, NotNodeSaturatedWhenTheProgramWaited) {
  const fs::path dir = scratch_dir();
  const RunResult r = run_beside_burners(dir, {"sleep", "0.6"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const nlohmann::json s = read_json(dir / "summary.json");
  ASSERT_TRUE(s.contains("node_cpu_mean_pct")) << s.dump(1);
  EXPECT_GE(s.at("node_cpu_mean_pct").get<double>(), 90.0) << "one burner per CPU beside it";
  EXPECT_LT(s.at("cpu_mean_cores").get<double>(), kNodeSaturatedMinCores) << s.dump(1);
  const auto tags = s.at("tags").get<std::vector<std::string>>();
  EXPECT_EQ(std::find(tags.begin(), tags.end(), "node-saturated"), tags.end()) << s.dump(1);
  EXPECT_EQ(r.err.find("your program got"), std::string::npos) << r.err;
  const nlohmann::json stored = read_json(run_dir(dir / "out") / "manifest.json").at("summary");
  const auto stored_tags = stored.at("tags").get<std::vector<std::string>>();
  EXPECT_EQ(std::find(stored_tags.begin(), stored_tags.end(), "node-saturated"), stored_tags.end());
}

}  // namespace
}  // namespace sonde::test
