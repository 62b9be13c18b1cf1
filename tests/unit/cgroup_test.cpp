// The cgroup accounts (core/cgroup.hpp) on captured control files: v1 (this machine kind's
// cpuacct and memory hierarchies) and v2, and a reading of a fixture group's directory.
#include "core/cgroup.hpp"
#include "support/built_paths.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace sonde::cgroup {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(SONDE_FIXTURES_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Cgroup, V1UsagePerCpuInSeconds) {
  const auto v = parse_usage_percpu(fixture("cgroup_v1_cpuacct_usage_percpu.txt"));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_DOUBLE_EQ(v[0], 22263.18919676);
  EXPECT_DOUBLE_EQ(v[1], 23017.721786728);
  EXPECT_TRUE(parse_usage_percpu("12 x 4\n").empty()) << "a malformed file gives no figures";
  EXPECT_TRUE(parse_usage_percpu("").empty());
}

TEST(Cgroup, SingleNumbers) {
  EXPECT_EQ(parse_single("123456789\n"), 123456789u);
  EXPECT_EQ(parse_single(" 7 "), 7u);
  EXPECT_FALSE(parse_single("max\n"));
  EXPECT_FALSE(parse_single("-1"));
  EXPECT_FALSE(parse_single(""));
}

TEST(Cgroup, KeyValueFilesMatchWholeKeys) {
  const std::string v2 = fixture("cgroup_v2_cpu_stat.txt");
  EXPECT_EQ(stat_value(v2, "usage_usec"), 45025632u);
  EXPECT_EQ(stat_value(v2, "system_usec"), 10122880u);
  EXPECT_FALSE(stat_value(v2, "usage"));  // a prefix of a key is not the key
  EXPECT_FALSE(stat_value(v2, "missing"));
  // "rss" is its own line in v1's memory.stat, next to rss_huge and total_rss.
  const std::string v1 = fixture("cgroup_v1_memory_stat.txt");
  EXPECT_EQ(stat_value(v1, "rss"), 792166400u);
  EXPECT_EQ(stat_value(v1, "total_rss"), 792166400u);
  EXPECT_EQ(stat_value(v1, "rss_huge"), 0u);
}

TEST(Cgroup, MappedMemoryIsAnonymousPlusMappedFilesNotThePageCache) {
  // v1: total_rss + total_mapped_file; the 2.1 GiB of page cache (total_cache) is not in it.
  EXPECT_EQ(mapped_memory(fixture("cgroup_v1_memory_stat.txt"), 1), 792166400u + 183341056u);
  // v2: anon + file_mapped.
  EXPECT_EQ(mapped_memory(fixture("cgroup_v2_memory_stat.txt"), 2), 734003200u + 102612992u);
  // A file of the other version's shape has none of the keys: no figure, never 0.
  EXPECT_FALSE(mapped_memory(fixture("cgroup_v2_memory_stat.txt"), 1));
  EXPECT_FALSE(mapped_memory("", 2));
}

// v1 blkio.throttle.io_service_bytes as this machine kind writes it (one device; captured from a
// group with a throttle limit set, after reading 8 MiB with a cold cache and writing 3 MiB with
// fsync): Read and Write count, the per-device Total and the last line's Total repeat them.
TEST(Cgroup, V1BlkioServiceBytesReadAndWriteOnce) {
  const auto one =
      parse_blkio_service_bytes(fixture("cgroup_v1_blkio_throttle_io_service_bytes.txt"));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->read_bytes, 11071488u);
  EXPECT_EQ(one->write_bytes, 3153920u);
  // Two devices: each one's rows summed, no Total counted.
  const auto two = parse_blkio_service_bytes(fixture("cgroup_v1_blkio_two_devices.txt"));
  ASSERT_TRUE(two);
  EXPECT_EQ(two->read_bytes, 11071488u + 4096000u);
  EXPECT_EQ(two->write_bytes, 3153920u + 1048576u);
  // A group with no bio on any device (or no throttle limit on this kernel): "Total 0".
  const auto none = parse_blkio_service_bytes("Total 0\n");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->read_bytes + none->write_bytes, 0u);
  EXPECT_FALSE(parse_blkio_service_bytes("8:0 Read many\n"));
  EXPECT_FALSE(parse_blkio_service_bytes("rbytes=1\n"));
}

