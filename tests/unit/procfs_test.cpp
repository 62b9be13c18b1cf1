// Parsers of src/core/procfs.hpp on captured /proc and /sys text, plus the file helpers of
// src/core/fs.hpp they are fed by.
#include "core/procfs.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/fs.hpp"
#include "support/built_paths.hpp"

namespace sonde::procfs {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(SONDE_FIXTURES_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing fixture " << name;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

constexpr std::uint64_t kGiB = 1024ull * 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// /proc/<pid>/stat

TEST(ProcfsPidStat, CommWithSpacesAndParentheses) {
  auto r = parse_pid_stat(fixture("proc_pid_stat_comm_parens.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->pid, 31015);
  EXPECT_EQ(r->comm, "(a) b) c");
  EXPECT_EQ(r->state, 'S');
  EXPECT_EQ(r->ppid, 31014);
  EXPECT_EQ(r->utime_ticks, 23u);
  EXPECT_EQ(r->stime_ticks, 27u);
  EXPECT_EQ(r->cutime_ticks, 15u);
  EXPECT_EQ(r->cstime_ticks, 20u);
  EXPECT_EQ(r->num_threads, 4);
  EXPECT_EQ(r->starttime_ticks, 74155u);
  EXPECT_EQ(r->rss_pages, 6113u);
  EXPECT_EQ(r->processor, 1);
}

TEST(ProcfsPidStat, KernelThread) {
  auto r = parse_pid_stat(fixture("proc_pid_stat_kthread.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->pid, 2);
  EXPECT_EQ(r->comm, "kthreadd");
  EXPECT_EQ(r->state, 'S');
  EXPECT_EQ(r->ppid, 0);
  EXPECT_EQ(r->num_threads, 1);
  EXPECT_EQ(r->starttime_ticks, 25u);
  EXPECT_EQ(r->rss_pages, 0u);
  EXPECT_EQ(r->processor, 0);
}

TEST(ProcfsPidStat, Zombie) {
  auto r = parse_pid_stat(fixture("proc_pid_stat_zombie.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->pid, 30243);
  EXPECT_EQ(r->comm, "defunct-child");
  EXPECT_EQ(r->state, 'Z');
  EXPECT_EQ(r->ppid, 30186);
  EXPECT_EQ(r->starttime_ticks, 65440u);
  EXPECT_EQ(r->rss_pages, 0u);
  EXPECT_EQ(r->processor, 1);
}

TEST(ProcfsPidStat, OrdinaryProcess) {
  auto r = parse_pid_stat(fixture("proc_pid_stat_cat.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->pid, 30244);
  EXPECT_EQ(r->comm, "cat");
  EXPECT_EQ(r->state, 'R');
  EXPECT_EQ(r->ppid, 30183);
  EXPECT_EQ(r->starttime_ticks, 65490u);
  EXPECT_EQ(r->rss_pages, 357u);
}

TEST(ProcfsPidStat, EmptyCommAndNoTrailingNewline) {
  auto r = parse_pid_stat("7 () R 1 7 7 0 -1 0 0 0 0 0 5 6 7 8 20 0 3 0 99 0 12");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->comm, "");
  EXPECT_EQ(r->utime_ticks, 5u);
  EXPECT_EQ(r->cstime_ticks, 8u);
  EXPECT_EQ(r->num_threads, 3);
  EXPECT_EQ(r->starttime_ticks, 99u);
  EXPECT_EQ(r->rss_pages, 12u);
  EXPECT_EQ(r->processor, -1) << "field 39 absent";
}

TEST(ProcfsPidStat, TruncatedLineIsAnErrorNamingTheCount) {
  auto r = parse_pid_stat("123 (bash) S 1 123 123 0 -1 4194560\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::parse);
  EXPECT_EQ(r.error().message,
            "/proc/123/stat: expected at least 22 fields after the command (through rss, field "
            "24), found 7");
}

TEST(ProcfsPidStat, MalformedInputs) {
  EXPECT_FALSE(parse_pid_stat("").ok());
  EXPECT_FALSE(parse_pid_stat("123 bash S 1").ok());
  EXPECT_FALSE(parse_pid_stat("12x (bash) S 1 2 3 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 9 0 1").ok());
  EXPECT_FALSE(parse_pid_stat(") 123 (").ok());
  auto bad_utime =
      parse_pid_stat("9 (x) S 1 9 9 0 -1 0 0 0 0 0 1a 2 3 4 20 0 1 0 9 0 1 18446744073709551615");
  ASSERT_FALSE(bad_utime.ok());
  EXPECT_EQ(bad_utime.error().code, Errc::parse);
  EXPECT_NE(bad_utime.error().message.find("field 14 (utime)"), std::string::npos)
      << bad_utime.error().message;
  auto bad_state = parse_pid_stat("9 (x) SS 1 9 9 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 9 0 1 5");
  ASSERT_FALSE(bad_state.ok());
  EXPECT_NE(bad_state.error().message.find("field 3 (state)"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// /proc/<pid>/io, /proc/<pid>/status

TEST(ProcfsPidIo, Captured) {
  auto r = parse_pid_io(fixture("proc_pid_io.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->rchar, 4194304u);
  EXPECT_EQ(r->wchar, 4194304u);
  EXPECT_EQ(r->syscr, 2u);
  EXPECT_EQ(r->syscw, 64u);
  EXPECT_EQ(r->read_bytes, 0u);
  EXPECT_EQ(r->write_bytes, 4202496u);
  EXPECT_EQ(r->cancelled_write_bytes, 0u);
}

TEST(ProcfsPidIo, MissingOrMalformedKey) {
  auto missing = parse_pid_io("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message, "/proc/<pid>/io: expected a 'write_bytes:' line, found none");
  auto bad = parse_pid_io("rchar: 1\nwchar: lots\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("line 2"), std::string::npos) << bad.error().message;
  EXPECT_FALSE(parse_pid_io("rchar 1\n").ok());
}

TEST(ProcfsPidStatus, Captured) {
  auto r = parse_pid_status(fixture("proc_pid_status.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->name, "worker");
  EXPECT_EQ(r->ppid, 30421);
  EXPECT_EQ(r->uid_real, 1000u);
  EXPECT_EQ(r->uid_effective, 1001u);
  EXPECT_EQ(r->cpus_allowed, (std::vector<int>{0, 1}));
  EXPECT_EQ(r->ns_pids, (std::vector<int>{30423}));
}

// A process in a container's PID namespace: its pid here, then in the container (sonde top).
TEST(ProcfsPidStatus, NsPidOfAProcessInAContainer) {
  auto r = parse_pid_status("Name:\tsh\nPPid:\t9\nUid:\t0\t0\t0\t0\nNSpid:\t4242\t7\t1\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->ns_pids, (std::vector<int>{4242, 7, 1}));
  EXPECT_FALSE(parse_pid_status("Name:\tsh\nPPid:\t9\nUid:\t0\t0\t0\t0\nNSpid:\t4242\tx\n").ok());
}

TEST(ProcfsPidStatus, NameWithSpacesAndNoCpuList) {
  auto r =
      parse_pid_status("Name:\tWeb Content\nState:\tS (sleeping)\nPPid:\t1\nUid:\t5\t6\t7\t8\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->name, "Web Content");
  EXPECT_EQ(r->ppid, 1);
  EXPECT_EQ(r->uid_real, 5u);
  EXPECT_EQ(r->uid_effective, 6u);
  EXPECT_TRUE(r->cpus_allowed.empty());
}

TEST(ProcfsPidStatus, Malformed) {
  auto no_uid = parse_pid_status("Name:\tx\nPPid:\t1\n");
  ASSERT_FALSE(no_uid.ok());
  EXPECT_EQ(no_uid.error().message, "/proc/<pid>/status: expected a 'Uid:' line, found none");
  EXPECT_FALSE(parse_pid_status("Name:\tx\nPPid:\tone\nUid:\t0\t0\t0\t0\n").ok());
  EXPECT_FALSE(parse_pid_status("Name:\tx\nPPid:\t1\nUid:\t0\n").ok());
  EXPECT_FALSE(
      parse_pid_status("Name:\tx\nPPid:\t1\nUid:\t0\t0\t0\t0\nCpus_allowed_list:\t3-1\n").ok());
}

// ---------------------------------------------------------------------------------------------
// /proc/stat

TEST(ProcfsProcStat, TwoCpusCaptured) {
  auto r = parse_proc_stat(fixture("proc_stat_2cpu.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->cpu_ids, (std::vector<int>{0, 1}));
  ASSERT_EQ(r->per_cpu.size(), 2u);
  EXPECT_EQ(r->total.user, 4173u);
  EXPECT_EQ(r->total.system, 3921u);
  EXPECT_EQ(r->total.idle, 121857u);
  EXPECT_EQ(r->total.iowait, 406u);
  EXPECT_EQ(r->total.softirq, 52u);
  EXPECT_EQ(r->total.steal, 129u);
  EXPECT_EQ(r->total.busy(), 4173u + 3921u + 52u + 129u);
  EXPECT_EQ(r->per_cpu[1].user, 2653u);
  EXPECT_EQ(r->per_cpu[1].idle, 60235u);
  EXPECT_EQ(r->per_cpu[1].steal, 65u);
}

TEST(ProcfsProcStat, ManyCpus) {
  auto r = parse_proc_stat(fixture("proc_stat_256cpu.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->cpu_ids.size(), 256u);
  ASSERT_EQ(r->per_cpu.size(), 256u);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(r->cpu_ids[i], i);
  EXPECT_EQ(r->total.user, 437902196u);
  EXPECT_EQ(r->total.idle, 1641805170u);
  EXPECT_EQ(r->total.iowait, 3936090u);
  EXPECT_EQ(r->per_cpu[0].user, 648839u);
  EXPECT_EQ(r->per_cpu[0].softirq, 15688u);
  EXPECT_EQ(r->per_cpu[255].user, 582825u);
  EXPECT_EQ(r->per_cpu[255].nice, 400u);
  EXPECT_EQ(r->per_cpu[255].system, 166521u);
  EXPECT_EQ(r->per_cpu[255].idle, 7854207u);
  std::uint64_t user_sum = 0;
  for (const auto& c : r->per_cpu) user_sum += c.user;
  EXPECT_EQ(user_sum, r->total.user);
}

TEST(ProcfsProcStat, OfflineCpusLeaveGaps) {
  auto r = parse_proc_stat(fixture("proc_stat_offline.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->cpu_ids, (std::vector<int>{0, 1, 3, 4, 6, 7}));
  ASSERT_EQ(r->per_cpu.size(), 6u);
  EXPECT_EQ(r->per_cpu[2].user, 20036u) << "cpu3 is the third line";
  EXPECT_EQ(r->per_cpu[2].iowait, 21560u);
  EXPECT_EQ(r->total.user, 480348u);
}

TEST(ProcfsProcStat, OldKernelFewerColumns) {
  // 2.6.0-era lines: user nice system idle iowait irq softirq (7 columns), and 2.4's 4 columns.
  auto r = parse_proc_stat("cpu  10 20 30 40 50 60 70\ncpu0 1 2 3 4\nintr 5\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->total.softirq, 70u);
  EXPECT_EQ(r->total.steal, 0u);
  EXPECT_EQ(r->total.guest_nice, 0u);
  ASSERT_EQ(r->per_cpu.size(), 1u);
  EXPECT_EQ(r->per_cpu[0].idle, 4u);
  EXPECT_EQ(r->per_cpu[0].iowait, 0u);
}

TEST(ProcfsProcStat, Malformed) {
  auto no_total = parse_proc_stat("cpu0 1 2 3 4\n");
  ASSERT_FALSE(no_total.ok());
  EXPECT_EQ(no_total.error().message, "/proc/stat: expected a 'cpu' line, found none");
  auto short_line = parse_proc_stat("cpu  1 2 3 4\ncpu0 1 2\n");
  ASSERT_FALSE(short_line.ok());
  EXPECT_EQ(short_line.error().message,
            "/proc/stat: line 2: expected at least 4 numbers (user nice system idle) after "
            "'cpu0', found 2");
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4\ncpuX 1 2 3 4\n").ok());
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 x 4\n").ok());
  EXPECT_FALSE(parse_proc_stat("").ok());
}

// ---------------------------------------------------------------------------------------------
// /proc/meminfo, /proc/diskstats, /proc/net/dev

TEST(ProcfsMeminfo, CapturedInBytes) {
  auto r = parse_meminfo(fixture("proc_meminfo.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->total_bytes, 24683584ull * 1024);
  EXPECT_EQ(r->free_bytes, 23654880ull * 1024);
  EXPECT_EQ(r->available_bytes, 23822808ull * 1024);
  EXPECT_EQ(r->swap_total_bytes, 0u);
  EXPECT_EQ(r->swap_free_bytes, 0u);
}

TEST(ProcfsMeminfo, MappedPages) {
  auto r = parse_meminfo(fixture("proc_meminfo.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->anon_pages_bytes, 533504ull * 1024);
  EXPECT_EQ(r->mapped_bytes, 41112ull * 1024);
}

TEST(ProcfsSmapsRollup, PssAndRss) {
  // Captured from Linux 6.1.
  const char* text =
      "55d0c8a2e000-7ffd1a5f3000 ---p 00000000 00:00 0                          [rollup]\n"
      "Rss:                3884 kB\n"
      "Pss:                 702 kB\n"
      "Pss_Dirty:           180 kB\n"
      "Pss_Anon:            168 kB\n"
      "Pss_File:            534 kB\n"
      "Pss_Shmem:             0 kB\n"
      "Shared_Clean:       3400 kB\n"
      "Swap:                  0 kB\n"
      "SwapPss:               0 kB\n"
      "Locked:                0 kB\n";
  auto r = parse_pid_smaps_rollup(text);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->pss_bytes, 702u * 1024);
  EXPECT_EQ(r->rss_bytes, 3884u * 1024);
  // A process without an address space (zombie, kernel thread): empty.
  EXPECT_FALSE(parse_pid_smaps_rollup("").ok());
  EXPECT_FALSE(parse_pid_smaps_rollup("Pss: lots kB\n").ok());
  EXPECT_FALSE(parse_pid_smaps_rollup("Pss: 18446744073709551615 kB\n").ok());
}

TEST(ProcfsMeminfo, AbsentFieldsAreNullopt) {
  // Kernels before 3.14 have no MemAvailable.
  auto r = parse_meminfo("MemTotal:  1000 kB\nMemFree:  500 kB\nHugePages_Total:  0\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->total_bytes, 1024000u);
  EXPECT_EQ(r->free_bytes, 512000u);
  EXPECT_FALSE(r->available_bytes.has_value());
  EXPECT_FALSE(r->swap_total_bytes.has_value());
}

TEST(ProcfsMeminfo, Malformed) {
  EXPECT_FALSE(parse_meminfo("MemTotal:  lots kB\n").ok());
  EXPECT_FALSE(parse_meminfo("MemTotal:  1000 MB\n").ok());
  auto no_colon = parse_meminfo("MemTotal:  1 kB\nMemFree 2 kB\n");
  ASSERT_FALSE(no_colon.ok());
  EXPECT_NE(no_colon.error().message.find("/proc/meminfo: line 2"), std::string::npos);
}

TEST(ProcfsDiskstats, Captured) {
  auto r = parse_diskstats(fixture("proc_diskstats.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 10u);
  std::vector<std::string> names;
  for (const auto& d : *r) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"loop0", "loop1", "vda", "vda1", "vda14", "vda15",
                                             "nvme0n1", "nvme0n1p1", "dm-0", "sr0"}));
  const DiskStat& vda = (*r)[2];
  EXPECT_EQ(vda.major, 252u);
  EXPECT_EQ(vda.minor, 0u);
  EXPECT_EQ(vda.reads_completed, 498213u);
  EXPECT_EQ(vda.sectors_read, 38462914u);
  EXPECT_EQ(vda.writes_completed, 1302844u);
  EXPECT_EQ(vda.sectors_written, 61873208u);
  const DiskStat& dm = (*r)[8];
  EXPECT_EQ(dm.major, 253u);
  EXPECT_EQ(dm.writes_completed, 6561051u);
  EXPECT_EQ((*r)[5].minor, 15u);
}

TEST(ProcfsDiskstats, OldPartitionFormatAndErrors) {
  auto r = parse_diskstats("   8    1 sda1 100 200 300 400\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].reads_completed, 100u);
  EXPECT_EQ((*r)[0].sectors_read, 200u);
  EXPECT_EQ((*r)[0].writes_completed, 300u);
  EXPECT_EQ((*r)[0].sectors_written, 400u);
  EXPECT_FALSE(parse_diskstats("8 0 sda 1 2 3 4 5\n").ok());
  EXPECT_FALSE(parse_diskstats("8 x sda 1 2 3 4 5 6 7 8 9 10 11\n").ok());
  EXPECT_FALSE(parse_diskstats("8 0 sda 1 2 3 x 5 6 7 8 9 10 11\n").ok());
  auto empty = parse_diskstats("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ProcfsNetDev, Captured) {
  auto r = parse_net_dev(fixture("proc_net_dev.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].iface, "lo");
  EXPECT_EQ((*r)[0].rx_bytes, 3267u);
  EXPECT_EQ((*r)[0].rx_packets, 29u);
  EXPECT_EQ((*r)[3].iface, "eth0");
  EXPECT_EQ((*r)[3].rx_bytes, 22003180u);
  EXPECT_EQ((*r)[3].rx_packets, 517u);
  EXPECT_EQ((*r)[3].tx_bytes, 28919u);
  EXPECT_EQ((*r)[3].tx_packets, 345u);
}

TEST(ProcfsNetDev, CounterTouchingTheColonAndErrors) {
  auto r = parse_net_dev("  eth1:123456789012 7 0 0 0 0 0 0 55 6 0 0 0 0 0 0\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].iface, "eth1");
  EXPECT_EQ((*r)[0].rx_bytes, 123456789012u);
  EXPECT_EQ((*r)[0].tx_bytes, 55u);
  EXPECT_EQ((*r)[0].tx_packets, 6u);
  EXPECT_FALSE(parse_net_dev("  eth1: 1 2 3\n").ok());
  EXPECT_FALSE(parse_net_dev("  eth1 1 2 3 4 5 6 7 8 9 10\n").ok());
  EXPECT_FALSE(parse_net_dev("  eth1: 1 2 3 4 5 6 7 8 x 10\n").ok());
}

// ---------------------------------------------------------------------------------------------
// CPU lists, cgroups, limits

TEST(ProcfsCpuList, Forms) {
  EXPECT_EQ(*parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(*parse_cpu_list("5"), (std::vector<int>{5}));
  EXPECT_EQ(*parse_cpu_list("\t0-1\n"), (std::vector<int>{0, 1}));
  EXPECT_TRUE(parse_cpu_list("\n")->empty()) << "an empty cpuset.cpus is valid";
  auto big = parse_cpu_list("0-511");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 512u);
  EXPECT_EQ(big->back(), 511);
}

TEST(ProcfsCpuList, Malformed) {
  EXPECT_FALSE(parse_cpu_list("3-1").ok());
  EXPECT_FALSE(parse_cpu_list("a").ok());
  EXPECT_FALSE(parse_cpu_list("1,,2").ok());
  EXPECT_FALSE(parse_cpu_list("-1").ok());
  EXPECT_FALSE(parse_cpu_list("0-4294967296").ok());
  EXPECT_FALSE(parse_cpu_list("0-99999999").ok()) << "would expand to 100M entries";
}

TEST(ProcfsPidCgroup, V1) {
  auto r = parse_pid_cgroup(fixture("proc_pid_cgroup_v1.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 11u);
  const CgroupEntry& mem = (*r)[7];
  EXPECT_EQ(mem.hierarchy_id, 4);
  EXPECT_EQ(mem.controllers, (std::vector<std::string>{"memory"}));
  EXPECT_EQ(mem.path, "/slurm/uid_1000/job_42/step_0/task_0");
  EXPECT_EQ((*r)[8].controllers, (std::vector<std::string>{"cpuacct", "cpu"}));
  EXPECT_EQ((*r)[10].controllers, (std::vector<std::string>{"name=systemd"}));
  EXPECT_EQ((*r)[10].path, "/system.slice/slurmd.service");
}

TEST(ProcfsPidCgroup, V2AndHybrid) {
  auto v2 = parse_pid_cgroup(fixture("proc_pid_cgroup_v2.txt"));
  ASSERT_TRUE(v2.ok()) << v2.error().message;
  ASSERT_EQ(v2->size(), 1u);
  EXPECT_EQ((*v2)[0].hierarchy_id, 0);
  EXPECT_TRUE((*v2)[0].controllers.empty());
  EXPECT_EQ((*v2)[0].path, "/system.slice/slurmstepd.scope/job_77/step_0/user/task_0");

  auto hy = parse_pid_cgroup(fixture("proc_pid_cgroup_hybrid.txt"));
  ASSERT_TRUE(hy.ok()) << hy.error().message;
  ASSERT_EQ(hy->size(), 10u);
  EXPECT_EQ((*hy)[3].controllers, (std::vector<std::string>{"memory"}));
  EXPECT_EQ((*hy)[3].path, "/user.slice/user-1000.slice/user@1000.service");
  EXPECT_EQ(hy->back().hierarchy_id, 0);
  EXPECT_TRUE(hy->back().controllers.empty());
  EXPECT_EQ(hy->back().path,
            "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service");
}

TEST(ProcfsPidCgroup, PathWithColonAndMalformed) {
  auto r = parse_pid_cgroup("0::/a:b/c\n");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].path, "/a:b/c");
  EXPECT_FALSE(parse_pid_cgroup("0:/user.slice\n").ok());
  EXPECT_FALSE(parse_pid_cgroup("x::/\n").ok());
}

TEST(ProcfsCgroupMounts, PureV2) {
  auto r = parse_cgroup_mounts(fixture("proc_self_mountinfo_v2.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_TRUE((*r)[0].v2);
  EXPECT_TRUE((*r)[0].controllers.empty());
  EXPECT_EQ((*r)[0].root, "/");
  EXPECT_EQ((*r)[0].mount_point, "/sys/fs/cgroup");
}

TEST(ProcfsCgroupMounts, Hybrid) {
  auto r = parse_cgroup_mounts(fixture("proc_self_mountinfo_hybrid.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 9u);
  EXPECT_TRUE((*r)[0].v2);
  EXPECT_EQ((*r)[0].mount_point, "/sys/fs/cgroup/unified");
  EXPECT_FALSE((*r)[1].v2);
  EXPECT_EQ((*r)[1].controllers, (std::vector<std::string>{"name=systemd"}))
      << "xattr is a mount flag, not a controller";
  EXPECT_EQ((*r)[2].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ((*r)[2].mount_point, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ((*r)[3].controllers, (std::vector<std::string>{"memory"}));
  EXPECT_EQ((*r)[3].root, "/");
  EXPECT_EQ((*r)[4].controllers, (std::vector<std::string>{"cpuset"}))
      << "clone_children is a flag";
}

TEST(ProcfsCgroupMounts, V1WithReleaseAgent) {
  auto r = parse_cgroup_mounts(fixture("proc_self_mountinfo_v1.txt"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 11u);
  EXPECT_EQ((*r)[0].controllers, (std::vector<std::string>{"name=systemd"}));
  EXPECT_EQ((*r)[3].controllers, (std::vector<std::string>{"cpuacct", "cpu"}));
  for (const auto& m : *r) EXPECT_FALSE(m.v2);
}

TEST(ProcfsCgroupMounts, EscapedPathsAndNonRootMount) {
  auto r = parse_cgroup_mounts(
      "100 99 0:40 /kubepods/pod\\040a /host\\134cg rw - cgroup2 cgroup2 rw\n"
      "101 99 0:41 / /x rw shared:1 master:2 - cgroup cgroup rw,memory\n");
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].root, "/kubepods/pod a");
  EXPECT_EQ((*r)[0].mount_point, "/host\\cg");
  EXPECT_EQ((*r)[1].controllers, (std::vector<std::string>{"memory"}));
}

TEST(ProcfsCgroupMounts, Malformed) {
  auto r = parse_cgroup_mounts("22 28 0:21 / /sys rw - sysfs sysfs rw\n31 22 0:26 / /x rw\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::parse);
  EXPECT_NE(r.error().message.find("/proc/self/mountinfo: line 2"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(parse_cgroup_mounts("1 2 3 4 5 6 - cgroup2\n").ok());
}

TEST(ProcfsCpuMax, Values) {
  auto limited = parse_cpu_max(fixture("cgroup_cpu_max_limited.txt"));
  ASSERT_TRUE(limited.ok()) << limited.error().message;
  ASSERT_TRUE(limited->has_value());
  EXPECT_DOUBLE_EQ(**limited, 1.5);
  auto unlimited = parse_cpu_max(fixture("cgroup_cpu_max_unlimited.txt"));
  ASSERT_TRUE(unlimited.ok());
  EXPECT_FALSE(unlimited->has_value());
  EXPECT_DOUBLE_EQ(**parse_cpu_max("50000 100000"), 0.5);
  EXPECT_DOUBLE_EQ(**parse_cpu_max("200000 100000\n"), 2.0);
}

TEST(ProcfsCpuMax, Malformed) {
  EXPECT_FALSE(parse_cpu_max("").ok());
  EXPECT_FALSE(parse_cpu_max("150000").ok());
  EXPECT_FALSE(parse_cpu_max("150000 0").ok());
  EXPECT_FALSE(parse_cpu_max("x 100000").ok());
  EXPECT_FALSE(parse_cpu_max("1 2 3").ok());
  EXPECT_FALSE(parse_cpu_max("-1 100000").ok());
}

TEST(ProcfsMemoryLimit, Values) {
  EXPECT_EQ(*parse_memory_limit(fixture("cgroup_memory_max_limited.txt")),
            std::optional<std::uint64_t>(8 * kGiB));
  EXPECT_FALSE(parse_memory_limit(fixture("cgroup_memory_max_unlimited.txt"))->has_value());
  EXPECT_EQ(*parse_memory_limit(fixture("cgroup_v1_memory_limit_in_bytes_limited.txt")),
            std::optional<std::uint64_t>(2 * kGiB));
  EXPECT_FALSE(
      parse_memory_limit(fixture("cgroup_v1_memory_limit_in_bytes_unlimited.txt"))->has_value());
  // 64 KiB-page kernels round LONG_MAX down differently; anything >= 2^62 is "unlimited".
  EXPECT_FALSE(parse_memory_limit("9223372036854710272")->has_value());
  EXPECT_FALSE(parse_memory_limit("4611686018427387904")->has_value());
  EXPECT_EQ(*parse_memory_limit("4611686018427387903"),
            std::optional<std::uint64_t>(4611686018427387903ull));
  EXPECT_EQ(*parse_memory_limit("0\n"), std::optional<std::uint64_t>(0));
}

TEST(ProcfsMemoryLimit, Malformed) {
  EXPECT_FALSE(parse_memory_limit("").ok());
  EXPECT_FALSE(parse_memory_limit("-1").ok());
  EXPECT_FALSE(parse_memory_limit("8G").ok());
  EXPECT_FALSE(parse_memory_limit("maximum").ok());
}

TEST(ProcfsLimits, AddressSpace) {
  auto unlimited = parse_limits_address_space(fixture("proc_pid_limits_unlimited.txt"));
  ASSERT_TRUE(unlimited.ok()) << unlimited.error().message;
  EXPECT_FALSE(unlimited->has_value());
  auto limited = parse_limits_address_space(fixture("proc_pid_limits_as.txt"));
  ASSERT_TRUE(limited.ok()) << limited.error().message;
  EXPECT_EQ(*limited, std::optional<std::uint64_t>(1 * kGiB));
}

TEST(ProcfsLimits, Malformed) {
  auto none = parse_limits_address_space("Limit  Soft Limit  Hard Limit  Units\n");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().message,
            "/proc/<pid>/limits: expected a 'Max address space' line, found none");
  EXPECT_FALSE(parse_limits_address_space("Max address space  lots  unlimited  bytes\n").ok());
}

TEST(ProcfsEnviron, Values) {
  using namespace std::string_literals;
  const std::string env = "SLURM_JOB_ID=77\0SLURM_JOB_ID_X=1\0EMPTY=\0A=b=c\0SLURM_JOB_ID=99\0"s;
  EXPECT_EQ(environ_value(env, "SLURM_JOB_ID"), std::optional<std::string>("77"));
  EXPECT_EQ(environ_value(env, "EMPTY"), std::optional<std::string>(""));
  EXPECT_EQ(environ_value(env, "A"), std::optional<std::string>("b=c"));
  EXPECT_FALSE(environ_value(env, "SLURM_JOB").has_value());
  EXPECT_FALSE(environ_value(env, "").has_value());
  EXPECT_FALSE(environ_value("", "A").has_value());
  EXPECT_EQ(environ_value("NO_TRAILING_NUL=1"s, "NO_TRAILING_NUL"),
            std::optional<std::string>("1"));
}

TEST(ProcfsBlock, PhysicalLinks) {
  EXPECT_TRUE(is_physical_block_link("../devices/pci0000:00/0000:00:02.0/virtio1/block/vda"));
  EXPECT_TRUE(is_physical_block_link("../devices/pci0000:00/0000:00:1d.0/nvme/nvme0/nvme0n1"));
  EXPECT_FALSE(is_physical_block_link("../devices/virtual/block/loop0"));
  EXPECT_FALSE(is_physical_block_link("../devices/virtual/block/dm-0"));
  EXPECT_FALSE(is_physical_block_link(""));
}

// ---------------------------------------------------------------------------------------------
// fs.hpp: the readers the parsers are fed by

class ProcfsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sonde_procfs_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(ProcfsFile, ReadFileOfProcfsIgnoresZeroSize) {
  // /proc files report st_size 0; a reader trusting it would return nothing.
  auto r = read_file("/proc/self/stat");
  ASSERT_TRUE(r.ok()) << r.error().message;
  auto st = parse_pid_stat(*r);
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->pid, ::getpid());
}

TEST_F(ProcfsFile, ReadFileErrors) {
  auto missing = read_file((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::vanished);
  EXPECT_EQ(missing.error().message, (dir_ / "nope").string() + ": No such file or directory");
  auto is_dir = read_file(dir_.string());
  ASSERT_FALSE(is_dir.ok());
  EXPECT_EQ(is_dir.error().code, Errc::io);
}

TEST_F(ProcfsFile, WriteAtomicThenReadBack) {
  const std::string path = (dir_ / "out.json").string();
  std::string big(100000, 'x');
  big[54321] = 'y';
  ASSERT_TRUE(write_file_atomic(path, big).ok());
  ASSERT_TRUE(write_file_atomic(path, "second").ok()) << "replaces an existing file";
  auto r = read_file(path);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "second");
  ASSERT_TRUE(write_file_atomic(path, big).ok());
  EXPECT_EQ(*read_file(path), big);
  auto names = list_dir(dir_.string());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{"out.json"})) << "no temporary file left behind";
  EXPECT_FALSE(write_file_atomic((dir_ / "no" / "such" / "dir").string(), "x").ok());
}

TEST_F(ProcfsFile, PreadAllGrowsAndRereads) {
  const std::string path = (dir_ / "big").string();
  std::string content(10000, 'a');
  for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>('a' + i % 26);
  ASSERT_TRUE(write_file_atomic(path, content).ok());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string buf(16, '\0');
  long n = pread_all(fd, buf);
  ASSERT_EQ(n, 10000);
  EXPECT_EQ(buf.substr(0, 10000), content);
  n = pread_all(fd, buf);  // again from offset 0, with the grown buffer
  ASSERT_EQ(n, 10000);
  EXPECT_EQ(buf.substr(0, 10000), content);
  ::close(fd);
  EXPECT_EQ(pread_all(fd, buf), -EBADF);
}

TEST_F(ProcfsFile, PreadAllOnProcfs) {
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string buf;
  const long n = pread_all(fd, buf);
  ::close(fd);
  ASSERT_GT(n, 0);
  auto st = parse_pid_stat(std::string_view(buf.data(), static_cast<std::size_t>(n)));
  ASSERT_TRUE(st.ok()) << st.error().message;
  EXPECT_EQ(st->pid, ::getpid());
}

TEST_F(ProcfsFile, ListDirAndReadLink) {
  ASSERT_TRUE(write_file_atomic((dir_ / "b").string(), "1").ok());
  ASSERT_TRUE(write_file_atomic((dir_ / "a").string(), "2").ok());
  std::filesystem::create_symlink("../devices/virtual/block/loop0", dir_ / "loop0");
  auto names = list_dir(dir_.string());
  ASSERT_TRUE(names.ok());
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b", "loop0"}));
  auto target = read_link((dir_ / "loop0").string());
  ASSERT_TRUE(target.ok()) << target.error().message;
  EXPECT_EQ(*target, "../devices/virtual/block/loop0");
  const std::string long_target(1000, 'z');
  std::filesystem::create_symlink(long_target, dir_ / "long");
  EXPECT_EQ(*read_link((dir_ / "long").string()), long_target);
  EXPECT_FALSE(read_link((dir_ / "a").string()).ok());
  auto missing = list_dir((dir_ / "nope").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, Errc::vanished);
}

}  // namespace
}  // namespace sonde::procfs
