// discover_node_info / discover_target on the fixture trees under tests/fixtures/tree_*/ and,
// as a smoke test, on this machine's /proc.
#include "core/node_info.hpp"
#include "support/built_paths.hpp"

#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sonde {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMiB = 1024ull * 1024;
constexpr std::uint64_t kGiB = 1024 * kMiB;

Roots fixture_roots(const std::string& tree) {
  const std::string base = std::string(SONDE_FIXTURES_DIR) + "/" + tree;
  return Roots{base + "/proc", base + "/sys"};
}

std::uint64_t limit(const NodeInfo& n, Level l) {
  return n.memory_limit_bytes[level_index(l)];
}
const std::string& source(const NodeInfo& n, Level l) {
  return n.memory_limit_source[level_index(l)];
}

std::vector<int> iota(int from, int to_inclusive) {
  std::vector<int> v;
  for (int i = from; i <= to_inclusive; ++i) v.push_back(i);
  return v;
}

// A writable copy of a fixture tree (or an empty one) for tests that change a file.
class NodeInfoScratch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sonde_node_info_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void copy_tree(const std::string& tree) {
    fs::copy(fs::path(SONDE_FIXTURES_DIR) / tree, dir_, fs::copy_options::recursive);
  }
  void write(const std::string& rel, const std::string& text) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  }
  Roots roots() const { return Roots{(dir_ / "proc").string(), (dir_ / "sys").string()}; }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// tree_v2_slurm: pure cgroup v2, pid 4242 in Slurm job 77, 16 CPUs, affinity 0-7,
// memory.max 8 GiB at the job, cpu.max 2 CPUs at the step, MemTotal 65536000 kB.

constexpr std::uint64_t kV2MemTotal = 65536000ull * 1024;
const char* const kV2JobSource = "cgroup v2 memory.max (/system.slice/slurmstepd.scope/job_77)";

TEST(NodeInfoTreeV2Slurm, Target) {
  auto t = discover_target(fixture_roots("tree_v2_slurm"), 4242);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->pid, 4242);
  EXPECT_EQ(t->uid, 1000u);
  EXPECT_EQ(t->slurm_job, std::optional<std::string>("77"));
}

TEST(NodeInfoTreeV2Slurm, CpusAndQuota) {
  const Roots roots = fixture_roots("tree_v2_slurm");
  auto t = discover_target(roots, 4242);
  ASSERT_TRUE(t.ok()) << t.error().message;
  auto n = discover_node_info(roots, *t);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->num_system_cpus, 16);
  EXPECT_EQ(n->system_cpu_ids, iota(0, 15));
  EXPECT_EQ(n->cpu_handles, iota(0, 7));
  ASSERT_TRUE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*n->cpu_quota, 2.0);
  EXPECT_DOUBLE_EQ(n->num_cpus, 2.0);
}

TEST(NodeInfoTreeV2Slurm, MemoryLimits) {
  const Roots roots = fixture_roots("tree_v2_slurm");
  auto n = discover_node_info(roots, TargetInfo{4242, 1000, "77"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->mem_total_bytes, kV2MemTotal);
  EXPECT_EQ(limit(*n, Level::process), 8 * kGiB);
  EXPECT_EQ(source(*n, Level::process), kV2JobSource);
  EXPECT_EQ(limit(*n, Level::slurm), 8 * kGiB) << "the job cgroup beats SLURM_MEM_PER_NODE";
  EXPECT_EQ(source(*n, Level::slurm), kV2JobSource);
  EXPECT_EQ(limit(*n, Level::user), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::user), "MemTotal");
  EXPECT_EQ(limit(*n, Level::system), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::system), "MemTotal");
}

TEST(NodeInfoTreeV2Slurm, NoSlurmJobMeansMemTotalForSlurmLevel) {
  auto n = discover_node_info(fixture_roots("tree_v2_slurm"), TargetInfo{4242, 1000, {}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::slurm), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::slurm), "MemTotal");
  EXPECT_EQ(limit(*n, Level::process), 8 * kGiB);
}