TEST(Cgroup, V2IoStatSumsDevices) {
  const auto io = parse_io_stat(fixture("cgroup_v2_io_stat.txt"));
  ASSERT_TRUE(io);
  EXPECT_EQ(io->read_bytes, 11071488u + 4096000u);
  EXPECT_EQ(io->write_bytes, 3153920u + 1048576u);
  const auto empty = parse_io_stat("");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->read_bytes + empty->write_bytes, 0u);
  EXPECT_FALSE(parse_io_stat("8:0 rbytes=x\n"));
  EXPECT_FALSE(parse_io_stat("Total 0\n"));
}

TEST(Cgroup, ProcsListsEachPidOnce) {
  EXPECT_EQ(parse_procs("4242\n17\n"), (std::vector<int>{4242, 17}));
  EXPECT_EQ(parse_procs("9"), (std::vector<int>{9}));  // no newline at the end
  // What a group does not hold: blank lines, signs, text, zero, a number past int.
  EXPECT_EQ(parse_procs("\n-3\n12x\n0\n99999999999\n5\n"), (std::vector<int>{5}));
  EXPECT_TRUE(parse_procs("").empty());
  EXPECT_FALSE(member_pids("/nonexistent/cgroup/dir"));
}

TEST(Cgroup, ReadsAGroupsDirectory) {
  const fs::path dir =
      fs::temp_directory_path() / ("sonde-cgroup-test-" + std::to_string(::getpid()));
  fs::create_directories(dir / "cpuacct");
  fs::create_directories(dir / "memory");
  std::ofstream(dir / "cpuacct/cpuacct.usage") << "2500000000\n";
  std::ofstream(dir / "cpuacct/cpuacct.usage_percpu") << "2000000000 500000000 \n";
  std::ofstream(dir / "memory/memory.stat") << fixture("cgroup_v1_memory_stat.txt");
  std::ofstream(dir / "memory/memory.max_usage_in_bytes") << "3221225472\n";
  Group g;
  g.version = 1;
  g.cpu_dir = (dir / "cpuacct").string();
  g.memory_dir = (dir / "memory").string();
  const Reading r = read(g);
  EXPECT_EQ(r.cpu_s, 2.5);
  ASSERT_EQ(r.cpu_s_by_id.size(), 2u);
  EXPECT_DOUBLE_EQ(r.cpu_s_by_id[1], 0.5);
  EXPECT_EQ(r.memory_bytes, 792166400u + 183341056u);
  EXPECT_EQ(r.memory_peak_bytes, 3221225472u);

  std::ofstream(dir / "cpu.stat") << fixture("cgroup_v2_cpu_stat.txt");
  std::ofstream(dir / "memory.stat") << fixture("cgroup_v2_memory_stat.txt");
  Group v2;
  v2.version = 2;
  v2.cpu_dir = v2.memory_dir = dir.string();
  const Reading r2 = read(v2);
  EXPECT_DOUBLE_EQ(*r2.cpu_s, 45.025632);
  EXPECT_TRUE(r2.cpu_s_by_id.empty());
  EXPECT_EQ(r2.memory_bytes, 734003200u + 102612992u);
  EXPECT_FALSE(r2.memory_peak_bytes) << "memory.peak is not there";

  // A group whose files are gone (removed under sonde) reads as nothing, not as zero.
  fs::remove_all(dir);
  const Reading gone = read(g);
  EXPECT_FALSE(gone.cpu_s);
  EXPECT_FALSE(gone.memory_bytes);
}

}  // namespace
}  // namespace sonde::cgroup
