#include "sinks/session_sinks.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sinks/json_stream.hpp"

namespace sonde {
namespace {

/// RunDirSink and SqliteSink: the same manifest keys, rows and end.
template <class Store>
class ManifestSink final : public Sink {
 public:
  ManifestSink(std::unique_ptr<Store> store, std::string name)
      : store_(std::move(store)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  SinkStatus begin(const RunStart& start) override {
    if (start.target_pid) store_->update("target_pid", *start.target_pid);
    // The first row covers the interval from this baseline (taken just before the command).
    if (start.baseline_time) store_->update("baseline_time", *start.baseline_time);
    if (!start.priority.is_null()) store_->update("priority", start.priority);
    if (!start.level_sources.is_null()) store_->update("level_sources", start.level_sources);
    return SinkStatus::ok;
  }
  SinkStatus write(const Engine::Tick& tick) override {
    store_->write(tick);
    return store_->failed() ? SinkStatus::failed : SinkStatus::ok;
  }
  void end(const RunEnd& end) override {
    // A final interval shorter than a quarter of the interval (the wait is capped) is marked.
    if (end.short_final_interval_s)
      store_->update("short_final_interval",
                     {{"final_interval_s", *end.short_final_interval_s},
                      {"why", "the target exited shortly after the previous tick"}});
    if (!end.degraded.is_null()) store_->update("degraded", end.degraded);
    if (!end.interval_warning.is_null()) store_->update("interval_warning", end.interval_warning);
    if (!end.level_sources.is_null()) store_->update("level_sources", end.level_sources);
    if (!end.notes.empty()) store_->update("notes", end.notes);
    store_->finish(end.outcome, end.summary, end.ticks, end.ticks_missed);
  }
  std::string location() const override {
    if constexpr (std::is_same_v<Store, RunDirSink>)
      return store_->dir();
    else
      return store_->location();
  }

 private:
  std::unique_ptr<Store> store_;
  std::string name_;
};

class StreamSink final : public Sink {
 public:
  StreamSink(int fd, const Engine& engine, int protocol) : stream_(fd, protocol), engine_(engine) {}
  std::string name() const override { return "the JSON stream"; }
  SinkStatus begin(const RunStart&) override {
    return stream_.ready(engine_) ? SinkStatus::ok : SinkStatus::closed;
  }
  SinkStatus write(const Engine::Tick& tick) override {
    // The stream's first sample is the first with every rate defined (JUmPER's sanity checks
    // reject nulls): the first tick is only a baseline there.
    if (tick.ctx.tick == 0) return SinkStatus::ok;
    return stream_.write(engine_, tick) ? SinkStatus::ok : SinkStatus::closed;
  }

 private:
  JsonStreamSink stream_;
  const Engine& engine_;
};

class StatsSink final : public Sink {
 public:
  explicit StatsSink(RunStats& stats) : stats_(stats) {}
  std::string name() const override { return "the run's statistics"; }
  SinkStatus write(const Engine::Tick& tick) override {
    stats_.add(tick);
    return SinkStatus::ok;
  }

 private:
  RunStats& stats_;
};

class ProcessTableSink final : public Sink {
 public:
  ProcessTableSink(ProcessTable& table, Level level) : table_(table), level_(level) {}
  std::string name() const override { return "the run's process table"; }
  SinkStatus begin(const RunStart& start) override {
    origin_ = start.baseline_time;
    return SinkStatus::ok;
  }
  SinkStatus write(const Engine::Tick& tick) override {
    if (!origin_) origin_ = tick.ctx.time_s;
    if (tick.ctx.procs) table_.add(*tick.ctx.procs, level_, tick.ctx.time_s - *origin_);
    return SinkStatus::ok;
  }

