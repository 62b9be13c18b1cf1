// Reading run directories back (src/sinks/run_data.cpp) and summarising them.
#include "sinks/run_data.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace sonde {
namespace {
namespace fs = std::filesystem;
const std::string kBasic = std::string(SONDE_FIXTURES_DIR) + "/run_basic";

/// A copy of the fixture run directory that a test may damage.
class RunDirCopy {
 public:
  RunDirCopy() {
    dir_ = fs::temp_directory_path() /
           ("sonde_run_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::copy(kBasic, dir_);
  }
  ~RunDirCopy() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name, std::ios::binary | std::ios::trunc) << text;
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

TEST(RunData, ReadsManifestLevelsAndRows) {
  auto run = read_run_dir(kBasic);
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_EQ(run->source, kBasic);
  EXPECT_EQ(run->manifest["host"], "node01");
  ASSERT_EQ(run->levels.size(), 2u);
  EXPECT_EQ(run->levels[0].level, Level::process);
  EXPECT_EQ(run->levels[1].level, Level::system);
  const LevelTable* p = run->find(Level::process);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(run->find(Level::user), nullptr);
  EXPECT_EQ(p->columns.front(), "time");
  EXPECT_EQ(p->columns[1], "wallclock");
  ASSERT_EQ(p->rows.size(), 4u);
  const auto cpu = p->find("cpu_util_avg");
  ASSERT_TRUE(cpu);
  EXPECT_TRUE(std::isnan(p->rows[0][*cpu])) << "an empty field is NaN";
  EXPECT_DOUBLE_EQ(p->rows[1][*cpu], 90);
  EXPECT_DOUBLE_EQ(p->rows[3][1], 1700000004);
  EXPECT_FALSE(p->find("no_such_column"));
}

TEST(RunData, SkipsTruncatedLastLine) {
  auto run = read_run_dir(kBasic);
  ASSERT_TRUE(run) << run.error().message;
  const LevelTable* s = run->find(Level::system);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rows.size(), 4u) << "the fifth line has no newline: the run was killed mid-write";
}

TEST(RunData, ReadsCellHistoryWithQuoting) {
  auto run = read_run_dir(kBasic);
  ASSERT_TRUE(run) << run.error().message;
  ASSERT_EQ(run->cells.size(), 2u) << "the truncated third record is dropped";
  EXPECT_EQ(run->cells[0].index, 1);
  EXPECT_DOUBLE_EQ(run->cells[0].start_wallclock, 1700000001.5);
  EXPECT_DOUBLE_EQ(run->cells[0].end_wallclock, 1700000002.5);
  EXPECT_EQ(run->cells[0].code, "x = 1\nprint(\"hi, there\")");
  EXPECT_EQ(run->cells[1].code, "y = 2");
}

TEST(RunData, NoCellHistoryIsNoCells) {
  RunDirCopy d;
  fs::remove(d.path() + "/cell_history.csv");
  auto run = read_run_dir(d.path());
  ASSERT_TRUE(run) << run.error().message;
  EXPECT_TRUE(run->cells.empty());
}

TEST(RunData, MalformedFieldNamesFileAndLine) {
  RunDirCopy d;
  d.write("perf_process.csv", "time,wallclock,memory\n1,2,3\n2,3,abc\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_process.csv:3:"), std::string::npos)
      << run.error().message;
  EXPECT_NE(run.error().message.find("memory"), std::string::npos) << run.error().message;
}

TEST(RunData, WrongFieldCountIsAnError) {
  RunDirCopy d;
  d.write("perf_system.csv", "time,wallclock,memory\n1,2,3\n2,3\n4,5,6\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_system.csv:3:"), std::string::npos)
      << run.error().message;
}

TEST(RunData, BadHeaderIsAnError) {
  RunDirCopy d;
  d.write("perf_system.csv", "memory,time\n1,2\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_system.csv:1:"), std::string::npos)
      << run.error().message;
}

TEST(RunData, MalformedManifestNamesLine) {
  RunDirCopy d;
  d.write("manifest.json", "{\n  \"levels\": [\"process\"],\n  oops\n}\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("manifest.json:3:"), std::string::npos) << run.error().message;
}

TEST(RunData, MissingLevelFileAndMissingDirectory) {
  RunDirCopy d;
  fs::remove(d.path() + "/perf_system.csv");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_system.csv"), std::string::npos);
  auto none = read_run(d.path() + "/nope");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("not a run directory"), std::string::npos);
}

