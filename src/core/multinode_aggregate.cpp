// The aggregation over nodes (core/multinode_aggregate.hpp).
#include "core/multinode_aggregate.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "core/nan.hpp"

namespace sonde::multinode {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

bool is_per_device_column(std::string_view name) {
  const std::size_t us = name.rfind('_');
  if (us == std::string_view::npos || us + 1 >= name.size()) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(us) + 1, name.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::vector<std::string> aggregate_columns(const std::vector<std::vector<std::string>>& nodes) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& cols : nodes)
    for (const auto& c : cols)
      if (!is_per_device_column(c) && c != "nodes" && !c.starts_with("cpu_util_node_") &&
          seen.insert(c).second)
        out.push_back(c);
  if (seen.count("cpu_util_avg")) {
    out.push_back("cpu_util_node_min");
    out.push_back("cpu_util_node_max");
  }
  out.push_back("nodes");
  return out;
}

void aggregate_row(const std::vector<std::string>& columns, std::span<const NodeRow> rows,
                   std::vector<double>& out) {
  out.assign(columns.size(), kNaN);
  // Each node's index of each aggregate column (nodes' schemas may differ).
  auto value = [&](const NodeRow& r, const std::string& name) {
    const auto& cols = *r.columns;
    for (std::size_t i = 0; i < cols.size() && i < r.values.size(); ++i)
      if (cols[i] == name) return r.values[i];
    return kNaN;
  };
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const std::string& name = columns[c];
    if (name == "nodes") {
      out[c] = static_cast<double>(rows.size());
      continue;
    }
    const bool node_min = name == "cpu_util_node_min", node_max = name == "cpu_util_node_max";
    const std::string& source = node_min || node_max ? std::string("cpu_util_avg") : name;
    double acc = kNaN, weight = 0;
    for (const NodeRow& r : rows) {
      const double v = value(r, source);
      if (!std::isfinite(v)) continue;
      if (node_min || ends_with(name, "_min")) {
        acc = std::isfinite(acc) ? std::min(acc, v) : v;
      } else if (node_max || ends_with(name, "_max")) {
        acc = std::isfinite(acc) ? std::max(acc, v) : v;
      } else if (ends_with(name, "_avg")) {
        // A mean over every device of the job: each node weighs by its devices.
        double w = 1;
        if (name.starts_with("cpu_")) w = r.num_cpus;
        if (name.starts_with("gpu_")) w = r.num_gpus;
        if (!(w > 0)) continue;
        acc = (std::isfinite(acc) ? acc : 0) + v * w;
        weight += w;
      } else {
        acc = (std::isfinite(acc) ? acc : 0) + v;
      }
    }
    if (ends_with(name, "_avg") && !node_min && !node_max)
      out[c] = weight > 0 ? acc / weight : kNaN;
    else
      out[c] = acc;
  }
}

}  // namespace sonde::multinode