TEST(NodeInfoTreeV2Slurm, UnknownPidFallsBackToTheNode) {
  // Every per-pid file is missing: nothing fails, everything falls back.
  auto n = discover_node_info(fixture_roots("tree_v2_slurm"), TargetInfo{999, 0, {}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->cpu_handles, iota(0, 15));
  EXPECT_FALSE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(n->num_cpus, 16.0);
  for (Level l : kAllLevels) {
    EXPECT_EQ(limit(*n, l), kV2MemTotal) << level_name(l);
    EXPECT_EQ(source(*n, l), "MemTotal") << level_name(l);
  }
  auto t = discover_target(fixture_roots("tree_v2_slurm"), 999);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code, Errc::vanished);
}

TEST_F(NodeInfoScratch, SlurmMemPerNodeWhenTheJobCgroupIsUnlimited) {
  copy_tree("tree_v2_slurm");
  write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/memory.max", "max\n");
  auto n = discover_node_info(roots(), TargetInfo{4242, 1000, "77"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::slurm), 16384 * kMiB);
  EXPECT_EQ(source(*n, Level::slurm), "SLURM_MEM_PER_NODE");
  EXPECT_EQ(limit(*n, Level::process), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::process), "MemTotal");
}

TEST_F(NodeInfoScratch, LimitsNeverExceedMemTotal) {
  copy_tree("tree_v2_slurm");
  fs::remove(dir_ / "sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/memory.max");
  using namespace std::string_literals;
  write("proc/4242/environ", "SLURM_JOB_ID=77\0SLURM_MEM_PER_NODE=1048576\0"s);  // 1 TiB
  write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/step_0/memory.max",
        "137438953472\n");  // 128 GiB
  auto n = discover_node_info(roots(), TargetInfo{4242, 1000, "77"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::slurm), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::slurm), "MemTotal");
  EXPECT_EQ(limit(*n, Level::process), kV2MemTotal);
  EXPECT_EQ(source(*n, Level::process), "MemTotal");
}

TEST_F(NodeInfoScratch, SmallestCpuQuotaAlongThePathWins) {
  copy_tree("tree_v2_slurm");
  write("sys/fs/cgroup/system.slice/slurmstepd.scope/cpu.max", "150000 100000\n");
  write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/step_0/user/task_0/cpu.max",
        "300000 100000\n");
  auto n = discover_node_info(roots(), TargetInfo{4242, 1000, "77"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  ASSERT_TRUE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*n->cpu_quota, 1.5);
  EXPECT_DOUBLE_EQ(n->num_cpus, 1.5);
}