TEST(RunData, MalformedCellHistoryNamesLine) {
  RunDirCopy d;
  d.write("cell_history.csv",
          "index,start_wallclock,end_wallclock,code\n1,2,3,\"a\nb\"\nx,2,3,c\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("cell_history.csv:4:"), std::string::npos)
      << run.error().message;
}

TEST(RunData, SummaryPerLevelAndTags) {
  auto run = read_run_dir(kBasic);
  ASSERT_TRUE(run) << run.error().message;
  const auto s = summarize_run(*run);
  EXPECT_EQ(s["level"], "process");
  EXPECT_EQ(s["ticks"], 4);
  EXPECT_EQ(s["exit_status"], 0);
  EXPECT_DOUBLE_EQ(s["wall_s"].get<double>(), 4.5);
  const auto& g = s["levels"]["process"]["groups"];
  EXPECT_DOUBLE_EQ(g["cpu"]["mean"].get<double>(), 80);
  EXPECT_DOUBLE_EQ(g["cpu"]["min"].get<double>(), 70);
  EXPECT_DOUBLE_EQ(g["cpu"]["max"].get<double>(), 90);
  EXPECT_DOUBLE_EQ(g["cpu"]["limit"].get<double>(), 100);
  EXPECT_DOUBLE_EQ(g["cpu_cores"]["mean"].get<double>(), 3.2);
  EXPECT_DOUBLE_EQ(g["cpu_cores"]["limit"].get<double>(), 4);
  EXPECT_DOUBLE_EQ(g["memory"]["max"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(g["memory"]["limit"].get<double>(), 4);
  EXPECT_DOUBLE_EQ(g["gpu_util"]["mean"].get<double>(), 72.5);
  EXPECT_DOUBLE_EQ(g["gpu_mem"]["max"].get<double>(), 14);
  EXPECT_DOUBLE_EQ(g["gpu_mem"]["limit"].get<double>(), 16);
  EXPECT_FALSE(g.contains("gpu_band"));
  EXPECT_DOUBLE_EQ(s["read_bytes"].get<double>(), 4000);
  EXPECT_DOUBLE_EQ(s["written_bytes"].get<double>(), 2000);
  EXPECT_DOUBLE_EQ(s["net_sent_bytes"].get<double>(), 200) << "a NaN rate adds nothing";
  EXPECT_DOUBLE_EQ(s["net_recv_bytes"].get<double>(), 600);
  EXPECT_DOUBLE_EQ(s["memory_limit_gib"].get<double>(), 4);
  const auto sys = s["levels"]["system"]["groups"];
  EXPECT_DOUBLE_EQ(sys["cpu_cores"]["limit"].get<double>(), 8);
  EXPECT_DOUBLE_EQ(sys["memory"]["limit"].get<double>(), 16);
  EXPECT_EQ(s["tags"],
            nlohmann::json({"cpu-bound", "memory-bound", "gpu-util-bound", "gpu-memory-bound"}));
  EXPECT_EQ(s["levels"]["process"]["tags"], s["tags"]) << "every level has its tags";
}

TEST(RunData, SummaryOfAWindow) {
  auto run = read_run_dir(kBasic);
  ASSERT_TRUE(run) << run.error().message;
  const auto s = summarize_run(*run, std::make_pair(1700000002.0, 1700000003.0));
  EXPECT_EQ(s["ticks"], 2);
  EXPECT_DOUBLE_EQ(s["wall_s"].get<double>(), 1.0);
  const auto& g = s["levels"]["process"]["groups"];
  EXPECT_DOUBLE_EQ(g["cpu"]["mean"].get<double>(), 80);
  EXPECT_DOUBLE_EQ(g["memory"]["min"].get<double>(), 2);
  EXPECT_DOUBLE_EQ(s["read_bytes"].get<double>(), 4000);
  // A window with no rows: no statistics, no tags.
  const auto e = summarize_run(*run, std::make_pair(1.0, 2.0));
  EXPECT_EQ(e["ticks"], 0);
  EXPECT_TRUE(e["levels"]["process"]["groups"]["cpu"]["mean"].is_null());
  EXPECT_TRUE(e["tags"].empty());
}

TEST(RunData, SummaryWithoutGpuOrLimits) {
  RunDirCopy d;
  d.write("manifest.json", R"({"levels": ["system"], "interval": 0.5})");
  d.write("perf_system.csv", "time,wallclock,cpu_util_avg,memory\n0.5,10,20,1\n1.0,10.5,40,2\n");
  auto run = read_run_dir(d.path());
  ASSERT_TRUE(run) << run.error().message;
  const auto s = summarize_run(*run);
  EXPECT_EQ(s["level"], "system");
  EXPECT_FALSE(s["levels"]["system"]["groups"].contains("gpu_util"));
  EXPECT_TRUE(s["memory_limit_gib"].is_null());
  EXPECT_TRUE(s["cpu_mean_cores"].is_null()) << "no CPU count in the manifest";
  EXPECT_DOUBLE_EQ(s["levels"]["system"]["groups"]["cpu"]["mean"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(s["wall_s"].get<double>(), 0.5);
  EXPECT_TRUE(s["tags"].empty());
}

TEST(RunData, ReadsAZippedRunDirectory) {
  // tests/fixtures/run_basic.zip is `zip -r run_basic.zip run_basic` of the fixture directory.
  const std::string zip = std::string(SONDE_FIXTURES_DIR) + "/run_basic.zip";
  auto z = read_run(zip);
  ASSERT_TRUE(z) << z.error().message;
  auto d = read_run(kBasic);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(z->source, zip);
  ASSERT_EQ(z->levels.size(), d->levels.size());
  for (std::size_t i = 0; i < z->levels.size(); ++i) {
    EXPECT_EQ(z->levels[i].columns, d->levels[i].columns);
    ASSERT_EQ(z->levels[i].rows.size(), d->levels[i].rows.size());
    EXPECT_DOUBLE_EQ(z->levels[i].rows.back().back(), d->levels[i].rows.back().back());
  }
  EXPECT_EQ(z->cells.size(), 2u);
  EXPECT_EQ(summarize_run(*z)["tags"], summarize_run(*d)["tags"]);
}

TEST(RunData, ZipWithoutARunOrNotAZip) {
  RunDirCopy d;
  d.write("not.zip", "this is not a zip file, just text that is long enough to scan");
  auto r = read_run(d.path() + "/not.zip");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a zip file"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace sonde
