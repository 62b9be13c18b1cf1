// Marks and phases (core/marks.hpp, core/phases.hpp): the line format, names cleaned of what a
// program may write, the reader on partial and overlong lines, and how rows split into phases.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/marks.hpp"
#include "core/phases.hpp"

namespace sonde {
namespace {

namespace fs = std::filesystem;

TEST(Marks, LineFormatRoundTrips) {
  auto line = format_mark_line("train epoch 1", 1700000000.25);
  ASSERT_TRUE(line);
  EXPECT_EQ(*line, "1700000000.250000 train epoch 1\n");
  auto m = parse_mark_line(line->substr(0, line->size() - 1));
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->wall_s, 1700000000.25);
  EXPECT_EQ(m->name, "train epoch 1");
  EXPECT_FALSE(format_mark_line(" \t\n", 1.0)) << "no name left";
}

TEST(Marks, NamesAreCleanedOfWhatAProgramMayWrite) {
  EXPECT_EQ(clean_mark_name("  a\tb\x01"
                            "c  "),
            "a b c");
  EXPECT_EQ(clean_mark_name("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(clean_mark_name("bad\xFF"), "bad\xEF\xBF\xBD");
  const std::string longer = std::string(199, 'x') + "\xC3\xA9" + "yyy";  // é across byte 200
  EXPECT_EQ(clean_mark_name(longer), std::string(199, 'x'));
  EXPECT_FALSE(parse_mark_line("abc name"));
  EXPECT_FALSE(parse_mark_line("-5 name"));
  EXPECT_FALSE(parse_mark_line("nan name"));
  EXPECT_FALSE(parse_mark_line("12.5"));
  EXPECT_FALSE(parse_mark_line("12.5 "));
  EXPECT_FALSE(parse_mark_line(" 12.5 name"));
  EXPECT_FALSE(parse_mark_line("1 " + std::string(300, 'n'))) << "longer than a writer sends";
}

class MarksFile {
 public:
  MarksFile() : path_(fs::temp_directory_path() / fmt::format("sonde-marks-{}", ::getpid())) {
    std::ofstream(path_).flush();
  }
  ~MarksFile() { fs::remove(path_); }
  void append(const std::string& text) { std::ofstream(path_, std::ios::app) << text; }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

TEST(Marks, ReaderWaitsForWholeLinesAndSkipsBadOnes) {
  MarksFile f;
  MarkReader r(f.path());
  EXPECT_TRUE(r.poll().empty());
  f.append("100.5 load\n200 tra");
  auto got = r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "load");
  f.append("in\nnot a mark\n" + std::string(1000, 'z'));
  got = r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "train");
  EXPECT_EQ(r.skipped(), 1u);
  f.append(std::string(1000, 'z') + "\n300 after\n");  // the overlong line ends here
  got = r.poll();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].name, "after");
  EXPECT_EQ(r.skipped(), 2u);
  // A missing file, or one that is not a regular file, reads as nothing.
  EXPECT_TRUE(MarkReader("/nonexistent/marks").poll().empty());
  EXPECT_TRUE(MarkReader("/dev").poll().empty());
}

Phases::Row row(double end, double dt, double cores, double mem = NAN, double write = NAN) {
  Phases::Row r;
  r.end_s = end;
  r.dt_s = dt;
  r.cpu_cores = cores;
  r.memory_gib = mem;
  r.read_bps = NAN;
  r.write_bps = write;
  r.gpu_util_pct = NAN;
  return r;
}

TEST(Phases, RowsSplitBetweenThePhasesTheyOverlap) {
  Phases p;
  p.set_origin(1000);
  p.add_row(row(1001, 1, 1.0, 0.5, 100));
  p.add_marks({{1001.5, "b"}, {1001.25, "a"}});  // read late, out of order
  p.add_row(row(1002, 1, 2.0, 1.5, 0));
  p.add_row(row(1003, 1, 0.5, 0.25, 10));
  p.finish(1003);
  const nlohmann::json j = p.json();
  ASSERT_EQ(j.size(), 3u) << j.dump(1);
  EXPECT_EQ(j[0]["name"], "(start)");
  EXPECT_DOUBLE_EQ(j[0]["start_s"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(j[0]["end_s"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(j[0]["cpu_s"].get<double>(), 1.0 + 2.0 * 0.25);
  EXPECT_DOUBLE_EQ(j[0]["memory_peak_gib"].get<double>(), 1.5);
  EXPECT_EQ(j[1]["name"], "a");
  EXPECT_DOUBLE_EQ(j[1]["duration_s"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(j[1]["cpu_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j[1]["cpu_mean_cores"].get<double>(), 2.0);
  EXPECT_EQ(j[2]["name"], "b");
  EXPECT_DOUBLE_EQ(j[2]["cpu_s"].get<double>(), 2.0 * 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(j[2]["io_write_bytes"].get<double>(), 10);
  EXPECT_DOUBLE_EQ(j[2]["end_wallclock"].get<double>(), 1003);
  EXPECT_TRUE(j[2]["gpu_util_mean"].is_null()) << "no row measured it";
  // The phases' CPU adds up to the rows'.
  double sum = 0;
  for (const auto& ph : j) sum += ph["cpu_s"].get<double>();
  EXPECT_DOUBLE_EQ(sum, 1.0 + 2.0 + 0.5);
}

TEST(Phases, NoMarkNoPhasesAndAMarkLaterThanItsRowsBeginsWhereTheyEnd) {
  Phases none;
  none.add_row(row(1001, 1, 1.0));
  EXPECT_TRUE(none.json().is_null());
  Phases p;
  p.set_origin(1000);
  for (int i = 1; i <= 10; ++i) p.add_row(row(1000 + i, 1, 1.0));
  // Rows older than the lateness window are placed: a mark before them begins after them.
  p.add_marks({{1001, "late"}});
  p.finish(1010);
  const nlohmann::json j = p.json();
  ASSERT_EQ(j.size(), 2u) << j.dump(1);
  EXPECT_EQ(j[1]["name"], "late");
  EXPECT_GT(j[1]["start_s"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j[0]["cpu_s"].get<double>() + j[1]["cpu_s"].get<double>(), 10.0);
}

}  // namespace
}  // namespace sonde
