// The multi-node head's state machine (core/multinode_head.hpp): nodes, their statuses and
// clocks, the aggregate rows and the run's summary.
#include "core/multinode_head.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "core/multinode_aggregate.hpp"
#include "core/multinode_checks.hpp"
#include "core/nan.hpp"
#include "core/stored_summary.hpp"
#include "core/summary.hpp"
#include "core/units.hpp"

namespace sonde::multinode {
namespace {

/// A finite number, else NaN (JSON has no NaN, but 1e999 parses as infinity).
double number_or_nan(const nlohmann::json& v) {
  if (!v.is_number()) return kNaN;
  const double d = v.get<double>();
  return std::isfinite(d) ? d : kNaN;
}

}  // namespace

struct Head::Node {
  int task = -1;
  std::string name;
  bool ready = false;
  std::string status = "starting";  // starting, running, complete, lost, failed
  std::string reason;
  double status_wallclock = kNaN;
  bool ended = false;  // sent its end line
  std::string end_reason;
  nlohmann::json node_info = nlohmann::json::object();
  nlohmann::json level_sources;  ///< from its end line: where its levels' figures came from
  std::array<std::vector<std::string>, kNumLevels> columns;
  std::array<std::unordered_map<std::string, std::size_t>, kNumLevels> index;
  std::array<bool, kNumLevels> has{};
  std::array<double, kNumLevels> num_cpus{};
  double num_gpus = 0;
  std::optional<double> offset;  // max over lines of (node wallclock − head receipt)
  double first_wallclock = kNaN, last_wallclock = kNaN;
  std::uint64_t rows = 0;
  Level first_level = Level::system;
  double last_recv_monotonic = 0;
  struct Latest {
    std::vector<double> values;
    double wallclock = kNaN;
    bool valid = false;
  };
  std::array<Latest, kNumLevels> latest;
  std::array<ColumnStats, 4> stats{};  // at the summary level: cpu cores, memory, io_read/write
  ColumnStats cpu_pct;                 // at the summary level: cpu_util_avg (the imbalance rule)
  std::uint64_t busy_rows = 0;         // rows of cpu_pct above kNodeBusyPct
  std::uint64_t lines_after_end = 0;
  std::uint64_t malformed_lines = 0;  // lines whose fields have the wrong types (skipped)
  bool refused = false;               // its ready line passed the bounds: never ready
  std::string srun_reason;            // confirm_agent_ends: what srun said of its task, held
};

namespace {
Level summary_level(const std::vector<Level>& levels) {
  return std::find(levels.begin(), levels.end(), Level::slurm) != levels.end() ? Level::slurm
                                                                               : Level::system;
}
}  // namespace

Head::Head(HeadOptions options, Store& store) : opts_(std::move(options)), store_(store) {
  started_monotonic_ = monotonic_now();
  for (int k = 0; k < opts_.expected_nodes; ++k) node_of_task(k);
  nlohmann::json levels = nlohmann::json::array();
  for (Level l : opts_.levels) levels.push_back(std::string(level_name(l)));
  store_.set_manifest("multinode", {{"job", opts_.job},
                                    {"launcher", opts_.launcher},
                                    {"aggregate_levels", levels},
                                    {"grid", "head"},
                                    {"expected_nodes", opts_.expected_nodes},
                                    {"interval", opts_.interval_s}});
  write_nodes_manifest();
}

Head::~Head() = default;

Head::Node& Head::node_of_task(int task) {
  if (task >= static_cast<int>(nodes_.size())) nodes_.resize(static_cast<std::size_t>(task) + 1);
  auto& n = nodes_[static_cast<std::size_t>(task)];
  if (!n) {
    n = std::make_unique<Node>();
    n->task = task;
    const std::string guess =
        task < static_cast<int>(opts_.hostnames.size()) ? node_dir_name(opts_.hostnames[task]) : "";
    n->name = !guess.empty() ? guess : fmt::format("task{}", task);
  }
  return *n;
}

void Head::on_line(std::string_view line, double recv_wallclock, double recv_monotonic) {
  std::lock_guard lock(mutex_);
  auto labeled = split_label(line);
  if (!labeled) {
    ++unlabeled_;
    return;
  }
  // Only the allocation's tasks are nodes: any other label is garbage, before it costs a node,
  // a directory or open files.
  if (labeled->task >= opts_.expected_nodes) {
    if (outside_allocation_++ == 0)
      std::cerr << fmt::format(
          "sonde: warning: a line labeled task {}, outside the allocation's {} tasks, is "
          "skipped (such lines are counted in garbage_lines); the run goes on\n",
          labeled->task, opts_.expected_nodes);
    return;
  }
  auto doc = assembler_.feed(labeled->task, labeled->text);
  if (!doc) return;
  const std::size_t bytes = assembler_.last_bytes();
  // Bounded memory: the oldest samples go (ready/end/error lines are kept), in count and bytes.
  while (queue_.size() >= opts_.max_queued || queued_bytes_ + bytes > opts_.max_queued_bytes) {
    auto it = std::find_if(queue_.begin(), queue_.end(), [](const Message& m) {
      return !m.from_launcher && m.doc.contains("level");
    });
    if (it == queue_.end()) {
      ++dropped_;
      return;
    }
    queued_bytes_ -= it->bytes;
    queue_.erase(it);
    ++dropped_;
  }
  queued_bytes_ += bytes;
  queue_.push_back(
      Message{labeled->task, std::move(*doc), recv_wallclock, recv_monotonic, bytes, false});
}

void Head::on_launcher_stderr(std::string_view line, double recv_monotonic) {
  constexpr std::string_view kError = "srun: error: ";
  if (!line.starts_with(kError)) return;
  std::string_view rest = line.substr(kError.size());
  nlohmann::json doc = {{"what", printable(rest)}};
  int task = -1;
  constexpr std::string_view kNodeFailure = "Node failure on ";
  if (rest.starts_with(kNodeFailure)) {
    doc["node"] = node_dir_name(rest.substr(kNodeFailure.size(), 200));
  } else if (const auto at = rest.find(": task "); at != std::string_view::npos) {
    auto l = split_label(rest.substr(at + 7));
    if (!l) return;
    task = l->task;
    doc["node"] = node_dir_name(rest.substr(0, std::min<std::size_t>(at, 200)));
  } else {
    return;
  }
  std::lock_guard lock(mutex_);
  queue_.push_back(Message{task, std::move(doc), wallclock_now(), recv_monotonic, 0, true});
}

void Head::on_launcher_exit(std::string why) {
  std::lock_guard lock(mutex_);
  launcher_exit_ = std::move(why);
}

bool Head::launcher_ended() const {
  std::lock_guard lock(mutex_);
  return launcher_exit_.has_value();
}

std::uint64_t Head::garbage_lines() const {
  std::lock_guard lock(mutex_);
  return assembler_.garbage() + unlabeled_ + outside_allocation_ + malformed_;
}

int Head::ready_nodes() const {
  int n = 0;
  for (const auto& node : nodes_)
    if (node && node->ready) ++n;
  return n;
}

bool Head::all_settled() const {
  for (const auto& node : nodes_)
    if (node && node->status == "starting") return false;
  return !nodes_.empty();
}

void Head::set_status(Node& n, const char* status, std::string reason, double at_wallclock) {
  n.status = status;
  n.reason = std::move(reason);
  n.status_wallclock = at_wallclock;
  manifest_dirty_ = true;
  if (n.status == "lost" || n.status == "failed")
    std::cerr << fmt::format("sonde: warning: node {} (task {}) {}: {}; the run goes on\n", n.name,
                             n.task, n.status, n.reason);
}

namespace {

/// What a node says its CPUs or GPUs are, when sane (a count a machine may have).
double sane_count(double v) {
  return std::isfinite(v) && v >= 0 && v <= 1e6 ? v : kNaN;
}

}  // namespace

void Head::malformed(Node& n, const std::string& why) {
  ++malformed_;
  if (n.malformed_lines++ == 0)
    std::cerr << fmt::format(
        "sonde: warning: node {} (task {}) sent a line the head cannot use ({}); it is skipped, "
        "as are such lines after it (counted in garbage_lines); the run goes on\n",
        n.name, n.task, why);
}

void Head::handle_ready(Node& n, const nlohmann::json& doc) {
  if (n.ready || n.refused) return;
  std::string name = doc.contains("node") ? node_dir_name(doc["node"].get<std::string>()) : "";
  if (name.empty()) name = n.name;
  // Two tasks on one node (or a launcher that gives no distinct names): each its own entry.
  for (const auto& other : nodes_)
    if (other && other.get() != &n && other->ready && other->name == name)
      name += fmt::format("-task{}", n.task);
  n.name = name;
  const double at = number_or_nan(doc.value("wallclock", nlohmann::json()));
  // What the node says of itself goes into the manifest, rewritten at every status change, and
  // its columns into CSV headers as they are: a node whose ready line passes the bounds is
  // refused, named in the warning.
  auto refuse = [&](std::string why) {
    n.refused = true;
    set_status(n, "failed", "its ready line was refused: " + why, at);
  };
  if (auto ni = doc.find("node_info"); ni != doc.end()) {
    const std::size_t size = json_text(*ni).size();  // depth bounded by the line's
    if (size > kMaxNodeInfoBytes)
      return refuse(
          fmt::format("its node_info is {} bytes, more than {}", size, kMaxNodeInfoBytes));
    n.node_info = *ni;
  }
  const nlohmann::json empty = nlohmann::json::object();
  auto cols_it = doc.find("columns_by_level");
  const nlohmann::json& cols = cols_it != doc.end() ? *cols_it : empty;
  std::array<std::vector<std::string>, kNumLevels> names;
  for (Level l : opts_.levels) {
    auto e = cols.find(std::string(level_name(l)));
    if (e == cols.end()) continue;
    if (e->size() > kMaxColumnsPerLevel)
      return refuse(fmt::format("{} {} columns, more than {}", e->size(), level_name(l),
                                kMaxColumnsPerLevel));
    std::set<std::string_view> seen;
    for (const auto& c : *e) {
      const std::string& cn = c.get_ref<const std::string&>();
      if (cn == "time") continue;
      if (!is_valid_column_name(cn))
        return refuse(
            fmt::format("its {} column {} is not a column name ([A-Za-z_][A-Za-z0-9_]*, at most {} "
                        "bytes, not time or wallclock)",
                        level_name(l), shown(cn), kMaxColumnName));
      if (!seen.insert(cn).second)
        return refuse(fmt::format("its {} column {} is there twice", level_name(l), shown(cn)));
      names[level_index(l)].push_back(cn);
    }
  }
  n.num_gpus =
      n.node_info.contains("num_gpus") ? sane_count(number_or_nan(n.node_info["num_gpus"])) : 0;
  if (!std::isfinite(n.num_gpus)) n.num_gpus = 0;
  bool first = true;
  for (Level l : opts_.levels) {
    auto e = cols.find(std::string(level_name(l)));
    if (e == cols.end()) continue;
    const std::size_t li = level_index(l);
    n.columns[li] = std::move(names[li]);
    for (std::size_t i = 0; i < n.columns[li].size(); ++i) n.index[li][n.columns[li][i]] = i;
    if (auto ok = store_.begin_node(n.name, l, n.columns[li]); !ok) {
      std::cerr << "sonde: error: " << ok.error().message << "\n";
      continue;
    }
    n.has[li] = true;
    n.num_cpus[li] = sane_count(level_num_cpus(n.node_info, l));
    if (first) n.first_level = l;
    first = false;
  }
  n.ready = true;
  set_status(n, "running", "", at);
}

void Head::handle_sample(Node& n, const nlohmann::json& doc) {
  if (!n.ready) return;
  if (n.status != "running") {
    ++n.lines_after_end;
    return;
  }
  auto level = parse_level(doc["level"].get_ref<const std::string&>());
  if (!level || !n.has[level_index(*level)]) return;
  const std::size_t li = level_index(*level);
  const double wallclock = number_or_nan(doc["wallclock"]);
  if (!std::isfinite(wallclock)) return;
  auto& latest = n.latest[li];
  latest.values.assign(n.columns[li].size(), kNaN);
  double time = kNaN;
  for (const auto& [key, v] : doc["sample"].items()) {
    if (key == "time") {
      time = number_or_nan(v);
      continue;
    }
    auto it = n.index[li].find(key);
    if (it != n.index[li].end()) latest.values[it->second] = number_or_nan(v);
  }
  latest.wallclock = wallclock;
  latest.valid = true;
  store_.node_row(n.name, *level, time, wallclock, latest.values);
  if (*level == n.first_level) {
    ++n.rows;
    if (!std::isfinite(n.first_wallclock)) n.first_wallclock = wallclock;
    n.last_wallclock = wallclock;
  }
  if (*level == summary_level(opts_.levels)) {
    const double dt = opts_.interval_s;
    auto col = [&](const char* name) {
      auto it = n.index[li].find(name);
      return it == n.index[li].end() ? kNaN : latest.values[it->second];
    };
    n.stats[0].add(col("cpu_util_avg") / 100 * n.num_cpus[li], dt);
    // The node-imbalance rule's inputs, as `sonde runs show` computes them from the stored rows.
    const double pct = col("cpu_util_avg");
    n.cpu_pct.add(pct, dt);
    if (std::isfinite(pct) && pct > kNodeBusyPct) ++n.busy_rows;
    n.stats[1].add(col("memory"), dt);
    n.stats[2].add(col("io_read"), dt);
    n.stats[3].add(col("io_write"), dt);
  }
}

void Head::handle_launcher(const Message& m) {
  const std::string name = m.doc.value("node", std::string());
  const std::string what = "srun: " + m.doc.value("what", std::string());
  Node* target = nullptr;
  if (m.task >= 0 && m.task < static_cast<int>(nodes_.size())) target = nodes_[m.task].get();
  for (const auto& n : nodes_)
    if (!target && n && !name.empty() && n->name == name) target = n.get();
  // A node whose agent sent its end line ended well, whatever srun says of it afterwards.
  if (target && opts_.confirm_agent_ends && target->status == "running") {
    target->srun_reason = what;  // confirm_ends
    return;
  }
  if (target && !target->ended && (target->status == "running" || target->status == "starting"))
    set_status(*target, target->status == "running" ? "lost" : "failed", what, m.recv_wallclock);
}

void Head::handle(Message& m) {
  // srun's own reports come from its stderr; an agent's line that looks like one is not one.
  if (m.from_launcher) return handle_launcher(m);
  if (m.task < 0 || m.task >= opts_.expected_nodes) return;  // on_line's bound
  Node& n = node_of_task(m.task);
  n.last_recv_monotonic = std::max(n.last_recv_monotonic, m.recv_monotonic);
  const nlohmann::json& doc = m.doc;
  if (const std::string fault = line_fault(doc, opts_.levels); !fault.empty())
    return malformed(n, fault);
  if (auto w = doc.find("wallclock"); w != doc.end()) {
    const double d = number_or_nan(*w) - m.recv_wallclock;
    if (std::isfinite(d) && (!n.offset || d > *n.offset)) n.offset = d;
  }
  const auto st = doc.find("status");
  const std::string_view status =
      st != doc.end() ? std::string_view(st->get_ref<const std::string&>()) : std::string_view();
  if (status == "ready") {
    handle_ready(n, doc);
  } else if (status == "end") {
    n.ended = true;
    n.end_reason = printable(doc.value("reason", std::string()));
    // Where the node's levels came from (the job's cgroup, less the agent's own time): into the
    // manifest as the node said it, bounded like its node_info.
    if (auto ls = doc.find("level_sources");
        ls != doc.end() && ls->is_object() && json_text(*ls).size() <= kMaxNodeInfoBytes) {
      n.level_sources = *ls;
      manifest_dirty_ = true;
    }
  } else if (status == "error") {
    if (n.status == "starting" || n.status == "running")
      set_status(n, "failed",
                 "the agent reported: " + printable(doc.value("error", std::string("no text"))),
                 wallclock_now());
  } else if (st == doc.end() && doc.contains("level")) {
    handle_sample(n, doc);
  }
}

void Head::check_faults(double now_monotonic, double now_wallclock) {
  std::optional<std::string> exit;
  {
    std::lock_guard lock(mutex_);
    exit = launcher_exit_;
  }
  const double lost_after = opts_.lost_after_intervals * opts_.interval_s;
  for (auto& np : nodes_) {
    if (!np) continue;
    Node& n = *np;
    if (n.status == "running") {
      const bool deferred = opts_.confirm_agent_ends && !apply_ends_;
      if (deferred && (n.ended || exit || !n.srun_reason.empty()))
        continue;  // the job's end, or a fault: confirm_ends
      if (!n.srun_reason.empty() && !n.ended)
        set_status(n, "lost", n.srun_reason, now_wallclock);
      else if (n.ended)
        set_status(n, "lost",
                   fmt::format("the agent ended while the run went on ({})",
                               n.end_reason.empty() ? "no reason given" : n.end_reason),
                   now_wallclock);
      else if (exit)
        set_status(n, "lost", fmt::format("the launcher ended: {}", *exit), now_wallclock);
      else if (now_monotonic - n.last_recv_monotonic > lost_after)
        set_status(n, "lost",
                   fmt::format("no line for {:.1f} s ({:g} intervals); its last row was at "
                               "wallclock {:.3f}",
                               now_monotonic - n.last_recv_monotonic, opts_.lost_after_intervals,
                               n.last_wallclock),
                   now_wallclock);
    } else if (n.status == "starting") {
      if (exit)
        set_status(n, "failed", fmt::format("no ready line; the launcher ended: {}", *exit),
                   now_wallclock);
      else if (now_monotonic - started_monotonic_ > opts_.start_grace_s)
        set_status(n, "failed", fmt::format("no ready line within {:g} s", opts_.start_grace_s),
                   now_wallclock);
    }
  }
}

void Head::take_queue() {
  {
    std::lock_guard lock(mutex_);
    work_.swap(queue_);
    queued_bytes_ = 0;
  }
  for (Message& m : work_) {
    // line_fault checked every field the head reads; this is for what it did not foresee
    // (std::bad_alloc): that line is lost, never the run.
    try {
      handle(m);
    } catch (const std::exception& e) {
      ++malformed_;
      std::cerr << fmt::format("sonde: warning: a line of task {} was skipped: {}\n", m.task,
                               printable(e.what()));
    }
  }
  work_.clear();
}

bool Head::agents_ending() const {
  const bool exited = launcher_ended();
  for (const auto& n : nodes_)
    if (n && n->status == "running" && (n->ended || exited || !n->srun_reason.empty())) return true;
  return false;
}

void Head::confirm_ends(bool job_running, double now_monotonic) {
  if (job_running) {
    apply_ends_ = true;
    check_faults(now_monotonic, wallclock_now());
    apply_ends_ = false;
  } else {
    for (auto& n : nodes_)
      if (n && n->status == "running") set_status(*n, "complete", "", wallclock_now());
  }
  if (manifest_dirty_) write_nodes_manifest();
}

void Head::poll(double now_monotonic) {
  take_queue();
  check_faults(now_monotonic, wallclock_now());
  if (!schema_fixed_) fix_schema(now_monotonic);
  if (manifest_dirty_) write_nodes_manifest();
}

bool Head::fix_schema(double now_monotonic) {
  const int ready = ready_nodes();
  if (ready == 0) return false;
  if (!all_settled() && now_monotonic - started_monotonic_ <= opts_.start_grace_s) return false;
  nlohmann::json levels = store_.manifest("levels");
  if (!levels.is_array()) levels = nlohmann::json::array();
  nlohmann::json columns = store_.manifest("columns_by_level");
  if (!columns.is_object()) columns = nlohmann::json::object();
  nlohmann::json files = store_.manifest("files");
  if (!files.is_object()) files = nlohmann::json::object();
  for (Level l : opts_.levels) {
    std::vector<std::vector<std::string>> node_columns;
    for (const auto& n : nodes_)
      if (n && n->ready && n->has[level_index(l)])
        node_columns.push_back(n->columns[level_index(l)]);
    if (node_columns.empty()) continue;
    auto cols = aggregate_columns(node_columns);
    if (auto ok = store_.begin_aggregate(l, cols); !ok) {
      std::cerr << "sonde: error: " << ok.error().message << "\n";
      continue;
    }
    const std::string lname(level_name(l));
    levels.push_back(lname);
    columns[lname] = cols;
    files[lname] = fmt::format("perf_{}.csv", lname);
    agg_columns_[level_index(l)] = std::move(cols);
  }
  schema_fixed_ = true;
  store_.set_manifest("levels", levels);
  store_.set_manifest("columns_by_level", columns);
  store_.set_manifest("files", files);
  return true;
}

void Head::tick(double time_s, double wallclock_s) {
  poll(time_s);
  if (!schema_fixed_) return;
  const double I = opts_.interval_s;
  const Level sl = summary_level(opts_.levels);
  for (Level l : opts_.levels) {
    const std::size_t li = level_index(l);
    if (agg_columns_[li].empty()) continue;
    std::vector<NodeRow> rows;
    double cores = kNaN;
    for (const auto& np : nodes_) {
      if (!np || np->status != "running" || !np->has[li] || !np->latest[li].valid) continue;
      const Node& n = *np;
      // The node's row on the head's grid: its own wallclock less its clock's offset, within
      // the interval that ends at this tick (a row may serve two ticks when they straddle it).
      const double aligned = n.latest[li].wallclock - n.offset.value_or(0);
      if (!(aligned > wallclock_s - 1.5 * I && aligned <= wallclock_s + 0.5 * I)) continue;
      rows.push_back(NodeRow{&n.columns[li], n.latest[li].values, n.num_cpus[li], n.num_gpus});
      if (l == sl) {
        auto it = n.index[li].find("cpu_util_avg");
        if (it != n.index[li].end() && std::isfinite(n.latest[li].values[it->second]))
          cores = (std::isfinite(cores) ? cores : 0) +
                  n.latest[li].values[it->second] / 100 * n.num_cpus[li];
      }
    }
    aggregate_row(agg_columns_[li], rows, agg_row_);
    store_.aggregate_row(l, time_s, wallclock_s, agg_row_);
    if (l == sl) {
      ++agg_rows_;
      auto at = [&](const char* name) {
        for (std::size_t i = 0; i < agg_columns_[li].size(); ++i)
          if (agg_columns_[li][i] == name) return agg_row_[i];
        return kNaN;
      };
      agg_stats_[0].add(cores, I);
      agg_stats_[1].add(at("memory"), I);
      agg_stats_[2].add(at("io_read"), I);
      agg_stats_[3].add(at("io_write"), I);
    }
  }
  last_tick_wallclock_ = wallclock_s;
}

void Head::finish(double now_monotonic) {
  take_queue();
  const double now = wallclock_now();
  for (auto& np : nodes_) {
    if (!np) continue;
    Node& n = *np;
    if (n.status == "running") {
      if (n.ended)
        set_status(n, "complete", "", now);
      else
        set_status(n, "lost", "no end line from the agent when the run ended", now);
    } else if (n.status == "starting") {
      set_status(n, "failed", "no ready line before the run ended", now);
    }
  }
  (void)now_monotonic;
  nlohmann::json mn = store_.manifest("multinode");
  if (!mn.is_object()) mn = nlohmann::json::object();
  {
    std::lock_guard lock(mutex_);
    mn["garbage_lines"] = assembler_.garbage() + unlabeled_ + outside_allocation_ + malformed_;
    mn["reassembled_lines"] = assembler_.reassembled();
    mn["dropped_lines"] = dropped_;
    mn["launcher_exit"] = launcher_exit_ ? nlohmann::json(*launcher_exit_) : nlohmann::json();
  }
  mn["summary"] = summary_json();
  // What 100 % of the aggregate's cpu_util_avg is: the CPUs of the nodes, per level.
  nlohmann::json cpus = nlohmann::json::object();
  for (Level l : opts_.levels) {
    double sum = 0;
    for (const auto& n : nodes_)
      if (n && n->ready && n->has[level_index(l)] && std::isfinite(n->num_cpus[level_index(l)]))
        sum += n->num_cpus[level_index(l)];
    cpus[std::string(level_name(l))] = sum;
  }
  mn["aggregate_num_cpus"] = cpus;
  store_.set_manifest("multinode", mn);
  write_nodes_manifest();
}

nlohmann::json Head::nodes_json() const {
  std::vector<const Node*> sorted;
  for (const auto& n : nodes_)
    if (n) sorted.push_back(n.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const Node* a, const Node* b) { return a->name < b->name; });
  nlohmann::json out = nlohmann::json::array();
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  for (const Node* n : sorted) {
    nlohmann::json cols = nlohmann::json::object();
    for (Level l : opts_.levels)
      if (n->has[level_index(l)]) cols[std::string(level_name(l))] = n->columns[level_index(l)];
    const bool final_status =
        n->status == "complete" || n->status == "lost" || n->status == "failed";
    out.push_back(
        {{"name", n->name},
         {"task", n->task},
         {"head", !opts_.head_host.empty() && n->name == opts_.head_host},
         {"node_info", n->node_info},
         {"level_sources", n->level_sources},
         {"clock_offset_s", n->offset ? nlohmann::json(*n->offset) : nlohmann::json()},
         {"status", n->status},
         {"reason", n->reason},
         {"status_wallclock",
          final_status || n->status == "running" ? num(n->status_wallclock) : nlohmann::json()},
         {"first_wallclock", num(n->first_wallclock)},
         {"last_wallclock", num(n->last_wallclock)},
         {"rows", n->rows},
         {"malformed_lines", n->malformed_lines},
         {"columns_by_level", cols}});
  }
  return out;
}

