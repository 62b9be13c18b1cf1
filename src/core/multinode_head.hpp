#pragma once
// The head of a multi-node Slurm run (docs/multinode.md): it reads the JSON lines of one
// `sonde agent` per node through a launcher that labels them (`srun --label`: "K: <line>"),
// writes each node's rows as they come, and one aggregate row per level on the head's own time
// grid, through a Store (core/multinode_store.hpp). This is its bookkeeping of nodes, clocks and
// faults; it needs no process or thread of its own. The launcher (srun as a child process, its
// reader thread) lives in src/cli/multinode_launcher.cpp.
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/multinode_lines.hpp"
#include "core/multinode_store.hpp"
#include "core/summary.hpp"

namespace sonde::multinode {

struct HeadOptions {
  std::string job;
  int expected_nodes = 0;
  /// The allocation's node names in task order (scontrol show hostnames), when known: names the
  /// tasks that never said ready.
  std::vector<std::string> hostnames;
  double interval_s = 1;
  std::vector<Level> levels;  ///< the agents' levels (slurm, system)
  std::vector<std::string> launcher;
  std::string head_host;  ///< the head's hostname: that node is marked "head"
  /// A task without a ready line after this long (from the launch) is failed.
  double start_grace_s = 30;
  /// A node without a line for this many intervals is lost.
  double lost_after_intervals = 5;
  /// record --slurm-job: an agent or the launcher that ends may be the job's end, not a fault:
  /// it is held until confirm_ends() says whether the job still runs.
  bool confirm_agent_ends = false;
  /// Parsed lines waiting for the main thread, over all nodes, and their bytes as received;
  /// beyond either the oldest samples are dropped (counted).
  std::size_t max_queued = 1 << 16;
  std::size_t max_queued_bytes = std::size_t{64} << 20;
};

class Head {
 public:
  Head(HeadOptions options, Store& store);
  ~Head();
  Head(const Head&) = delete;
  Head& operator=(const Head&) = delete;

  /// Any thread (the launcher's reader): one line of the launcher's stdout, as received, with
  /// the head's realtime and monotonic clocks at its receipt.
  void on_line(std::string_view line, double recv_wallclock, double recv_monotonic);
  /// Any thread: the launcher ended (`why`: "srun exited with status 1", ...).
  void on_launcher_exit(std::string why);
  /// Any thread: one line of the launcher's stderr. srun's reports of a task that ended
  /// ("srun: error: n2: task 1: Killed") or of a node that failed ("srun: error: Node failure on
  /// n3") make that node lost at once, with srun's words as the reason.
  void on_launcher_stderr(std::string_view line, double recv_monotonic);

  /// Main thread: handles what was received (node files, statuses). `now_monotonic` decides
  /// which node is lost.
  void poll(double now_monotonic);
  /// Main thread: poll, then one aggregate row per level at the head's time.
  void tick(double time_s, double wallclock_s);
  /// Main thread, once the launcher was stopped: handles what is left and writes the final
  /// statuses. `stopped_by_head`: nodes that sent their end line are complete.
  void finish(double now_monotonic);

  /// Tasks that sent their ready line / that will send nothing more.
  int ready_nodes() const;
  bool all_settled() const;  ///< every expected node is ready, lost or failed
  bool launcher_ended() const;
  /// confirm_agent_ends: an agent sent its end line, or the launcher ended, while its node runs.
  bool agents_ending() const;
  /// confirm_agent_ends: the job still runs (the ends are faults: lost), or it ended (every
  /// running node is complete).
  void confirm_ends(bool job_running, double now_monotonic);
  /// Main thread: lines skipped (unlabeled, outside the allocation, not JSON objects, nested or
  /// sized past the bounds, fields of the wrong types).
  std::uint64_t garbage_lines() const;
  /// The manifest's "nodes" array (sorted by name).
  nlohmann::json nodes_json() const;
  /// The summary: aggregate then one entry per node, at the slurm level (else system).
  nlohmann::json summary_json() const;
  static std::string summary_text(const nlohmann::json& summary);

 private:
  struct Node;
  struct Message {
    int task = -1;
    nlohmann::json doc;
    double recv_wallclock = 0, recv_monotonic = 0;
    std::size_t bytes = 0;       ///< as received (the queue's bound)
    bool from_launcher = false;  ///< srun's own report (on_launcher_stderr), never an agent's
  };
  Node& node_of_task(int task);
  void take_queue();
  void handle(Message& m);
  void handle_launcher(const Message& m);
  void malformed(Node& n, const std::string& why);
  void handle_ready(Node& n, const nlohmann::json& doc);
  void handle_sample(Node& n, const nlohmann::json& doc);
  void check_faults(double now_monotonic, double now_wallclock);
  void set_status(Node& n, const char* status, std::string reason, double at_wallclock);
  bool fix_schema(double now_monotonic);
  void write_nodes_manifest();

  HeadOptions opts_;
  Store& store_;
  double started_monotonic_ = 0;
  // Shared with the reader thread.
  mutable std::mutex mutex_;
  std::vector<Message> queue_;
  LineAssembler assembler_;
  std::size_t queued_bytes_ = 0;
  std::uint64_t dropped_ = 0;
  std::uint64_t unlabeled_ = 0;
  std::uint64_t outside_allocation_ = 0;  ///< lines of a task the allocation does not have
  std::optional<std::string> launcher_exit_;
  // Main thread.
  std::vector<Message> work_;
  std::vector<std::unique_ptr<Node>> nodes_;  ///< by task index
  bool apply_ends_ = false;                   ///< confirm_ends(true) in progress
  bool schema_fixed_ = false;
  std::array<std::vector<std::string>, kNumLevels> agg_columns_;
  std::array<ColumnStats, 4> agg_stats_{};  ///< cpu cores, memory, io_read, io_write
  std::uint64_t agg_rows_ = 0;
  double last_tick_wallclock_ = 0;
  bool manifest_dirty_ = false;
  std::uint64_t malformed_ = 0;  ///< parsed lines whose fields have the wrong types
  std::vector<double> agg_row_;
};

}  // namespace sonde::multinode
