// The real sonde on the Slurm test cluster (tests/slurm/README.md), and the pattern for the
// multi-node tests: fixture slurm_cluster, the cluster's env file, srun --label output joined
// back into lines (support/slurm_cluster.hpp).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "support/run_helpers.hpp"
#include "support/slurm_cluster.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

RunOptions on_cluster(const fs::path& dir, double timeout_s = 60) {
  RunOptions options;
  options.env = slurm::cluster_env(dir);
  options.timeout_s = timeout_s;
  return options;
}

// `sonde stream` on every node through `srun --label`: each node's ready line names that node
// and is longer than one srun message (so the joining is exercised), and each node's Slurm level
// counts only the job's processes on that node (sh, timeout, sonde).
TEST(SlurmCluster, StreamOnEveryNodeThroughSrun) {
  const auto dir = slurm::cluster_dir();
  ASSERT_TRUE(dir)
      << "SONDE_SLURM_CLUSTER_DIR is not set (ctest sets it with the slurm_cluster fixture)";
  const std::string stream = std::string("timeout -s INT 4 ") + sonde_binary() +
                             " stream --levels slurm,system --interval 0.5 --target-pid $$";
  const auto r = run_command({"srun", "-N3", "--ntasks-per-node=1", "--label", "sh", "-c", stream},
                             on_cluster(*dir));
  ASSERT_FALSE(r.timed_out) << r.describe();
  const auto lines = slurm::split_labelled(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out.substr(0, 2000) << r.describe();
  std::set<std::string> hosts;
  for (const auto& [task, task_lines] : lines) {
    SCOPED_TRACE("task " + std::to_string(task));
    ASSERT_GE(task_lines.size(), 3u);
    const json ready = json::parse(task_lines.front());
    EXPECT_EQ(ready.value("status", ""), "ready");
    EXPECT_GT(task_lines.front().size(), 1024u) << "the ready line fits one srun message now";
    const std::string host = ready["node_info"].value("hostname", "");
    EXPECT_EQ(host, "n" + std::to_string(task + 1));
    hosts.insert(host);
    int slurm_samples = 0;
    for (std::size_t i = 1; i < task_lines.size(); ++i) {
      const json line = json::parse(task_lines[i]);
      if (line.value("level", "") != "slurm") continue;
      ++slurm_samples;
      const double procs = line["sample"].value("num_procs", -1.0);
      EXPECT_GE(procs, 1.0) << task_lines[i];
      EXPECT_LE(procs, 4.0) << "processes of other nodes counted: " << task_lines[i];
    }
    EXPECT_GE(slurm_samples, 1);
  }
  EXPECT_EQ(hosts.size(), 3u);
}

// A process started on n2 (nsenter into its namespaces) is on n2 only.
TEST(SlurmCluster, ProcessOnOneNodeOnly) {
  const auto dir = slurm::cluster_dir();
  ASSERT_TRUE(dir)
      << "SONDE_SLURM_CLUSTER_DIR is not set (ctest sets it with the slurm_cluster fixture)";
  const auto pids = slurm::cluster("pids", *dir, {"n2"});
  ASSERT_EQ(pids.status, 0) << pids.describe();
  const std::string init = pids.out.substr(0, pids.out.find('\n'));
  BackgroundProcess w(
      {"nsenter", "-t", init, "-p", "-u", "-m", workload_binary(), "hold", "1", "30"});
  const auto ready = w.read_line(10);
  ASSERT_TRUE(ready) << w.err();
  EXPECT_EQ(*ready, "ready");
  const auto count_on = [&](const std::string& node) {
    const auto r = run_command({"srun", "-N1", "-w", node, "ps", "-eo", "args"}, on_cluster(*dir));
    EXPECT_EQ(r.status, 0) << r.describe();
    int n = 0;
    for (std::size_t pos = 0;
         (pos = r.out.find("sonde-test-workload hold 1 30", pos)) != std::string::npos; ++pos)
      ++n;
    return n;
  };
  EXPECT_EQ(count_on("n2"), 1);
  EXPECT_EQ(count_on("n1"), 0);
  EXPECT_EQ(count_on("n3"), 0);
  w.kill_and_wait();
}

// srun --label output put back together: pieces of 1024 bytes, a JSON line cut anywhere
// (--unbuffered), a newline alone, and srun's own lines.
TEST(SlurmLabelledOutput, JoinsPieces) {
  const std::string a(1024, 'a');
  const std::string out = "0: " + a + "\n1: {\"x\": 1}\n0: " + a + "\n0: tail\n" +  // 2 x 1024 + 4
                          "1: {\"y\": \n2: {}\n1: 2}\n1: \n" +  // cut JSON, lone newline
                          "srun: error: n3: task 2: Exited with exit code 1\n" +  // not a task's
                          "  10: short\n";
  const auto lines = slurm::split_labelled(out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines.at(0), std::vector<std::string>{a + a + "tail"});
  EXPECT_EQ(lines.at(1), (std::vector<std::string>{R"({"x": 1})", R"({"y": 2})"}));
  EXPECT_EQ(lines.at(2), std::vector<std::string>{"{}"});
  EXPECT_EQ(lines.at(10), std::vector<std::string>{"short"});
}

}  // namespace
}  // namespace sonde::test