void Head::write_nodes_manifest() {
  manifest_dirty_ = false;
  store_.set_manifest("nodes", nodes_json());
}

nlohmann::json Head::summary_json() const {
  const Level sl = summary_level(opts_.levels);
  auto figures = [](const std::array<ColumnStats, 4>& s, double interval) {
    auto mean = [](const ColumnStats& c) {
      return c.count ? nlohmann::json(c.sum / static_cast<double>(c.count)) : nlohmann::json();
    };
    (void)interval;
    return nlohmann::json{
        {"cpu_mean_cores", mean(s[0])},
        {"cpu_peak_cores", s[0].count ? nlohmann::json(s[0].max) : nlohmann::json()},
        {"memory_peak_gib", s[1].count ? nlohmann::json(s[1].max) : nlohmann::json()},
        {"read_bytes", s[2].count ? nlohmann::json(s[2].integral) : nlohmann::json()},
        {"written_bytes", s[3].count ? nlohmann::json(s[3].integral) : nlohmann::json()}};
  };
  nlohmann::json j;
  j["job"] = opts_.job;
  j["level"] = std::string(level_name(sl));
  nlohmann::json agg = figures(agg_stats_, opts_.interval_s);
  agg["rows"] = agg_rows_;
  double cpus = 0;
  int counted = 0;
  nlohmann::json per_node = nlohmann::json::array();
  std::vector<TagInputs::NodeCpu> node_cpu;
  std::vector<const Node*> sorted;
  for (const auto& n : nodes_)
    if (n) sorted.push_back(n.get());
  std::sort(sorted.begin(), sorted.end(),
            [](const Node* a, const Node* b) { return a->name < b->name; });
  for (const Node* n : sorted) {
    nlohmann::json e = figures(n->stats, opts_.interval_s);
    e["name"] = n->name;
    e["status"] = n->status;
    e["reason"] = n->reason;
    e["rows"] = n->rows;
    e["head"] = !opts_.head_host.empty() && n->name == opts_.head_host;
    e["clock_offset_s"] = n->offset ? nlohmann::json(*n->offset) : nlohmann::json();
    if (auto m = n->cpu_pct.mean()) {
      e["cpu_mean_pct"] = *m;
      e["cpu_peak_pct"] = n->cpu_pct.max;
      node_cpu.push_back(
          {*m, static_cast<double>(n->busy_rows) / static_cast<double>(n->cpu_pct.count)});
    }
    const double c = n->num_cpus[level_index(sl)];
    e["num_cpus"] = std::isfinite(c) && c > 0 ? nlohmann::json(c) : nlohmann::json();
    if (std::isfinite(c) && c > 0 && n->ready) {
      cpus += c;
      ++counted;
    }
    per_node.push_back(e);
  }
  agg["num_cpus"] = counted ? nlohmann::json(cpus) : nlohmann::json();
  j["nodes"] = static_cast<int>(sorted.size());
  j["aggregate"] = agg;
  j["per_node"] = per_node;
  j["tags"] = nlohmann::json::array();
  if (node_imbalance(node_cpu)) j["tags"].push_back("node-imbalance");
  return j;
}

