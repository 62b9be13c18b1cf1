// core/process_table: per process of a level, its CPU time, peak memory, I/O and lifetime from
// the scanner's samples, the top ones by CPU time and the rest folded.
#include "core/process_table.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace sonde {
namespace {

namespace fs = std::filesystem;

PidSample sample(int pid, std::uint64_t start, const char* comm, double cpu_delta,
                 std::uint64_t pss, std::uint64_t read_delta = 0) {
  PidSample p;
  p.pid = pid;
  p.ppid = 1;
  p.starttime_ticks = start;
  p.set_comm(comm);
  p.cpu_delta_s = cpu_delta;
  p.pss_bytes = pss;
  p.rss_bytes = pss * 2;
  p.io_valid = true;
  p.io_delta.read_bytes = read_delta;
  return p;
}

ProcSnapshot snapshot(std::vector<PidSample> pids) {
  ProcSnapshot s;
  s.pids = std::move(pids);
  for (std::uint32_t i = 0; i < s.pids.size(); ++i)
    s.members[level_index(Level::process)].push_back(i);
  return s;
}

class ProcessTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("sonde-process-table-" + std::to_string(::getpid()));
    fs::create_directories(root_ / "10");
    std::ofstream(root_ / "10" / "cmdline") << std::string("python3\0train.py\0--epochs\0", 26);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(ProcessTableTest, SumsCpuKeepsPeaksAndOrdersByCpu) {
  ProcessTable t(root_.string());
  t.add(snapshot({sample(10, 100, "python3", 0.5, 100 << 20, 4096),
                  sample(11, 101, "gzip", 0.1, 10 << 20)}),
        Level::process, 0.1);
  t.add(snapshot({sample(10, 100, "python3", 0.5, 300 << 20, 4096),
                  sample(11, 101, "gzip", 0.9, 5 << 20)}),
        Level::process, 0.2);
  t.add(snapshot({sample(10, 100, "python3", 0.2, 200 << 20)}), Level::process, 0.3);
  const nlohmann::json j = t.json();
  ASSERT_EQ(j.at("count"), 2);
  EXPECT_DOUBLE_EQ(j.at("cpu_s_sum").get<double>(), 2.2);
  const auto& rows = j.at("processes");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("pid"), 10);
  EXPECT_DOUBLE_EQ(rows[0].at("cpu_s").get<double>(), 1.2);
  EXPECT_DOUBLE_EQ(rows[0].at("memory_peak_gib").get<double>(), 300.0 / 1024);
  EXPECT_DOUBLE_EQ(rows[0].at("rss_peak_gib").get<double>(), 600.0 / 1024);
  EXPECT_DOUBLE_EQ(rows[0].at("read_bytes").get<double>(), 8192);
  EXPECT_EQ(rows[0].at("command"), "python3 train.py --epochs");
  EXPECT_DOUBLE_EQ(rows[0].at("first_s").get<double>(), 0.1);
  EXPECT_DOUBLE_EQ(rows[0].at("last_s").get<double>(), 0.3);
  EXPECT_EQ(rows[0].at("alive"), true);
  // gzip: no cmdline file in the fixture (gone): its comm in brackets; not seen at the last tick.
  EXPECT_EQ(rows[1].at("command"), "[gzip]");
  EXPECT_DOUBLE_EQ(rows[1].at("cpu_s").get<double>(), 1.0);
  EXPECT_EQ(rows[1].at("alive"), false);
  EXPECT_TRUE(j.at("others").is_null());
}

TEST_F(ProcessTableTest, AnExecNamesWhatTheProcessBecame) {
  ProcessTable t(root_.string());
  std::ofstream(root_ / "10" / "cmdline") << std::string("bash\0shim\0", 10);
  t.add(snapshot({sample(10, 100, "bash", 0.1, 1)}), Level::process, 0.1);
  std::ofstream(root_ / "10" / "cmdline") << std::string("python3\0x.py\0", 13);
  t.add(snapshot({sample(10, 100, "python3", 0.5, 1)}), Level::process, 0.2);
  const nlohmann::json j = t.json();
  ASSERT_EQ(j.at("count"), 1);
  EXPECT_EQ(j.at("processes")[0].at("command"), "python3 x.py");
  EXPECT_EQ(j.at("processes")[0].at("comm"), "python3");
  EXPECT_DOUBLE_EQ(j.at("processes")[0].at("cpu_s").get<double>(), 0.6);
}

TEST_F(ProcessTableTest, PidReusedIsAnotherProcess) {
  ProcessTable t(root_.string());
  t.add(snapshot({sample(10, 100, "a", 0.5, 1)}), Level::process, 0.1);
  t.add(snapshot({sample(10, 200, "b", 0.25, 1)}), Level::process, 0.2);
  EXPECT_EQ(t.json().at("count"), 2);
}

TEST_F(ProcessTableTest, RestFoldedAndUntrackedCounted) {
  ProcessTable t(root_.string(), /*max_tracked=*/3);
  std::vector<PidSample> pids;
  for (int i = 0; i < 5; ++i) pids.push_back(sample(100 + i, 1, "w", 0.1 * (i + 1), 1 << 20));
  t.add(snapshot(pids), Level::process, 0.1);
  const nlohmann::json j = t.json(/*top=*/2);
  EXPECT_EQ(j.at("count"), 5);
  ASSERT_EQ(j.at("processes").size(), 2u);
  EXPECT_EQ(j.at("processes")[0].at("pid"), 102);  // the most CPU of the three tracked
  const auto& others = j.at("others");
  EXPECT_EQ(others.at("count"), 3);  // one tracked beyond the top two, two never tracked
  EXPECT_NEAR(others.at("cpu_s").get<double>(), 0.1 + 0.4 + 0.5, 1e-9);
  EXPECT_NEAR(j.at("cpu_s_sum").get<double>(), 1.5, 1e-9);
}

TEST_F(ProcessTableTest, OtherLevelsAreNotCounted) {
  ProcessTable t(root_.string());
  ProcSnapshot s = snapshot({sample(10, 100, "python3", 0.5, 1)});
  s.members[level_index(Level::process)].clear();
  s.members[level_index(Level::user)].push_back(0);
  t.add(s, Level::process, 0.1);
  EXPECT_EQ(t.json().at("count"), 0);
}

}  // namespace
}  // namespace sonde
