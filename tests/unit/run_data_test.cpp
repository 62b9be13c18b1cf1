// Reading run directories back (src/sinks/run_data.cpp) and summarising them.
#include "sinks/run_data.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "core/gzip.hpp"
#include "support/built_paths.hpp"

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
  // The peak on one GPU (15 GiB on GPU 1 in the second row), not the peak of the mean (14).
  EXPECT_DOUBLE_EQ(g["gpu_mem"]["max"].get<double>(), 15);
  EXPECT_EQ(s["levels"]["process"]["gpus_used"], 2);
  EXPECT_DOUBLE_EQ(s["gpu_mem_peak_gib"].get<double>(), 15);
  EXPECT_DOUBLE_EQ(s["gpu_util_mean"].get<double>(), 72.5);
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

// ---- hostile run directories and archives (issue 12)
// ---------------------------------------------

std::string manifest_naming(const std::string& file) {
  return R"({"levels": ["process"], "files": {"process": ")" + file + R"("}, "interval": 1})";
}

TEST(RunData, ManifestFileNamesMustBeNamesInsideTheRun) {
  RunDirCopy d;
  // A file outside the run whose first line would be quoted by the header error before.
  const std::string secret = d.path() + "_secret.csv";
  std::ofstream(secret) << "TOP-SECRET-LINE\n";
  for (const std::string& name : {secret, std::string("../") + fs::path(secret).filename().string(),
                                  std::string(".."), std::string("sub/perf_process.csv")}) {
    d.write("manifest.json", manifest_naming(name));
    auto run = read_run_dir(d.path());
    ASSERT_FALSE(run) << name;
    EXPECT_NE(run.error().message.find("plain name"), std::string::npos) << run.error().message;
    EXPECT_EQ(run.error().message.find("TOP-SECRET"), std::string::npos) << run.error().message;
  }
  fs::remove(secret);
}

TEST(RunData, RunFilesAreRegularFilesNotLinksFifosOrDevices) {
  RunDirCopy d;
  const std::string secret = d.path() + "_secret.csv";
  std::ofstream(secret) << "TOP-SECRET-LINE\n";
  fs::remove(d.path() + "/perf_process.csv");
  fs::create_symlink(secret, d.path() + "/perf_process.csv");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("symbolic link"), std::string::npos) << run.error().message;
  EXPECT_EQ(run.error().message.find("TOP-SECRET"), std::string::npos) << run.error().message;
  fs::remove(d.path() + "/perf_process.csv");
  fs::remove(secret);

  // A FIFO would block the reader for ever; /dev/zero would never end.
  ASSERT_EQ(::mkfifo((d.path() + "/perf_process.csv").c_str(), 0600), 0);
  run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("not a regular file"), std::string::npos)
      << run.error().message;
  fs::remove(d.path() + "/perf_process.csv");
  fs::create_symlink("/dev/zero", d.path() + "/perf_process.csv");
  EXPECT_FALSE(read_run_dir(d.path()));
  fs::remove(d.path() + "/manifest.json");
  fs::create_symlink(secret, d.path() + "/manifest.json");
  EXPECT_FALSE(read_run_dir(d.path()));
}

TEST(RunData, HeaderAndJsonErrorsDoNotQuoteTheFile) {
  RunDirCopy d;
  d.write("perf_process.csv", "root:x:0:0:root:/root:/bin/bash\n");
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_process.csv:1:"), std::string::npos);
  EXPECT_EQ(run.error().message.find("root:x"), std::string::npos) << run.error().message;
  d.write("manifest.json", "SECRETWORD\n");
  run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("manifest.json:1:"), std::string::npos);
  EXPECT_EQ(run.error().message.find("SECRETWORD"), std::string::npos) << run.error().message;
  EXPECT_EQ(run.error().message.find("'S'"), std::string::npos) << run.error().message;
}

TEST(RunData, OutOfRangeAndNonFiniteNumbersAreNotMeasured) {
  RunDirCopy d;
  d.write("manifest.json", manifest_naming("perf_process.csv"));
  d.write("perf_process.csv",
          "time,wallclock,a,b,c,d,e,f\n"
          "1,100,1e10000000,-1e999,nan,inf,-inf,1e-400\n");
  auto run = read_run_dir(d.path());
  ASSERT_TRUE(run) << run.error().message;
  const auto& row = run->levels.at(0).rows.at(0);
  for (int c = 2; c <= 6; ++c) EXPECT_TRUE(std::isnan(row[c])) << "column " << c << ": " << row[c];
  EXPECT_TRUE(std::isfinite(row[7]));
  EXPECT_LT(std::fabs(row[7]), 1e-300);
  d.write("perf_process.csv", "time,wallclock,a\n1,100,1e99999x\n");
  run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("perf_process.csv:2:"), std::string::npos)
      << run.error().message;
}

