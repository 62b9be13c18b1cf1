// Fuzz target: the multi-node head's side of the agents' lines (src/core/multinode_head.hpp). The
// input is the launcher's stdout (labeled lines, "K: {...}"): each line goes through
// Head::on_line of a head expecting 3 tasks, with a tick of the head's grid every few lines and
// finish() at the end, into an in-memory store; the same bytes are also fed to a LineAssembler in
// pieces whose size the input's first byte chooses. Checks: the assembler returns only objects
// nested at most kMaxLineDepth deep; the head keeps only the allocation's tasks as nodes, with
// valid column names and a node_info within its bound; every row has one value per column; what
// the head stores (manifest keys) dumps as strict JSON (no invalid UTF-8).
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.hpp"
#include "core/multinode_head.hpp"
#include "fuzz_common.hpp"

using sonde::fuzz::check;
namespace mn = sonde::multinode;

namespace {

constexpr int kTasks = 3;

int depth_of(const nlohmann::json& root) {
  int deepest = 0;
  std::vector<std::pair<const nlohmann::json*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [j, d] = stack.back();
    stack.pop_back();
    if (!j->is_structured()) continue;
    deepest = std::max(deepest, d);
    for (const auto& child : *j) stack.emplace_back(&child, d + 1);
  }
  return deepest;
}

bool dumps(const nlohmann::json& j) {
  try {
    (void)j.dump();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

class MemoryStore final : public mn::Store {
 public:
  sonde::Result<void> begin_node(const std::string& node, sonde::Level level,
                                 const std::vector<std::string>& columns) override {
    check(!node.empty() && node.size() <= 220, "a node's name is a bounded file name");
    for (const auto& c : columns) check(mn::is_valid_column_name(c), "a node's column is valid");
    widths_[node + "/" + std::string(sonde::level_name(level))] = columns.size();
    return {};
  }
  void node_row(const std::string& node, sonde::Level level, double, double,
                std::span<const double> values) override {
    auto it = widths_.find(node + "/" + std::string(sonde::level_name(level)));
    check(it != widths_.end(), "a node's row comes after its table");
    check(it->second == values.size(), "a node's row has one value per column");
  }
  sonde::Result<void> begin_aggregate(sonde::Level level,
                                      const std::vector<std::string>& columns) override {
    for (const auto& c : columns)
      check(mn::is_valid_column_name(c) || c == "nodes", "an aggregate column is valid");
    agg_[sonde::level_index(level)] = columns.size();
    return {};
  }
  void aggregate_row(sonde::Level level, double, double, std::span<const double> values) override {
    check(agg_[sonde::level_index(level)] == values.size(),
          "an aggregate row has one value per column");
  }
  void set_manifest(const std::string& key, nlohmann::json value) override {
    check(dumps(value), "what the head stores dumps as JSON");
    manifest_[key] = std::move(value);
  }
  nlohmann::json manifest(const std::string& key) const override {
    return manifest_.contains(key) ? manifest_[key] : nlohmann::json();
  }
  bool failed() const override { return false; }

 private:
  std::map<std::string, std::size_t> widths_;
  std::map<std::size_t, std::size_t> agg_;
  nlohmann::json manifest_ = nlohmann::json::object();
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The head's warnings (a node lost, a line skipped) are its normal answers to such input: not
  // printed, at thousands of inputs a second (check() reports through stdio, not std::cerr).
  static const bool quiet = [] {
    std::cerr.rdbuf(nullptr);
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);

  // The assembler alone, in pieces of two tasks.
  mn::LineAssembler assembler(4096, 16384);
  for (std::size_t at = 0, k = 0; at < stream.size(); at += piece, ++k) {
    auto doc = assembler.feed(static_cast<int>(k % 2), stream.substr(at, piece));
    if (!doc) continue;
    check(doc->is_object(), "the assembler returns objects");
    check(depth_of(*doc) <= mn::kMaxLineDepth, "the assembler returns bounded nesting");
  }

  // The head, line by line.
  MemoryStore store;
  mn::HeadOptions o;
  o.job = "1";
  o.expected_nodes = kTasks;
  o.interval_s = 1;
  o.levels = {sonde::Level::slurm, sonde::Level::system};
  o.start_grace_s = 10;
  o.max_queued = 64;
  o.max_queued_bytes = 1 << 16;
  {
    mn::Head head(o, store);
    const double mono0 = sonde::monotonic_now(), wall0 = 1.8e9;
    double t = 0;
    std::size_t lines = 0, from = 0;
    while (from <= stream.size()) {
      const std::size_t nl = stream.find('\n', from);
      const std::string_view line =
          stream.substr(from, nl == std::string_view::npos ? std::string_view::npos : nl - from);
      head.on_line(line, wall0 + t, mono0 + t);
      if (++lines % 4 == 0) {
        t += 0.5;
        head.tick(mono0 + t, wall0 + t);
      }
      if (nl == std::string_view::npos) break;
      from = nl + 1;
    }
    head.finish(mono0 + t + 1);
    const nlohmann::json nodes = head.nodes_json();
    check(nodes.is_array() && nodes.size() <= static_cast<std::size_t>(kTasks),
          "only the allocation's tasks are nodes");
    for (const auto& n : nodes) {
      check(n["task"].get<int>() >= 0 && n["task"].get<int>() < kTasks, "a node's task is bounded");
      check(n["node_info"].dump().size() <= mn::kMaxNodeInfoBytes, "a node's node_info is bounded");
    }
    const nlohmann::json summary = head.summary_json();
    check(dumps(summary), "the summary dumps as JSON");
    (void)mn::Head::summary_text(summary);
  }
  return 0;
}