TEST_F(NodeInfoScratch, QuotaAboveAffinityLeavesAffinity) {
  copy_tree("tree_v2_slurm");
  write("sys/fs/cgroup/system.slice/slurmstepd.scope/job_77/step_0/cpu.max", "1200000 100000\n");
  auto n = discover_node_info(roots(), TargetInfo{4242, 1000, "77"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_DOUBLE_EQ(*n->cpu_quota, 12.0);
  EXPECT_DOUBLE_EQ(n->num_cpus, 8.0);
}

// ---------------------------------------------------------------------------------------------
// tree_v1: cgroup v1 (CentOS 7 layout), pid 31337 in Slurm job 42, cpu4 offline, affinity
// 2-3,5-6, memory.limit_in_bytes 2 GiB and cfs quota 150000/100000 at the job, RLIMIT_AS 1 GiB.

constexpr std::uint64_t kV1MemTotal = 16303660ull * 1024;

TEST(NodeInfoTreeV1, Target) {
  auto t = discover_target(fixture_roots("tree_v1"), 31337);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->pid, 31337);
  EXPECT_EQ(t->uid, 1000u);
  EXPECT_EQ(t->slurm_job, std::optional<std::string>("42"));
}

TEST(NodeInfoTreeV1, CpusAndQuota) {
  auto n = discover_node_info(fixture_roots("tree_v1"), TargetInfo{31337, 1000, "42"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->num_system_cpus, 7);
  EXPECT_EQ(n->system_cpu_ids, (std::vector<int>{0, 1, 2, 3, 5, 6, 7}));
  EXPECT_EQ(n->cpu_handles, (std::vector<int>{2, 3, 5, 6}));
  ASSERT_TRUE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*n->cpu_quota, 1.5);
  EXPECT_DOUBLE_EQ(n->num_cpus, 1.5);
}

TEST(NodeInfoTreeV1, MemoryLimits) {
  auto n = discover_node_info(fixture_roots("tree_v1"), TargetInfo{31337, 1000, "42"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(n->mem_total_bytes, kV1MemTotal);
  EXPECT_EQ(limit(*n, Level::process), 1 * kGiB);
  EXPECT_EQ(source(*n, Level::process), "RLIMIT_AS");
  EXPECT_EQ(limit(*n, Level::slurm), 2 * kGiB);
  EXPECT_EQ(source(*n, Level::slurm), "cgroup v1 memory.limit_in_bytes (/slurm/uid_1000/job_42)");
  EXPECT_EQ(limit(*n, Level::user), kV1MemTotal);
  EXPECT_EQ(source(*n, Level::user), "MemTotal");
  EXPECT_EQ(limit(*n, Level::system), kV1MemTotal);
  EXPECT_EQ(source(*n, Level::system), "MemTotal");
}

TEST_F(NodeInfoScratch, V1CgroupLimitWhenAddressSpaceIsUnlimited) {
  copy_tree("tree_v1");
  fs::copy_file(fs::path(SONDE_FIXTURES_DIR) / "proc_pid_limits_unlimited.txt",
                dir_ / "proc/31337/limits", fs::copy_options::overwrite_existing);
  auto n = discover_node_info(roots(), TargetInfo{31337, 1000, "42"});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::process), 2 * kGiB);
  EXPECT_EQ(source(*n, Level::process), "cgroup v1 memory.limit_in_bytes (/slurm/uid_1000/job_42)");
}

// ---------------------------------------------------------------------------------------------
// Small trees built here: mount roots, missing required files.

class NodeInfoMountRoot : public NodeInfoScratch {
 protected:
  void SetUp() override {
    NodeInfoScratch::SetUp();
    write("proc/stat", "cpu  4 0 4 100\ncpu0 2 0 2 50\ncpu1 2 0 2 50\nintr 0\n");
    write("proc/meminfo", "MemTotal:        8000000 kB\nMemFree:         7000000 kB\n");
    write("proc/500/status", "Name:\tapp\nPPid:\t1\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t0-1\n");
    // A container whose cgroup namespace root is /kubepods/pod1: the mount shows that subtree.
    write("proc/self/mountinfo",
          "30 20 0:27 /kubepods/pod1 /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
    write("sys/fs/cgroup/memory.max", "536870912\n");
    write("sys/fs/cgroup/ctr/memory.max", "1073741824\n");
    write("sys/fs/cgroup/ctr/cpu.max", "50000 100000\n");
  }
};

TEST_F(NodeInfoMountRoot, MountRootIsStrippedAndItsOwnLimitCounts) {
  write("proc/500/cgroup", "0::/kubepods/pod1/ctr\n");
  auto n = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::process), 512 * kMiB);
  EXPECT_EQ(source(*n, Level::process), "cgroup v2 memory.max (/kubepods/pod1)");
  ASSERT_TRUE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(*n->cpu_quota, 0.5);
  EXPECT_DOUBLE_EQ(n->num_cpus, 0.5);
  EXPECT_EQ(n->cpu_handles, (std::vector<int>{0, 1}));
}

