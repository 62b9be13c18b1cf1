// sonde._native: the C++ engine for Python (the Jupyter package, python/sonde).
//
// A Monitor owns one Engine built exactly as the CLI builds it (layered configuration, plugin
// discovery, the registry of built-ins and plugin factories) for a target process, and samples it
// on its own std::thread with the Sampler (src/core/sampler.hpp: absolute monotonic schedule,
// missed slots counted). The sampling thread never touches a Python object and never takes the
// GIL; its Sink buffers rows in C++ under a mutex, copied out into numpy arrays on request. Long
// calls (engine creation, start, stop, copies) release the GIL.
#include <pthread.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/engine.hpp"
#include "core/json_text.hpp"
#include "core/sampler.hpp"
#include "core/setup.hpp"
#include "core/threads.hpp"
#include "plugins/plugins.hpp"
#include "sinks/format.hpp"
#include "sinks/run_data.hpp"
#include "sinks/sink.hpp"

namespace py = pybind11;

namespace sonde::python {
namespace {

double thread_cpu_s(std::thread& t) {
  clockid_t cid;
  if (!t.joinable() || ::pthread_getcpuclockid(t.native_handle(), &cid) != 0) return 0;
  timespec ts{};
  if (::clock_gettime(cid, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

py::object json_to_py(const nlohmann::json& j) {
  return py::module_::import("json").attr("loads")(json_text(j));
}

class Monitor {
 public:
  Monitor(int pid, std::optional<double> interval_s, const std::string& levels,
          const std::string& config_file) {
    std::vector<std::string> warnings;
    {
      py::gil_scoped_release release;
      build(pid, interval_s, levels, config_file, warnings);
    }
    buffer_.add(std::make_unique<Buffer>(*this));
    std::lock_guard<std::mutex> lock(mutex_);
    warnings_.insert(warnings_.begin(), warnings.begin(), warnings.end());
  }
  ~Monitor() { stop_thread(); }
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  void start() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(control_);
    if (thread_.joinable()) return;
    sampler_ = std::make_unique<Sampler>(*engine_, SamplerOptions{}, nullptr);
    running_ = true;
    // The thread's entry: an exception must not end the process (a Jupyter kernel); it ends the
    // sampling, and Python sees why in warnings() (running() turns false).
    thread_ = start_thread([this] {
      try {
        sampler_->run(buffer_);
      } catch (const std::exception& e) {
        fail(fmt::format("the sampling thread failed: {}", e.what()));
      } catch (...) {
        fail("the sampling thread failed");
      }
    });
  }

  void stop() {
    py::gil_scoped_release release;
    stop_thread();
  }

  /// Follows another process from now on (a Jupyter kernel that a wrapper kernel restarted): the
  /// sampling thread is stopped, the process level's root changed, the thread started again if
  /// it ran. The rows so far stay; the new process must be alive and watchable.
  void retarget(int pid) {
    bool was_running = false;
    {
      py::gil_scoped_release release;
      auto target = discover_target(roots_from_env(), pid);
      if (!target)
        throw std::runtime_error(
            fmt::format("cannot watch process {}: {}", pid, target.error().message));
      {
        std::lock_guard<std::mutex> lock(control_);
        was_running = thread_.joinable() && running_.load();
      }
      stop_thread();
      engine_->set_target_pid(pid);
      pid_ = pid;
    }
    if (was_running) start();
  }

  bool running() const { return running_.load(); }
  double interval_s() const { return engine_->interval_s(); }
  int pid() const { return pid_.load(); }

  std::vector<std::string> levels() const {
    std::vector<std::string> out;
    for (Level l : engine_->levels()) out.emplace_back(level_name(l));
    return out;
  }

  std::vector<std::string> columns(const std::string& level) const {
    return engine_->columns(checked_level(level));
  }

  py::object node_info() const { return json_to_py(node_info_json(*engine_)); }

  /// The manifest a run directory of this monitor would have (csv_run_dir.cpp's keys).
  py::object manifest() const { return json_to_py(manifest_json()); }

  std::size_t rows(const std::string& level) const {
    const Level l = checked_level(level);
    std::lock_guard<std::mutex> lock(mutex_);
    const std::size_t width = engine_->columns(l).size() + 2;
    return buffers_[level_index(l)].size() / width;
  }

  /// Rows [start, end) of a level as a float64 array (time, wallclock, columns...).
  py::array_t<double> samples(const std::string& level, std::size_t start) const {
    const Level l = checked_level(level);
    const std::size_t width = engine_->columns(l).size() + 2;
    auto* copy = new std::vector<double>();
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      const auto& buf = buffers_[level_index(l)];
      const std::size_t n = buf.size() / width;
      if (start < n)
        copy->assign(buf.begin() + static_cast<std::ptrdiff_t>(start * width), buf.end());
    }
    const auto n = static_cast<py::ssize_t>(copy->size() / width);
    py::capsule owner(copy, [](void* p) { delete static_cast<std::vector<double>*>(p); });
    return py::array_t<double>({n, static_cast<py::ssize_t>(width)},
                               {static_cast<py::ssize_t>(width * sizeof(double)),
                                static_cast<py::ssize_t>(sizeof(double))},
                               copy->data(), owner);
  }

  std::vector<std::string> take_warnings() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(warnings_, {});
  }

  py::dict stats() {
    py::dict d;
    std::uint64_t ticks = 0, missed = 0;
    double cpu = 0, busy = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticks = ticks_;
      busy = busy_s_;
      cpu = thread_cpu_total_s_;
    }
    missed = missed_total();
    if (running_) {
      std::lock_guard<std::mutex> lock(control_);
      cpu += thread_cpu_s(thread_);
    }
    d["ticks"] = ticks;
    d["ticks_missed"] = missed;
    d["sampling_thread_cpu_s"] = cpu;
    d["tick_wall_s"] = busy;
    py::list coll;
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& c : collectors_) {
      py::dict e;
      e["name"] = c.name;
      e["target"] = c.target;
      e["state"] = std::string(state_name(c.state));
      e["why"] = c.why;
      e["errors"] = c.errors;
      coll.append(e);
    }
    d["collectors"] = coll;
    return d;
  }

