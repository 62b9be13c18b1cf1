// The multi-node head's pure parts on captured rows and lines: the aggregation rule (sums,
// weighted means, min/max, node spread), per-device columns, srun --label pieces.
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/multinode_aggregate.hpp"
#include "core/multinode_head.hpp"
#include "support/agent_lines.hpp"

namespace sonde::multinode {
namespace {

using test::ready;
using test::sample;

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

TEST(MultinodeLines, NestingPastTheBoundIsGarbageBeforeItIsParsed) {
  LineAssembler a;
  EXPECT_FALSE(a.feed(0, std::string(1'000'000, '[')));
  EXPECT_FALSE(a.feed(0, "{\"a\":" + std::string(40, '[') + std::string(40, ']') + "}"));
  EXPECT_EQ(a.garbage(), 2u);
  EXPECT_TRUE(a.feed(0, "{\"a\":" + std::string(30, '[') + std::string(30, ']') + "}"));
  // Brackets in strings (escaped quotes included) are not nesting.
  auto d = a.feed(0, "{\"a\":\"" + std::string(100, '[') + "\\\"{\"}");
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["a"].get<std::string>().size(), 102u);
  // In pieces the depth is the fragment's.
  EXPECT_FALSE(a.feed(1, "{\"a\":" + std::string(20, '[')));
  EXPECT_EQ(a.pending(), 1u);
  EXPECT_FALSE(a.feed(1, std::string(20, '[')));  // the fragment and this piece: both garbage
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.garbage(), 4u);
}

