#pragma once
// The aggregation rule of a multi-node run (docs/multinode.md): which columns the aggregate has
// and how one aggregate row comes from the nodes' rows at one time of the head's grid.
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sonde::multinode {

/// A per-device column ("cpu_util_3", "gpu_mem_1"): a name ending in "_<digits>". Kept per node
/// only.
bool is_per_device_column(std::string_view name);

/// The aggregate's columns: every column of the nodes that is not per-device (the first node's
/// order, then columns only later nodes have), then `cpu_util_node_min`, `cpu_util_node_max`
/// (when cpu_util_avg is one) and `nodes`.
std::vector<std::string> aggregate_columns(const std::vector<std::vector<std::string>>& nodes);

/// One node's row at one time of the head's grid.
struct NodeRow {
  const std::vector<std::string>* columns = nullptr;
  std::span<const double> values;
  double num_cpus = 0;  ///< what 100 % cpu_util means at the level on that node
  double num_gpus = 0;
};

/// The aggregate row (one value per aggregate column; NaN where no node measured it):
/// `*_avg` are means over every device of the job: cpu_* weighted by the nodes' CPUs, gpu_* by
/// their GPUs, others unweighted; `*_min`/`*_max` min/max over the nodes; every other column
/// (memory, io_*, net_*, num_procs, any amount) is the sum over the nodes that measured it;
/// `cpu_util_node_min/max` are the min/max of the nodes' cpu_util_avg; `nodes` counts the rows.
void aggregate_row(const std::vector<std::string>& columns, std::span<const NodeRow> rows,
                   std::vector<double>& out);

}  // namespace sonde::multinode
