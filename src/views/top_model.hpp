#pragma once
// `sonde top`'s model: one snapshot of the node (host figures, GPUs, every process) and the pure
// functions over it that the view applies: filter, sort, tree, group by user/job/container. No
// I/O here (the snapshot is made by top_collect.hpp, drawn by top_render.hpp), so that the unit
// tests run it on captured data.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "views/status.hpp"

namespace sonde::top {

/// One process as `sonde top` shows it.
struct ProcRow {
  int pid = 0;
  int ppid = 0;
  std::uint32_t uid = 0;
  std::string user;
  std::string job;        ///< Slurm job id, "" outside a job
  std::string container;  ///< "<runtime>:<id>" (status' container field), "" outside one
  int ns_pid = 0;         ///< its pid in its own PID namespace when that is another; else 0
  std::string comm;       ///< the kernel's name (stat)
  std::string command;    ///< the command line, arguments joined by spaces; "[comm]" if none
  std::uint64_t starttime_ticks = 0;
  std::optional<double> cpu_percent;  ///< over the refresh interval (100: one core)
  std::uint64_t rss_bytes = 0;
  /// Proportional set size (shared pages divided among their processes): the memory shown and
  /// summed; nullopt where smaps_rollup cannot be read (RSS is shown instead).
  std::optional<std::uint64_t> pss_bytes;
  std::optional<double> read_bps, write_bps;  ///< storage I/O (/proc/<pid>/io), bytes/s
  std::optional<std::uint64_t> gpu_mem_bytes;
  std::optional<double> gpu_sm_percent;  ///< summed over its GPUs
  std::vector<int> gpus;                 ///< indices of the GPUs it uses
  std::vector<status::Field> fields;     ///< the status plugins' fields
  std::size_t count = 1;                 ///< processes in a group row (group_rows)
  /// The memory shown: Pss, else RSS.
  std::uint64_t mem_bytes() const { return pss_bytes.value_or(rss_bytes); }
};

/// The node at one refresh.
struct Snapshot {
  std::string hostname;
  std::chrono::system_clock::time_point time;
  double interval_s = 0;  ///< what the rates and CPU figures cover; 0 at the first refresh
  std::vector<int> cpu_ids;
  std::vector<std::optional<double>> core_percent;  ///< per CPU id, busy %
  std::optional<double> cpu_percent;                ///< all CPUs, busy %
  std::optional<double> mem_total_bytes, mem_used_bytes, swap_total_bytes, swap_used_bytes;
  std::optional<double> load1, load5, load15;
  std::optional<double> net_rx_bps, net_tx_bps, disk_read_bps, disk_write_bps;
  std::optional<double> cpu_package_power_w, gpu_power_w;
  std::string nvidia_driver, amd_driver;
  std::vector<std::string> notes;                ///< why a GPU library is absent
  std::vector<status::GpuRow> gpus;              ///< as `sonde status` queried them
  std::vector<std::vector<double>> gpu_history;  ///< per GPU: utilisation, oldest first
  std::vector<std::string> plugin_lines;         ///< the status plugins' header and footer lines
  std::vector<ProcRow> procs;
  std::size_t threads = 0;  ///< summed over the processes
  std::size_t running = 0;  ///< processes in state R
};

enum class SortKey {
  pid,
  user,
  job,
  container,
  nspid,
  cpu,
  mem,
  read,
  write,
  gpu_mem,
  gpu_sm,
  command
};
enum class GroupBy { none, user, job, container };

std::string_view sort_key_name(SortKey k);
std::string_view group_name(GroupBy g);
/// Text keys sort ascending, figures descending, unless reversed.
bool descending_by_default(SortKey k);

/// What the user chose to see.
struct ViewState {
  SortKey sort = SortKey::cpu;
  bool reverse = false;  ///< against the key's natural direction
  bool tree = false;
  GroupBy group = GroupBy::none;
  std::string filter;       ///< case-insensitive substring of pid, user, job, container, command
  std::string user_filter;  ///< only this user ("" all)
  std::string job_filter;   ///< only this Slurm job ("" all)
};

/// A row ready to draw: the process (or group), and its tree prefix in tree mode.
struct DisplayRow {
  ProcRow row;
  std::string tree_prefix;  ///< "├─ ", "│  └─ ", …; "" outside tree mode
};

bool matches(const ProcRow& r, const ViewState& v);
/// Sorts by the state's key and direction; ties by pid.
void sort_rows(std::vector<ProcRow>& rows, const ViewState& v);
/// One row per user, job or container (key in that field; "-" for none): sums of CPU, memory,
/// I/O and GPU figures; `count` processes; `pid` the lowest of them.
std::vector<ProcRow> group_rows(const std::vector<ProcRow>& rows, GroupBy by);
/// Parents before their children, siblings in sort order; a process whose parent is not among
/// `rows` is a root.
std::vector<DisplayRow> tree_rows(std::vector<ProcRow> rows, const ViewState& v);
/// filter, then group, tree or sort: what the table shows, in order.
std::vector<DisplayRow> arrange(const std::vector<ProcRow>& rows, const ViewState& v);

/// NUL-separated text (/proc/<pid>/cmdline, environ) as its strings.
std::vector<std::string> split_nul(std::string_view text);

}  // namespace sonde::top
