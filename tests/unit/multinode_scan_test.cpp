// The slurm level of `sonde agent` on a fake /proc tree: the job's processes by cgroup (where the
// node has Slurm cgroups) or SLURM_JOB_ID, never the agent, its children, or sonde's launcher and
// agents (SONDE_AGENT_OF_JOB in their environment).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/proc_scanner.hpp"
#include "core/slurm_job.hpp"

namespace sonde {
namespace {

namespace fs = std::filesystem;

struct Tree {
  fs::path root;
  Tree() {
    root = fs::temp_directory_path() / fmt::format("sonde-mn-scan-{}-{}", ::getpid(), n++);
    fs::create_directories(root / "proc");
    fs::create_directories(root / "sys");
  }
  ~Tree() { fs::remove_all(root); }
  void pid(int pid, int ppid, const std::string& env, const std::string& cgroup = "0::/\n") {
    const fs::path d = root / "proc" / std::to_string(pid);
    fs::create_directories(d);
    std::ofstream(d / "stat") << fmt::format(
        "{} (p{}) S {} {} {} 0 -1 4194560 100 0 0 0 5 5 0 0 20 0 1 0 {} 1000000 10 "
        "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        pid, pid, ppid, pid, pid, 1000 + pid);
    std::ofstream(d / "statm") << "1000 10 5 1 0 100 0\n";
    std::ofstream(d / "status") << fmt::format("Name:\tp{}\nPPid:\t{}\nUid:\t0\t0\t0\t0\n", pid,
                                               ppid);
    std::string e = env;
    for (char& c : e)
      if (c == ' ') c = '\0';
    e.push_back('\0');
    std::ofstream(d / "environ", std::ios::binary) << e;
    std::ofstream(d / "cgroup") << cgroup;
    std::ofstream(d / "io") << "rchar: 0\nwchar: 0\nsyscr: 0\nsyscw: 0\nread_bytes: 0\n"
                               "write_bytes: 0\ncancelled_write_bytes: 0\n";
  }
  static inline int n = 0;
};

std::vector<int> slurm_members(const Tree& t, int agent_pid) {
  TargetInfo target;
  target.pid = 0;
  target.slurm_job = "77";
  target.exclude_pid = agent_pid;
  ProcScanner scanner({.proc = (t.root / "proc").string(), .sys = (t.root / "sys").string()},
                      target, {false, false, true, true}, {});
  const auto& s = scanner.scan(1000.0);
  std::vector<int> out;
  for (auto i : s.members[level_index(Level::slurm)]) out.push_back(s.pids[i].pid);
  std::sort(out.begin(), out.end());
  return out;
}

void write_tree(Tree& t) {
  t.pid(1, 0, "PATH=/bin");
  t.pid(10, 1, "SLURM_JOB_ID=77");          // the agent
  t.pid(11, 10, "SLURM_JOB_ID=77");         // its helper child
  t.pid(20, 1, "SLURM_JOB_ID=77 HOME=/x");  // the job's, by environment
  t.pid(21, 1, std::string("SLURM_JOB_ID=77 ") + kAgentMarkerEnv + "=77");  // srun of the agents
  t.pid(30, 1, "HOME=/x", "0::/system.slice/slurmstepd.scope/job_77/step_0/user/task_0\n");
  t.pid(40, 1, "SLURM_JOB_ID=78");   // another job
  t.pid(41, 1, "SLURM_JOB_ID=77x");  // not a job id
}

TEST(MultinodeScan, TheJobsProcessesButNeverTheAgentNorItsLauncher) {
  Tree t;
  write_tree(t);
  EXPECT_EQ(slurm_members(t, 10), (std::vector<int>{20, 30}));
  // Without an excluded pid (an agent started by hand), it counts itself.
  EXPECT_EQ(slurm_members(t, 0), (std::vector<int>{10, 11, 20, 30}));
}

TEST(MultinodeScan, WhereSlurmUsesCgroupsTheEnvironmentDoesNotCount) {
  Tree t;
  write_tree(t);
  fs::create_directories(t.root / "sys/fs/cgroup/system.slice/slurmstepd.scope");
  EXPECT_TRUE(node_has_slurm_cgroups({.proc = "", .sys = (t.root / "sys").string()}));
  EXPECT_EQ(slurm_members(t, 10), (std::vector<int>{30}));
}

TEST(MultinodeScan, JobOfProcess) {
  EXPECT_EQ(slurm_job_from_cgroup("4:memory:/slurm/uid_1000/job_1234/step_0\n"),
            std::optional<std::string>("1234"));
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice/slurmstepd.scope/job_9\n"), std::nullopt);
  EXPECT_TRUE(is_plain_job_id("123"));
  EXPECT_FALSE(is_plain_job_id("12;rm"));
  EXPECT_FALSE(is_plain_job_id(""));
  EXPECT_FALSE(is_plain_job_id(std::string(21, '1')));
}

}  // namespace
}  // namespace sonde