  /// Summary of the rows buffered so far (the whole session or a wallclock window), computed by
  /// summarize_run (src/core/stored_summary.cpp), the code `sonde report` uses.
  py::object summarize(std::optional<std::pair<double, double>> window,
                       const std::vector<std::tuple<int, double, double, std::string>>& cells) {
#ifdef SONDE_HAVE_RUN_DATA
    nlohmann::json result;
    {
      py::gil_scoped_release release;
      RunData run = run_data();
      for (const auto& [index, start, end, code] : cells)
        run.cells.push_back(CellRecord{index, start, end, code});
      result = summarize_run(run, window);
    }
    return json_to_py(result);
#else
    (void)window;
    (void)cells;
    throw py::type_error("this build has no summarize_run (src/core/stored_summary.cpp)");
#endif
  }

 private:
  static Level checked_level(const std::string& name) {
    auto l = parse_level(name);
    if (!l)
      throw py::value_error(
          fmt::format("unknown level '{}' (expected process, user, slurm or system)", name));
    return *l;
  }

  void build(int pid, std::optional<double> interval_s, const std::string& levels_text,
             const std::string& config_file, std::vector<std::string>& warnings) {
    ConfigSearch search;
    search.explicit_file = config_file;
    search.warn = [&](const std::string& m) { warnings.push_back(m); };
    auto cfg = load_config(search);
    if (!cfg) throw py::value_error(cfg.error().message);
    plugins::discover_plugins(*cfg, plugins::plugin_dirs(),
                              [&](const std::string& m) { warnings.push_back(m); });
    if (interval_s) {
      const NumericRange& range = numeric_range("interval");
      if (!(*interval_s >= range.min && *interval_s <= range.max))
        throw py::value_error(
            fmt::format("interval: {}, got {}", range_expectation(range), *interval_s));
      cfg->interval_s = *interval_s;
    }
    std::vector<Level> levels;
    if (!levels_text.empty()) {
      auto parsed = parse_levels(levels_text);
      if (!parsed) throw py::value_error(parsed.error().message);
      levels = *parsed;
    }
    const Roots roots = roots_from_env();
    auto target = discover_target(roots, pid);
    if (!target)
      throw std::runtime_error(
          fmt::format("cannot watch process {}: {}", pid, target.error().message));
    target->pid = pid;
    EngineOptions eo;
    eo.roots = roots;
    eo.target = *target;
    eo.levels = levels;
    eo.warn = [this](const std::string& m) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (warnings_.size() < 100) warnings_.push_back(m);
    };
    // The registry of every collector target, as the CLI's: built-ins and the plugin factories.
    register_builtin_collectors(registry_);
    plugins::register_plugin_factories(registry_);
    auto engine = Engine::create(*cfg, eo, registry_);
    if (!engine) {
      if (engine.error().code == Errc::config) throw py::value_error(engine.error().message);
      throw std::runtime_error(engine.error().message);
    }
    engine_ = std::move(*engine);
    pid_ = pid;
    copy_collector_status();
    config_sources_ = cfg->sources;
    start_wallclock_ = wallclock_now();
  }

  nlohmann::json manifest_json() const {
    nlohmann::json m;
    m["sonde_version"] = SONDE_VERSION;
    m["mode"] = "jupyter";
    m["command"] = nlohmann::json::array();
    m["target_pid"] = pid_.load();
    m["host"] = engine_->node_info().hostname;
    m["kernel"] = engine_->node_info().kernel;
    m["interval"] = engine_->interval_s();
    m["levels"] = levels_json(*engine_);
    m["columns_by_level"] = columns_by_level_json(*engine_);
    m["node_info"] = node_info_json(*engine_);
    m["config_sources"] = config_sources_;
    m["start_wallclock"] = start_wallclock_;
    nlohmann::json files = nlohmann::json::object();
    for (Level l : engine_->levels())
      files[std::string(level_name(l))] = fmt::format("perf_{}.csv", level_name(l));
    m["files"] = files;
    m["ticks_missed"] = missed_total();
    std::lock_guard<std::mutex> lock(mutex_);
    m["ticks"] = ticks_;
    return m;
  }

  RunData run_data() const {
    RunData run;
    run.manifest = manifest_json();
    run.source = "jupyter";
    std::lock_guard<std::mutex> lock(mutex_);
    for (Level l : engine_->levels()) {
      LevelTable t;
      t.level = l;
      t.columns = {"time", "wallclock"};
      for (const auto& c : engine_->columns(l)) t.columns.push_back(c);
      const std::size_t width = t.columns.size();
      const auto& buf = buffers_[level_index(l)];
      for (std::size_t i = 0; i + width <= buf.size(); i += width)
        t.rows.emplace_back(buf.begin() + static_cast<std::ptrdiff_t>(i),
                            buf.begin() + static_cast<std::ptrdiff_t>(i + width));
      run.levels.push_back(std::move(t));
    }
    return run;
  }

  void stop_thread() {
    std::lock_guard<std::mutex> lock(control_);
    if (!thread_.joinable()) return;
    sampler_->request_stop();
    const double cpu = thread_cpu_s(thread_);
    thread_.join();
    {
      std::lock_guard<std::mutex> l(mutex_);
      thread_cpu_total_s_ += cpu;
    }
    missed_before_.fetch_add(sampler_->missed());
    sampler_.reset();
    running_ = false;
  }

  /// On the sampling thread, which then ends: why, for warnings().
  void fail(const std::string& why) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      warnings_.push_back(why);
    } catch (...) {
    }
    running_ = false;
  }

  /// Slots missed by every run of the sampler (any thread).
  std::uint64_t missed_total() const {
    std::lock_guard<std::mutex> lock(control_);
    return missed_before_.load() + (sampler_ ? sampler_->missed() : 0);
  }

  /// The Python buffer: the sampling thread's Sink (no Python here).
  class Buffer final : public Sink {
   public:
    explicit Buffer(Monitor& m) : m_(m) {}
    std::string name() const override { return "the Monitor's buffer"; }
    SinkStatus write(const Engine::Tick& tick) override {
      const double spent = monotonic_now() - tick.ctx.time_s;
      std::lock_guard<std::mutex> lock(m_.mutex_);
      for (Level l : m_.engine_->levels()) {
        auto& buf = m_.buffers_[level_index(l)];
        buf.push_back(tick.ctx.time_s);
        buf.push_back(tick.ctx.wallclock_s);
        const auto& row = tick.rows[level_index(l)];
        buf.insert(buf.end(), row.begin(), row.end());
      }
      ++m_.ticks_;
      m_.busy_s_ += spent;
      m_.copy_collector_status();
      return SinkStatus::ok;
    }

   private:
    Monitor& m_;
  };

  // What stats() shows of each collector, copied by the sampling thread after each tick (the
  // engine's slots are not read from another thread while it samples).
  struct CollectorStatus {
    std::string name, target;
    CollectorState state = CollectorState::ok;
    std::string why;
    std::uint64_t errors = 0;
  };
  void copy_collector_status() {
    const auto& slots = engine_->collectors();
    collectors_.resize(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      auto& c = collectors_[i];
      if (c.name.empty()) {
        c.name = slots[i].spec.name;
        c.target = slots[i].spec.target;
      }
      if (c.state != slots[i].state || c.errors != slots[i].errors) c.why = slots[i].why;
      c.state = slots[i].state;
      c.errors = slots[i].errors;
    }
  }

  Registry registry_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::string> config_sources_;
  double start_wallclock_ = 0;

  mutable std::mutex control_;  // start/stop, sampler_
  std::unique_ptr<Sampler> sampler_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<std::uint64_t> missed_before_{0};  // by the sampler's earlier runs
  std::atomic<int> pid_{0};                      // the process level's root (retarget changes it)
  SinkSet buffer_;

  mutable std::mutex mutex_;  // everything below
  std::array<std::vector<double>, kNumLevels> buffers_;
  std::uint64_t ticks_ = 0;
  double busy_s_ = 0;
  double thread_cpu_total_s_ = 0;
  std::vector<std::string> warnings_;
  std::vector<CollectorStatus> collectors_;
};