std::string Head::summary_text(const nlohmann::json& s) {
  auto num = [](const nlohmann::json& o, const char* key) -> std::optional<double> {
    if (!o.contains(key) || !o[key].is_number()) return std::nullopt;
    return o[key].get<double>();
  };
  auto line = [&](const std::string& name, const nlohmann::json& o) {
    std::string out = fmt::format("  {:<12}", name);
    if (auto m = num(o, "cpu_mean_cores"))
      out += fmt::format(" CPU mean {:.2f} cores, peak {:.2f}", *m,
                         num(o, "cpu_peak_cores").value_or(0));
    else
      out += " CPU -";
    if (auto c = num(o, "num_cpus")) out += fmt::format(" of {:g}", *c);
    if (auto m = num(o, "memory_peak_gib")) out += fmt::format("; memory peak {:.3f} GiB", *m);
    if (auto r = num(o, "read_bytes"))
      out += fmt::format("; I/O read {}, written {}", bytes_text(*r),
                         bytes_text(num(o, "written_bytes").value_or(0)));
    return out;
  };
  std::string out = fmt::format(
      "sonde multi-node summary (job {}, {} nodes, {} level, {} rows on the head's grid)\n",
      s.value("job", std::string()), s.value("nodes", 0), s.value("level", std::string()),
      s.contains("aggregate") ? s["aggregate"].value("rows", 0) : 0);
  if (s.contains("aggregate")) out += line("all nodes", s["aggregate"]) + "\n";
  // The nodes as `sonde runs show` lists them.
  if (s.contains("per_node") && s["per_node"].is_array())
    out += summary_nodes_text({{"nodes", s["per_node"]}, {"node_level", s.value("level", "")}});
  std::string tags;
  if (s.contains("tags") && s["tags"].is_array())
    for (const auto& t : s["tags"])
      if (t.is_string()) tags += (tags.empty() ? "" : ", ") + t.get<std::string>();
  out += fmt::format("  tags         {}\n", tags.empty() ? std::string("none") : tags);
  (void)kGiB;
  return out;
}

}  // namespace sonde::multinode
