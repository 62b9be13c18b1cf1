// The multi-node head's pure parts on captured rows and lines: the aggregation rule (sums,
// weighted means, min/max, node spread), per-device columns, srun --label pieces.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sinks/multinode.hpp"

namespace sonde::multinode {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double at(const std::vector<std::string>& cols, const std::vector<double>& row,
          const std::string& name) {
  for (std::size_t i = 0; i < cols.size(); ++i)
    if (cols[i] == name) return row[i];
  ADD_FAILURE() << "no column " << name;
  return kNaN;
}

TEST(MultinodeAggregate, PerDeviceColumnsStayPerNode) {
  EXPECT_TRUE(is_per_device_column("cpu_util_3"));
  EXPECT_TRUE(is_per_device_column("gpu_mem_10"));
  EXPECT_FALSE(is_per_device_column("cpu_util_avg"));
  EXPECT_FALSE(is_per_device_column("memory"));
  EXPECT_FALSE(is_per_device_column("io_read"));
  EXPECT_FALSE(is_per_device_column("x_"));
  const auto cols = aggregate_columns(
      {{"cpu_util_0", "cpu_util_1", "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory"},
       {"cpu_util_0", "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory", "gpu_util_0",
        "gpu_util_avg"}});
  EXPECT_EQ(cols, (std::vector<std::string>{"cpu_util_avg", "cpu_util_min", "cpu_util_max",
                                            "memory", "gpu_util_avg", "cpu_util_node_min",
                                            "cpu_util_node_max", "nodes"}));
}

// Captured rows of three nodes' slurm level (a 2-CPU node burning one core, a 4-CPU node at
// 25 %, an idle 2-CPU node without I/O figures).
TEST(MultinodeAggregate, SumsWeightedMeansAndSpread) {
  const std::vector<std::string> a = {"cpu_util_0",   "cpu_util_1", "cpu_util_avg", "cpu_util_min",
                                      "cpu_util_max", "memory",     "io_read",      "num_procs"};
  const std::vector<std::string> b = {"cpu_util_0",   "cpu_util_1",   "cpu_util_2",   "cpu_util_3",
                                      "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory",
                                      "io_read",      "num_procs"};
  const std::vector<std::string> c = {"cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory",
                                      "num_procs"};
  const std::vector<double> ra = {100, 0, 50, 0, 100, 0.5, 1000, 3};
  const std::vector<double> rb = {25, 25, 25, 25, 25, 25, 25, 1.25, 24, 2};
  const std::vector<double> rc = {0, 0, 0, 0.01, 1};
  const auto cols = aggregate_columns({a, b, c});
  std::vector<NodeRow> rows = {{&a, ra, 2, 0}, {&b, rb, 4, 0}, {&c, rc, 2, 0}};
  std::vector<double> out;
  aggregate_row(cols, rows, out);
  ASSERT_EQ(out.size(), cols.size());
  // (50·2 + 25·4 + 0·2) / 8 CPUs = 25 %: one and a quarter... of 8 CPUs, i.e. 2 cores.
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_avg"), 25.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_min"), 0.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_max"), 100.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_node_min"), 0.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_node_max"), 50.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "memory"), 0.5 + 1.25 + 0.01);
  EXPECT_DOUBLE_EQ(at(cols, out, "io_read"), 1024.0);  // the idle node did not measure it
  EXPECT_DOUBLE_EQ(at(cols, out, "num_procs"), 6.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "nodes"), 3.0);

  // A node lost: the aggregate covers two, and says so.
  rows.pop_back();
  aggregate_row(cols, rows, out);
  EXPECT_DOUBLE_EQ(at(cols, out, "nodes"), 2.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_avg"), (50.0 * 2 + 25.0 * 4) / 6);
  EXPECT_DOUBLE_EQ(at(cols, out, "cpu_util_node_min"), 25.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "num_procs"), 5.0);
}