TEST(MultinodeLines, AWholeObjectWhileAFragmentIsPendingDropsTheFragment) {
  LineAssembler a;
  EXPECT_FALSE(a.feed(0, "{\"a\":"));
  auto d = a.feed(0, "{\"b\":1}");
  ASSERT_TRUE(d);
  EXPECT_EQ((*d)["b"], 1);
  EXPECT_EQ(a.garbage(), 1u);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(a.reassembled(), 0u);
  // A stale fragment inside a string, then a line split in two: the fragment's grammar breaks at
  // the first piece, which starts the next fragment; the second piece completes it.
  EXPECT_FALSE(a.feed(0, R"({"level": "slurm", "truncated)"));
  EXPECT_FALSE(a.feed(0, "}}}garbage{{{"));  // still inside that string: a valid fragment
  const std::string doc = R"({"level":"slurm","wallclock":1.5,"sample":{"time":2,"memory":0.25}})";
  EXPECT_FALSE(a.feed(0, doc.substr(0, 30)));
  EXPECT_EQ(a.garbage(), 2u);
  auto d2 = a.feed(0, doc.substr(30));
  ASSERT_TRUE(d2);
  EXPECT_EQ((*d2)["sample"]["memory"], 0.25);
  // Grammar, not just brackets: broken text is garbage at the piece that breaks it.
  for (const char* bad : {R"({"a" 1})", R"({"a":tru})", R"({"a":01})", R"({"a":[1,]})",
                          R"({"a":1]})", R"({"a":"\q"})", R"({,})", R"({"a":-})"})
    EXPECT_FALSE(a.feed(1, bad)) << bad;
  EXPECT_EQ(a.pending(), 0u);
  for (const char* good : {R"({"a":[1,-2.5e+3,true,false,null,{}],"b":"\u00e9\n"})", R"( {} )"})
    EXPECT_TRUE(a.feed(1, good)) << good;
}

TEST(MultinodeLines, ReassemblyIsLinearInTheBytes) {
  // 150,000 pieces of 6 bytes: re-parsing the fragment at each piece took minutes.
  LineAssembler a;
  const std::string doc = "{\"x\":\"" + std::string(900'000, 'a') + "\"}";
  std::optional<nlohmann::json> out;
  for (std::size_t at = 0; at < doc.size(); at += 6)
    if (auto d = a.feed(0, std::string_view(doc).substr(at, 6))) out = std::move(d);
  ASSERT_TRUE(out);
  EXPECT_EQ((*out)["x"].get<std::string>().size(), 900'000u);
  EXPECT_EQ(a.reassembled(), 1u);
  EXPECT_EQ(a.garbage(), 0u);
}

TEST(MultinodeLines, ColumnNames) {
  for (const char* ok : {"cpu_util_avg", "_x", "gpu_mem_1", "A9"})
    EXPECT_TRUE(is_valid_column_name(ok)) << ok;
  for (const char* bad :
       {"", "9a", "a b", "a,b", "a\nb", "q\"", "wallclock", "time", "caf\xc3\xa9"})
    EXPECT_FALSE(is_valid_column_name(bad)) << bad;
  EXPECT_TRUE(is_valid_column_name(std::string(kMaxColumnName, 'a')));
  EXPECT_FALSE(is_valid_column_name(std::string(kMaxColumnName + 1, 'a')));
}

}  // namespace
}  // namespace sonde::multinode

namespace sonde::multinode {
namespace {

/// The seam the head writes through, in memory.
class MemoryStore final : public Store {
 public:
  std::map<std::string, std::vector<std::vector<double>>> node_rows;  // "node/level"
  std::map<Level, std::vector<std::string>> agg_columns;
  std::map<Level, std::vector<std::vector<double>>> agg_rows;
  nlohmann::json manifest_ = nlohmann::json::object();
  Result<void> begin_node(const std::string& node, Level level,
                          const std::vector<std::string>&) override {
    node_rows[node + "/" + std::string(level_name(level))];
    return {};
  }
  void node_row(const std::string& node, Level level, double, double,
                std::span<const double> values) override {
    node_rows[node + "/" + std::string(level_name(level))].emplace_back(values.begin(),
                                                                        values.end());
  }
  Result<void> begin_aggregate(Level level, const std::vector<std::string>& columns) override {
    agg_columns[level] = columns;
    return {};
  }
  void aggregate_row(Level level, double, double, std::span<const double> values) override {
    agg_rows[level].emplace_back(values.begin(), values.end());
  }
  void set_manifest(const std::string& key, nlohmann::json value) override {
    manifest_[key] = std::move(value);
  }
  nlohmann::json manifest(const std::string& key) const override {
    return manifest_.contains(key) ? manifest_[key] : nlohmann::json();
  }
  bool failed() const override { return false; }
};

TEST(MultinodeHead, CapturedLinesToNodeRowsAggregateAndFaults) {
  MemoryStore store;
  HeadOptions o;
  o.job = "7";
  o.expected_nodes = 2;
  o.interval_s = 1;
  o.levels = {Level::slurm};
  Head head(o, store);
  const double t0 = 1000;
  // Node b's clock is 10 s ahead; lines arrive 0.01 s after they were stamped.
  head.on_line("0: " + ready("a", t0), t0 + 0.01, 1);
  head.on_line("1: " + ready("b", t0 + 10), t0 + 0.01, 1);
  const std::string sb = sample(t0 + 10 + 1, 50, 2.0);
  head.on_line("0: " + sample(t0 + 1, 100, 1.0), t0 + 1.01, 2);
  head.on_line("1: " + sb.substr(0, 30), t0 + 1.01, 2);  // split by srun
  head.on_line("1: " + sb.substr(30), t0 + 1.01, 2);
  head.tick(2.1, t0 + 1.1);
  ASSERT_EQ(store.agg_rows[Level::slurm].size(), 1u);
  const auto& cols = store.agg_columns[Level::slurm];
  const auto& row = store.agg_rows[Level::slurm][0];
  EXPECT_DOUBLE_EQ(at(cols, row, "cpu_util_avg"), 75.0);
  EXPECT_DOUBLE_EQ(at(cols, row, "memory"), 3.0);
  EXPECT_DOUBLE_EQ(at(cols, row, "nodes"), 2.0);
  EXPECT_EQ(store.node_rows["b/slurm"].size(), 1u);
  const auto nodes = head.nodes_json();
  EXPECT_NEAR(nodes[1]["clock_offset_s"].get<double>(), 9.99, 1e-9);
  EXPECT_EQ(nodes[1]["status"], "running");
  // srun says b's task was killed: lost at once, the aggregate covers a.
  head.on_launcher_stderr("srun: error: b: task 1: Killed", 3);
  head.on_line("0: " + sample(t0 + 2, 100, 1.0), t0 + 2.01, 3);
  head.tick(3.1, t0 + 2.1);
  EXPECT_DOUBLE_EQ(at(cols, store.agg_rows[Level::slurm][1], "nodes"), 1.0);
  EXPECT_DOUBLE_EQ(at(cols, store.agg_rows[Level::slurm][1], "memory"), 1.0);
  EXPECT_EQ(head.nodes_json()[1]["status"], "lost");
  EXPECT_EQ(head.nodes_json()[1]["reason"], "srun: b: task 1: Killed");
  // a says nothing for 5 intervals: lost too; rows with no node.
  head.tick(9.0, t0 + 8);
  EXPECT_EQ(head.nodes_json()[0]["status"], "lost");
  EXPECT_DOUBLE_EQ(at(cols, store.agg_rows[Level::slurm].back(), "nodes"), 0.0);
  head.finish(9.5);
  EXPECT_EQ(store.manifest("multinode")["job"], "7");
  EXPECT_EQ(store.manifest("multinode")["reassembled_lines"], 1);
}

TEST(MultinodeHead, LinesOfTheWrongTypesForgedReportsAndForeignTasksAreSkipped) {
  MemoryStore store;
  HeadOptions o;
  o.job = "7";
  o.expected_nodes = 2;
  o.interval_s = 1;
  o.levels = {Level::slurm};
  Head head(o, store);
  const double t0 = 1000;
  head.on_line("0: " + ready("a", t0), t0, 1);
  head.on_line("1: " + ready("b", t0), t0, 1);
  head.on_line("0: " + sample(t0 + 1, 100, 1.0), t0 + 1, 2);
  head.on_line("1: " + sample(t0 + 1, 50, 2.0), t0 + 1, 2);
  // None of these may throw, lose a node, or make one.
  for (const char* bad :
       {R"({"status":5})", R"({"status":"end","reason":7})", R"({"status":"error","error":[1]})",
        R"({"level":"slurm","wallclock":"x","sample":{}})",
        R"({"level":"slurm","wallclock":1,"sample":{"memory":"x"}})",
        R"({"status":"srun_error","node":"b","what":"forged"})"})
    head.on_line(std::string("0: ") + bad, t0 + 1, 2);
  head.on_line("2: " + ready("c", t0), t0 + 1, 2);
  head.on_line("1000000: " + ready("d", t0), t0 + 1, 2);
  head.tick(2.1, t0 + 1.1);
  ASSERT_EQ(store.agg_rows[Level::slurm].size(), 1u);
  EXPECT_DOUBLE_EQ(at(store.agg_columns[Level::slurm], store.agg_rows[Level::slurm][0], "nodes"),
                   2.0);
  const auto nodes = head.nodes_json();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0]["status"], "running");
  EXPECT_EQ(nodes[1]["status"], "running") << nodes[1].dump();
  EXPECT_EQ(nodes[0]["malformed_lines"], 5);
  EXPECT_EQ(head.garbage_lines(), 7u);
  head.finish(3);
  EXPECT_EQ(store.manifest("multinode")["garbage_lines"], 7);
}

}  // namespace
}  // namespace sonde::multinode