py::object summarize_dir(const std::string& dir, std::optional<std::pair<double, double>> window,
                         const std::string& node) {
#ifndef SONDE_HAVE_RUN_DATA
  (void)dir;
  (void)window;
  (void)node;
  throw py::type_error("this build has no summarize_run (src/core/stored_summary.cpp)");
#else
  nlohmann::json result;
  {
    py::gil_scoped_release release;
    auto run = read_run_dir(dir);
    if (!run) {
      py::gil_scoped_acquire acquire;
      throw py::value_error(run.error().message);
    }
    // A multi-node run's node: that node alone (its window on its own clock).
    const RunData* which = &*run;
    if (!node.empty() && !is_aggregate_node_name(node)) {
      which = run->find_node(node);
      if (!which) {
        py::gil_scoped_acquire acquire;
        throw py::value_error(fmt::format("{}: no node {} in this run", dir, node));
      }
    }
    result = summarize_run(*which, window);
  }
  return json_to_py(result);
#endif
}

}  // namespace
}  // namespace sonde::python

PYBIND11_MODULE(_native, m) {
  using sonde::python::Monitor;
  m.doc() = "sonde's C++ engine: a Monitor sampling a process on a native thread";
  m.attr("version") = SONDE_VERSION;
  py::class_<Monitor>(m, "Monitor")
      .def(py::init<int, std::optional<double>, const std::string&, const std::string&>(),
           py::arg("pid"), py::arg("interval") = py::none(), py::arg("levels") = "",
           py::arg("config") = "")
      .def("start", &Monitor::start)
      .def("stop", &Monitor::stop)
      .def("retarget", &Monitor::retarget, py::arg("pid"))
      .def_property_readonly("running", &Monitor::running)
      .def_property_readonly("interval", &Monitor::interval_s)
      .def_property_readonly("pid", &Monitor::pid)
      .def("levels", &Monitor::levels)
      .def("columns", &Monitor::columns, py::arg("level"))
      .def("node_info", &Monitor::node_info)
      .def("manifest", &Monitor::manifest)
      .def("rows", &Monitor::rows, py::arg("level"))
      .def("samples", &Monitor::samples, py::arg("level"), py::arg("start") = 0)
      .def("take_warnings", &Monitor::take_warnings)
      .def("stats", &Monitor::stats)
      .def("summarize", &Monitor::summarize, py::arg("window") = py::none(),
           py::arg("cells") = std::vector<std::tuple<int, double, double, std::string>>{});
#ifdef SONDE_HAVE_RUN_DATA
  m.attr("has_summarize_run") = true;
#else
  m.attr("has_summarize_run") = false;
#endif
  m.def("summarize_dir", &sonde::python::summarize_dir, py::arg("dir"),
        py::arg("window") = py::none(), py::arg("node") = "");
}