 private:
  ProcessTable& table_;
  Level level_;
  std::optional<double> origin_;
};

class PhaseSink final : public Sink {
 public:
  PhaseSink(Phases& phases, MarkReader& marks, const Engine& engine, Level level)
      : phases_(phases), marks_(marks), level_(level) {
    const NodeInfo& node = engine.node_info();
    const double per_level = node.level_num_cpus[level_index(level)];
    cpus_ = per_level > 0            ? per_level
            : level == Level::system ? node.num_system_cpus
                                     : node.num_cpus;
    const auto& names = engine.columns(level);
    auto index = [&](const std::string& name) -> std::optional<std::size_t> {
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == name) return i;
      return std::nullopt;
    };
    cpu_ = index("cpu_util_avg");
    memory_ = index("memory");
    read_ = index("io_read");
    write_ = index("io_write");
    for (int g = 0;; ++g) {
      auto u = index("gpu_util_" + std::to_string(g));
      if (!u) break;
      gpus_.push_back({*u, index("gpu_mem_" + std::to_string(g))});
    }
  }
  std::string name() const override { return "the run's phases"; }
  SinkStatus write(const Engine::Tick& tick) override {
    // The first row covers the interval from the run's baseline: "(start)" begins there.
    if (first_) phases_.set_origin(tick.ctx.wallclock_s - tick.ctx.dt_s);
    first_ = false;
    phases_.add_marks(marks_.poll());
    const auto& row = tick.rows[level_index(level_)];
    auto at = [&](std::optional<std::size_t> i) {
      return i && *i < row.size() ? row[*i] : std::numeric_limits<double>::quiet_NaN();
    };
    Phases::Row r;
    r.end_s = tick.ctx.wallclock_s;
    r.dt_s = tick.ctx.dt_s;
    r.cpu_cores = at(cpu_) * cpus_ / 100.0;
    r.memory_gib = at(memory_);
    r.read_bps = at(read_);
    r.write_bps = at(write_);
    // The GPUs the level holds memory on in this row (every GPU at the system level), as the
    // summary's gpu_util_mean takes the GPUs it used.
    double util = 0;
    int n = 0;
    for (const auto& [u, m] : gpus_) {
      const double v = at(u);
      if (!std::isfinite(v) || (level_ != Level::system && !(at(m) > 0))) continue;
      util += v;
      ++n;
    }
    r.gpu_util_pct = n ? util / n : std::numeric_limits<double>::quiet_NaN();
    phases_.add_row(r);
    return SinkStatus::ok;
  }

 private:
  Phases& phases_;
  MarkReader& marks_;
  Level level_;
  bool first_ = true;
  double cpus_ = 1;
  std::optional<std::size_t> cpu_, memory_, read_, write_;
  std::vector<std::pair<std::size_t, std::optional<std::size_t>>> gpus_;
};

}  // namespace

std::unique_ptr<Sink> make_run_dir_sink(std::unique_ptr<RunDirSink> dir) {
  std::string name = "run directory " + dir->dir();
  return std::make_unique<ManifestSink<RunDirSink>>(std::move(dir), std::move(name));
}

std::unique_ptr<Sink> make_sqlite_sink(std::unique_ptr<SqliteSink> db) {
  std::string name = "SQLite database " + db->location();
  return std::make_unique<ManifestSink<SqliteSink>>(std::move(db), std::move(name));
}

std::unique_ptr<Sink> make_json_stream_sink(int fd, const Engine& engine, int protocol) {
  return std::make_unique<StreamSink>(fd, engine, protocol);
}

std::unique_ptr<Sink> make_stats_sink(RunStats& stats) {
  return std::make_unique<StatsSink>(stats);
}

std::unique_ptr<Sink> make_process_table_sink(ProcessTable& table, Level level) {
  return std::make_unique<ProcessTableSink>(table, level);
}

std::unique_ptr<Sink> make_phase_sink(Phases& phases, MarkReader& marks, const Engine& engine,
                                      Level level) {
  return std::make_unique<PhaseSink>(phases, marks, engine, level);
}

}  // namespace sonde