TEST(MultinodeAggregate, GpuMeansWeighByGpusAndMissingValuesAreNotZero) {
  const std::vector<std::string> g = {"gpu_util_avg", "gpu_util_min", "gpu_util_max", "gpu_mem_avg",
                                      "memory"};
  const std::vector<double> r1 = {90, 80, 100, 10, kNaN};
  const std::vector<double> r2 = {30, 30, 30, 2, kNaN};
  const std::vector<double> r3 = {kNaN, kNaN, kNaN, kNaN, kNaN};  // a node without GPUs
  const auto cols = aggregate_columns({g});
  std::vector<NodeRow> rows = {{&g, r1, 8, 4}, {&g, r2, 8, 1}, {&g, r3, 8, 0}};
  std::vector<double> out;
  aggregate_row(cols, rows, out);
  EXPECT_DOUBLE_EQ(at(cols, out, "gpu_util_avg"), (90.0 * 4 + 30.0) / 5);
  EXPECT_DOUBLE_EQ(at(cols, out, "gpu_util_min"), 30.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "gpu_util_max"), 100.0);
  EXPECT_DOUBLE_EQ(at(cols, out, "gpu_mem_avg"), (10.0 * 4 + 2.0) / 5);
  EXPECT_TRUE(std::isnan(at(cols, out, "memory"))) << "no node measured it: not a zero";
  EXPECT_DOUBLE_EQ(at(cols, out, "nodes"), 3.0);
  aggregate_row(cols, {}, out);
  EXPECT_DOUBLE_EQ(at(cols, out, "nodes"), 0.0);
  EXPECT_TRUE(std::isnan(at(cols, out, "gpu_util_avg")));
}

TEST(MultinodeLines, LabelsAsSrunWritesThem) {
  auto l = split_label("0: {\"a\":1}");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->task, 0);
  EXPECT_EQ(l->text, "{\"a\":1}");
  l = split_label("  12: x");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->task, 12);
  EXPECT_EQ(l->text, "x");
  l = split_label("3:");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->text, "");
  EXPECT_FALSE(split_label("srun: error: n2: task 1: Killed"));
  EXPECT_FALSE(split_label(""));
  EXPECT_FALSE(split_label(": x"));
  EXPECT_FALSE(split_label("12"));
  EXPECT_FALSE(LineAssembler().feed(0, "")) << "an empty piece (a newline alone)";
}

TEST(MultinodeLines, SplitLinesAreReassembledPerTaskAndGarbageIsDropped) {
  LineAssembler a(64);
  const std::string doc = R"({"level":"slurm","wallclock":1.5,"sample":{"time":2,"memory":0.25}})";
  // Pieces of two tasks interleaved.
  EXPECT_FALSE(a.feed(0, doc.substr(0, 20)));
  EXPECT_FALSE(a.feed(1, doc.substr(0, 7)));
  auto d0 = a.feed(0, doc.substr(20));
  ASSERT_TRUE(d0);
  EXPECT_EQ((*d0)["sample"]["memory"], 0.25);
  auto d1 = a.feed(1, doc.substr(7));
  ASSERT_TRUE(d1);
  EXPECT_EQ(a.reassembled(), 2u);
  EXPECT_EQ(a.garbage(), 0u);
  // Garbage: dropped, counted, and the next document still comes through.
  EXPECT_FALSE(a.feed(0, "not json"));
  EXPECT_FALSE(a.feed(0, "[1,2]"));
  EXPECT_FALSE(a.feed(0, R"({"level": "slurm", "trunc)"));
  EXPECT_TRUE(a.feed(0, doc));  // the stale fragment does not continue into it: dropped
  EXPECT_FALSE(a.feed(0, "}}}garbage{{{"));
  EXPECT_EQ(a.garbage(), 4u);
  // A fragment beyond the bound is dropped.
  EXPECT_FALSE(a.feed(2, "{\"x\":\"" + std::string(40, 'a')));
  EXPECT_FALSE(a.feed(2, std::string(40, 'a')));
  EXPECT_FALSE(a.feed(2, "\"}"));
  EXPECT_GE(a.garbage(), 5u);
  // Bytes that are not UTF-8, NUL, huge numbers: never a crash.
  EXPECT_FALSE(a.feed(3, std::string("{\"a\":\"\xff\xfe\"}")));
  EXPECT_FALSE(a.feed(3, std::string("\0\0\0", 3)));
  EXPECT_TRUE(a.feed(3, "{\"a\":1e999999}") || true);
}

}  // namespace
}  // namespace sonde::multinode
