#pragma once
// One run for a multi-node Slurm job (docs/multinode.md): the head reads the JSON lines of one
// `sonde agent` per node through a launcher that labels them (`srun --label`: "K: <line>"),
// writes each node's rows as they come, and one aggregate row per level on the head's own time
// grid. This file holds what needs no process or thread: the reassembly of labeled lines, the
// aggregation rule, the store the head writes through (the CSV run directory; a SQLite store
// plugs in behind the same interface) and the head's bookkeeping of nodes, clocks and faults.
// The launcher (srun as a child process, its reader thread) lives in src/cli/multinode.cpp.
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/level.hpp"
#include "core/result.hpp"
#include "core/summary.hpp"

namespace sonde::multinode {

// ---- Lines from the launcher -------------------------------------------------------------------

/// "K: text" (srun --label; K may be padded with spaces): the task index and the text after ": ".
struct Labeled {
  int task = -1;
  std::string_view text;
};
std::optional<Labeled> split_label(std::string_view line);

/// Bounds on what the head takes from an agent (docs/multinode.md, "Bounds"): a line nested
/// deeper is garbage before it is parsed (nlohmann's copy and dump recurse); a ready line whose
/// node_info or columns pass these refuses its node.
inline constexpr int kMaxLineDepth = 32;
inline constexpr std::size_t kMaxNodeInfoBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxColumnsPerLevel = 4096;
inline constexpr std::size_t kMaxColumnName = 128;

/// A column name a node may send: [A-Za-z_][A-Za-z0-9_]*, at most kMaxColumnName bytes, not
/// `time` or `wallclock` (the CSV's own columns). What every CSV header and SQLite table can hold
/// as it is.
bool is_valid_column_name(std::string_view name);

/// Reassembles one task's JSON lines from labeled pieces. A piece that completes a JSON object
/// (alone, or appended to the task's pending fragment) is returned; a piece that is the start of
/// one is kept as the fragment until a later piece closes it, at most `max_fragment` bytes; a
/// piece that is by itself a whole object while a fragment is pending drops the fragment (it was
/// not continued). Anything else is garbage, counted and dropped: documents nested deeper than
/// `max_depth` or longer than `max_document` bytes included. Linear in the bytes received: each
/// task's fragment keeps its validator's state (what comes next, nesting, inside a string) and is
/// parsed once, when its top-level object closes: its grammar is checked as the bytes come, so a
/// fragment that a piece does not continue is dropped at that piece. Never throws.
class LineAssembler {
 public:
  explicit LineAssembler(std::size_t max_fragment = std::size_t{1} << 20,
                         std::size_t max_document = std::size_t{1} << 20,
                         int max_depth = kMaxLineDepth)
      : max_fragment_(max_fragment),
        max_document_(max_document),
        max_depth_(std::clamp(max_depth, 1, 64)) {}
  std::optional<nlohmann::json> feed(int task, std::string_view piece);
  std::uint64_t garbage() const { return garbage_; }
  std::uint64_t reassembled() const { return reassembled_; }
  std::size_t pending() const { return fragments_.size(); }
  /// The bytes of the last document returned (its pieces together).
  std::size_t last_bytes() const { return last_bytes_; }

 private:
  /// Where a JSON text stands after the bytes validated so far: a push-down automaton of
  /// JSON's grammar (UTF-8 and numbers' range are left to the parse at the close).
  struct Scan {
    enum class Want : std::uint8_t {
      object,
      key_or_close,
      key,
      colon,
      value_or_close,
      value,
      comma_or_close,
      end
    };
    enum class Token : std::uint8_t { none, string, escape, hex, number, literal };
    Want want = Want::object;
    Token token = Token::none;
    bool key = false;          ///< the string read is an object's key
    std::uint8_t at = 0;       ///< hex digits left; characters of the literal matched
    std::uint8_t number = 0;   ///< where in a number's grammar
    const char* literal = "";  ///< "true", "false" or "null"
    int depth = 0;
    std::uint64_t objects = 0;  ///< bit d: the container at depth d + 1 is an object
  };
  enum class Step { open, closed, bad };
  Step scan(Scan& s, std::string_view bytes) const;
  std::optional<nlohmann::json> fresh(int task, std::string_view piece);
  std::optional<nlohmann::json> complete(const std::string& text);
  struct Fragment {
    std::string text;
    Scan scan;
  };
  std::size_t max_fragment_, max_document_;
  int max_depth_;
  std::unordered_map<int, Fragment> fragments_;
  std::uint64_t garbage_ = 0, reassembled_ = 0;
  std::size_t last_bytes_ = 0;
};

// ---- Aggregation over nodes --------------------------------------------------------------------

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

// ---- Where the head writes ---------------------------------------------------------------------

/// The seam between the head and its output: the CSV run directory (make_csv_store); a SQLite
/// store implements the same calls (node rows with their node's name, aggregate rows with '').
class Store {
 public:
  virtual ~Store() = default;
  /// Creates `node`'s table for `level` (CSV: nodes/<node>/perf_<level>.csv with its header).
  virtual Result<void> begin_node(const std::string& node, Level level,
                                  const std::vector<std::string>& columns) = 0;
  /// One row of `node` as the node sent it: its own monotonic `time` and realtime `wallclock`.
  virtual void node_row(const std::string& node, Level level, double time_s, double wallclock_s,
                        std::span<const double> values) = 0;
  /// Creates the aggregate table of `level` (CSV: perf_<level>.csv).
  virtual Result<void> begin_aggregate(Level level, const std::vector<std::string>& columns) = 0;
  /// One aggregate row on the head's grid (head monotonic `time`, head realtime `wallclock`).
  virtual void aggregate_row(Level level, double time_s, double wallclock_s,
                             std::span<const double> values) = 0;
  /// Sets a key of the run's manifest ("multinode", "nodes", "levels", ...) and rewrites it.
  virtual void set_manifest(const std::string& key, nlohmann::json value) = 0;
  /// The manifest key's value as last set (null when never).
  virtual nlohmann::json manifest(const std::string& key) const = 0;
  /// A write failed (reported once); later rows are dropped.
  virtual bool failed() const = 0;
};

/// The run directory `dir` (already created by the run's own sink, or created here when
/// `set_key` is empty, with `manifest` as its first manifest.json). `manifest`'s keys are the
/// base that manifest() returns (the head merges "levels", "files", "node_info"… into them).
/// `set_key` sets a key of the manifest the run's own sink owns (RunDirSink::update).
Result<std::unique_ptr<Store>> make_csv_store(
    const std::string& dir, std::function<void(const std::string&, nlohmann::json)> set_key,
    nlohmann::json manifest = nullptr);

// ---- The head ----------------------------------------------------------------------------------

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