TEST_F(NodeInfoMountRoot, CgroupOutsideTheMountIsIgnored) {
  write("proc/500/cgroup", "0::/kubepods/pod2/ctr\n");
  auto n = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(limit(*n, Level::process), 8000000ull * 1024);
  EXPECT_EQ(source(*n, Level::process), "MemTotal");
  EXPECT_FALSE(n->cpu_quota.has_value());
  EXPECT_DOUBLE_EQ(n->num_cpus, 2.0);
}

TEST_F(NodeInfoMountRoot, MissingStatOrMeminfoIsAnError) {
  fs::remove(dir_ / "proc/meminfo");
  auto no_meminfo = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_FALSE(no_meminfo.ok());
  EXPECT_NE(no_meminfo.error().message.find("meminfo"), std::string::npos)
      << no_meminfo.error().message;
  write("proc/meminfo", "MemFree:  1 kB\n");
  auto no_total = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_FALSE(no_total.ok());
  EXPECT_EQ(no_total.error().code, Errc::parse);
  EXPECT_EQ(no_total.error().message,
            (dir_ / "proc/meminfo").string() + ": expected a non-zero 'MemTotal:' line");
  write("proc/meminfo", "MemTotal:  1000 kB\n");
  write("proc/stat", "cpu0 1 2 3 4\n");
  auto bad_stat = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_FALSE(bad_stat.ok());
  EXPECT_EQ(bad_stat.error().message,
            (dir_ / "proc/stat").string() + ": expected a 'cpu' line, found none");
  fs::remove(dir_ / "proc/stat");
  auto no_stat = discover_node_info(roots(), TargetInfo{500, 0, {}});
  ASSERT_FALSE(no_stat.ok());
  EXPECT_NE(no_stat.error().message.find((dir_ / "proc/stat").string()), std::string::npos)
      << no_stat.error().message;
}

TEST_F(NodeInfoMountRoot, UnreadableEnvironMeansNoSlurmJob) {
  write("proc/500/cgroup", "0::/kubepods/pod1/ctr\n");
  // A directory where environ should be: reading fails, as it does for another user's process.
  fs::create_directories(dir_ / "proc/500/environ");
  auto t = discover_target(roots(), 500);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->uid, 0u);
  EXPECT_FALSE(t->slurm_job.has_value());
}

// ---------------------------------------------------------------------------------------------
// This machine

TEST(NodeInfoRealProc, Smoke) {
  auto t = discover_target(Roots{}, 0);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->pid, 0);
  EXPECT_EQ(t->uid, static_cast<std::uint32_t>(::getuid()));
  const char* job = std::getenv("SLURM_JOB_ID");
  EXPECT_EQ(t->slurm_job.has_value(), job != nullptr && *job != '\0');

  auto self = discover_target(Roots{}, static_cast<int>(::getpid()));
  ASSERT_TRUE(self.ok()) << self.error().message;
  EXPECT_EQ(self->uid, t->uid);

  auto n = discover_node_info(Roots{}, *t);
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_FALSE(n->hostname.empty());
  EXPECT_FALSE(n->kernel.empty());
  EXPECT_EQ(n->num_system_cpus, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(n->system_cpu_ids.size(), static_cast<std::size_t>(n->num_system_cpus));

  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> affinity;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) affinity.push_back(c);
  EXPECT_EQ(n->cpu_handles, affinity);
  EXPECT_GT(n->num_cpus, 0.0);
  EXPECT_LE(n->num_cpus, static_cast<double>(affinity.size()));

  const auto phys = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                    static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_GT(n->mem_total_bytes, 0u);
  EXPECT_EQ(n->mem_total_bytes, phys);
  for (Level l : kAllLevels) {
    EXPECT_GT(limit(*n, l), 0u) << level_name(l);
    EXPECT_LE(limit(*n, l), n->mem_total_bytes) << level_name(l);
    EXPECT_FALSE(source(*n, l).empty()) << level_name(l);
  }
  EXPECT_EQ(source(*n, Level::system), "MemTotal");
}

}  // namespace
}  // namespace sonde