TEST(RunData, ACsvOfEmptyLinesIsBoundedNotSlurped) {
  RunDirCopy d;
  d.write("manifest.json", manifest_naming("perf_process.csv"));
  std::string text = "time,wallclock\n";
  text.append(kMaxRunFileLines + 10, '\n');
  d.write("perf_process.csv", text);
  auto run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("lines"), std::string::npos) << run.error().message;
  // One endless line.
  d.write("perf_process.csv", "time,wallclock\n" + std::string(kMaxRunLineBytes + 10, '1'));
  run = read_run_dir(d.path());
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("longer than"), std::string::npos) << run.error().message;
}

/// A zip archive (no zip64) of deflated entries: name, the raw deflate stream, the stated size.
std::string make_zip(const std::vector<std::tuple<std::string, std::string, std::uint32_t>>& es) {
  auto le = [](std::string& out, std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  std::string zip, central;
  for (const auto& [name, data, usize] : es) {
    const auto local = static_cast<std::uint32_t>(zip.size());
    le(zip, 0x04034b50, 4);
    le(zip, 20, 2), le(zip, 0, 2), le(zip, 8, 2), le(zip, 0, 4), le(zip, 0, 4);
    le(zip, static_cast<std::uint32_t>(data.size()), 4), le(zip, usize, 4);
    le(zip, static_cast<std::uint32_t>(name.size()), 2), le(zip, 0, 2);
    zip += name + data;
    le(central, 0x02014b50, 4);
    le(central, 20, 2), le(central, 20, 2), le(central, 0, 2), le(central, 8, 2);
    le(central, 0, 4), le(central, 0, 4);
    le(central, static_cast<std::uint32_t>(data.size()), 4), le(central, usize, 4);
    le(central, static_cast<std::uint32_t>(name.size()), 2), le(central, 0, 2), le(central, 0, 2);
    le(central, 0, 2), le(central, 0, 2), le(central, 0, 4), le(central, local, 4);
    central += name;
  }
  const auto cd = static_cast<std::uint32_t>(zip.size());
  zip += central;
  le(zip, 0x06054b50, 4);
  le(zip, 0, 2), le(zip, 0, 2);
  le(zip, static_cast<std::uint32_t>(es.size()), 2),
      le(zip, static_cast<std::uint32_t>(es.size()), 2);
  le(zip, static_cast<std::uint32_t>(central.size()), 4), le(zip, cd, 4), le(zip, 0, 2);
  return zip;
}

std::string raw_deflate(const std::string& in) {
  const std::string gz = gzip(in, 9);  // 10-byte header, raw deflate, 8-byte trailer
  return gz.substr(10, gz.size() - 18);
}

TEST(RunData, ZipInflationIsBoundedRelativeAndAbsolute) {
  RunDirCopy d;
  const std::string manifest = manifest_naming("perf_process.csv");
  std::string bomb = "time,wallclock\n";
  bomb.append(100u << 20, '\n');  // 100 MiB of newlines deflate to ~100 KiB
  const std::string packed = raw_deflate(bomb);
  bomb.clear();
  bomb.shrink_to_fit();
  ASSERT_LT(packed.size(), 1u << 20);
  // Honest sizes in the central directory: refused before anything is inflated.
  d.write("bomb.zip", make_zip({{"run/manifest.json", raw_deflate(manifest),
                                 static_cast<std::uint32_t>(manifest.size())},
                                {"run/perf_process.csv", packed, (100u << 20) + 15}}));
  auto r = read_run(d.path() + "/bomb.zip");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("bomb.zip"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("run/perf_process.csv"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("inflates past"), std::string::npos) << r.error().message;
  // Stated sizes that lie: inflation stops at the stated size, in bounded chunks.
  d.write("liar.zip", make_zip({{"run/manifest.json", raw_deflate(manifest),
                                 static_cast<std::uint32_t>(manifest.size())},
                                {"run/perf_process.csv", packed, 100000}}));
  r = read_run(d.path() + "/liar.zip");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("run/perf_process.csv"), std::string::npos) << r.error().message;
  // And a genuine small archive built the same way still reads.
  const std::string csv = "time,wallclock,a\n1,100,5\n";
  d.write("ok.zip", make_zip({{"run/manifest.json", raw_deflate(manifest),
                               static_cast<std::uint32_t>(manifest.size())},
                              {"run/perf_process.csv", raw_deflate(csv),
                               static_cast<std::uint32_t>(csv.size())}}));
  r = read_run(d.path() + "/ok.zip");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->levels.at(0).rows.at(0).at(2), 5.0);
}

}  // namespace
}  // namespace sonde
