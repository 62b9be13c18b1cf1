// sonde C++ plugin SDK: a collector is a small class plus one macro.
//
//   #include <sonde/sdk.hpp>
//   class Load : public sonde::sdk::Collector {
//    public:
//     using Collector::Collector;
//     long devices(sonde::sdk::Level l) override { return l == sonde::sdk::Level::system ? 1 : -1;
//     } sonde::sdk::Value collect(sonde::sdk::Level, const sonde::sdk::Tick&) override {
//       return sonde::sdk::Scalar{read_load()};
//     }
//   };
//   SONDE_COLLECTOR_PLUGIN(Load, "load", "load average", 10,
//                          "{handler: {_target_: ScalarHandler, column: load1}}")
//
// Exceptions thrown by the constructor make the collector unavailable (with the message);
// exceptions thrown by snapshot/collect become an error for that tick. None crosses into sonde.
#pragma once

#include <sonde/plugin.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace sonde::sdk {

enum class Level {
  process = SONDE_LEVEL_PROCESS,
  user = SONDE_LEVEL_USER,
  slurm = SONDE_LEVEL_SLURM,
  system = SONDE_LEVEL_SYSTEM
};

/// Raw values (see the handler table in docs/writing-collectors.md).
struct None {};
struct Scalar {
  double value = 0;
};
struct Vector {
  std::vector<double> values;  ///< one per device
};
struct Vectors {
  std::vector<std::vector<double>> metrics;  ///< one vector per handler metric
};
struct Counters {
  std::vector<double> values;  ///< cumulative, never decreasing
};
using Value = std::variant<None, Scalar, Vector, Vectors, Counters>;

/// The collector's configuration: keyword arguments and injected values.
class Host {
 public:
  Host(const sonde_host_api* api, const sonde_host* host) : api_(api), host_(host) {}
  // Keyword arguments: nullopt (or empty) when absent; a value of another type throws
  // std::invalid_argument, which in a constructor makes the collector unavailable with the message.
  std::optional<std::string> string(const char* key) const {
    const char* v = nullptr;
    return found(api_->kwarg_string(host_, key, &v), key, "a string")
               ? std::optional<std::string>(v)
               : std::nullopt;
  }
  std::optional<double> number(const char* key) const {
    double v = 0;
    return found(api_->kwarg_number(host_, key, &v), key, "a number") ? std::optional<double>(v)
                                                                      : std::nullopt;
  }
  std::optional<bool> flag(const char* key) const {
    int v = 0;
    return found(api_->kwarg_bool(host_, key, &v), key, "a boolean") ? std::optional<bool>(v != 0)
                                                                     : std::nullopt;
  }
  std::vector<std::string> strings(const char* key) const {
    std::vector<std::string> out;
    const int64_t n = api_->kwarg_list_size(host_, key);
    if (n < 0) {
      const char* probe = nullptr;
      double number_probe = 0;
      int flag_probe = 0;
      if (api_->kwarg_string(host_, key, &probe) != 0 ||
          api_->kwarg_number(host_, key, &number_probe) != 0 ||
          api_->kwarg_bool(host_, key, &flag_probe) != 0)
        found(-1, key, "a list of strings");
      return out;
    }
    for (int64_t i = 0; i < n; ++i) {
      const char* item = api_->kwarg_list_item(host_, key, static_cast<size_t>(i));
      if (item != nullptr) out.emplace_back(item);  // std::string(nullptr) is undefined
    }
    return out;
  }
  bool injected(const char* key) const { return api_->injected(host_, key) == 1; }
  const sonde_node_info* node_info() const { return api_->node_info(host_); }
  int target_pid() const { return api_->target_pid(host_); }
  unsigned target_uid() const { return api_->target_uid(host_); }
  std::optional<std::string> slurm_job() const {
    const char* j = api_->slurm_job(host_);
    return j ? std::optional<std::string>(j) : std::nullopt;
  }
  void log(const std::string& message) const { api_->log(host_, 0, message.c_str()); }
  void warn(const std::string& message) const { api_->log(host_, 1, message.c_str()); }
  const sonde_host_api* api() const { return api_; }

 private:
  static bool found(int rc, const char* key, const char* expected) {
    if (rc < 0)
      throw std::invalid_argument(std::string("keyword argument '") + key + "': expected " +
                                  expected);
    return rc == 1;
  }
  const sonde_host_api* api_;
  const sonde_host* host_;
};

/// One tick's context: times and the processes of each level.
class Tick {
 public:
  Tick(const sonde_host_api* api, const sonde_tick* tick) : api_(api), tick_(tick) {}
  uint64_t index() const { return api_->tick_index(tick_); }
  double time_s() const { return api_->tick_time_s(tick_); }
  double wallclock_s() const { return api_->tick_wallclock_s(tick_); }
  double dt_s() const { return api_->tick_dt_s(tick_); }
  size_t size(Level l) const { return api_->level_size(tick_, static_cast<sonde_level>(l)); }
  const sonde_pid_info& pid(Level l, size_t i) const {
    return *api_->level_pid(tick_, static_cast<sonde_level>(l), i);
  }
  size_t total_pids() const { return api_->total_pids(tick_); }
  /// Calls f(const sonde_pid_info&) for every process of a level.
  template <class F>
  void for_each_pid(Level l, F&& f) const {
    const size_t n = size(l);
    for (size_t i = 0; i < n; ++i) f(pid(l, i));
  }

 private:
  const sonde_host_api* api_;
  const sonde_tick* tick_;
};

class Collector {
 public:
  explicit Collector(const Host& host) : host_(host) {}
  virtual ~Collector() = default;
  /// Entries per device at a level (1 for scalars and counters); -1: no value at this level.
  virtual long devices(Level) { return 1; }
  virtual void snapshot(const Tick&) {}
  virtual Value collect(Level level, const Tick& tick) = 0;

 protected:
  const Host& host() const { return host_; }

 private:
  Host host_;
};

namespace detail {

inline void copy_error(char* err, size_t size, const char* what) {
  if (err == nullptr || size == 0) return;
  std::strncpy(err, what, size - 1);
  err[size - 1] = '\0';
}

inline void write_value(const sonde_host_api* api, sonde_out* out, const Value& v) {
  if (std::holds_alternative<Scalar>(v)) {
    api->write_scalar(out, std::get<Scalar>(v).value);
  } else if (const auto* vec = std::get_if<Vector>(&v)) {
    api->write_vector(out, vec->values.data(), vec->values.size());
  } else if (const auto* vs = std::get_if<Vectors>(&v)) {
    std::vector<const double*> ptrs;
    size_t count = vs->metrics.empty() ? 0 : vs->metrics.front().size();
    for (const auto& m : vs->metrics) {
      if (m.size() != count) {
        api->set_error(out, "Vectors: every metric needs the same number of devices");
        return;
      }
      ptrs.push_back(m.data());
    }
    api->write_vectors(out, ptrs.data(), ptrs.size(), count);
  } else if (const auto* c = std::get_if<Counters>(&v)) {
    api->write_counters(out, c->values.data(), c->values.size());
  } else {
    api->write_none(out);
  }
}

template <class T>
struct Adapter {
  struct Instance {
    const sonde_host_api* api;
    T collector;
    bool snapshot_failed = false;  ///< this tick's snapshot threw: its collect calls fail
    char snapshot_error[512] = {};
    Instance(const sonde_host_api* a, const sonde_host* h) : api(a), collector(Host(a, h)) {}
  };
  static void* create(const sonde_host_api* api, const sonde_host* host, char* err, size_t size) {
    try {
      return new Instance(api, host);
    } catch (const std::exception& e) {
      copy_error(err, size, e.what());
    } catch (...) {
      copy_error(err, size, "unknown exception in the collector's constructor");
    }
    return nullptr;
  }
  static int64_t devices(void* self, sonde_level level) {
    try {
      return static_cast<Instance*>(self)->collector.devices(static_cast<Level>(level));
    } catch (...) {
      return -1;
    }
  }
  static void snapshot(void* self, const sonde_tick* tick) {
    auto* in = static_cast<Instance*>(self);
    in->snapshot_failed = false;
    try {
      in->collector.snapshot(Tick(in->api, tick));
    } catch (const std::exception& e) {
      in->snapshot_failed = true;
      std::snprintf(in->snapshot_error, sizeof in->snapshot_error, "snapshot: %s", e.what());
    } catch (...) {
      in->snapshot_failed = true;
      copy_error(in->snapshot_error, sizeof in->snapshot_error, "unknown exception in snapshot");
    }
  }
  static void collect(void* self, sonde_level level, const sonde_tick* tick, sonde_out* out) {
    auto* in = static_cast<Instance*>(self);
    // A failed snapshot fails every collect call of its tick (collect would see stale state).
    if (in->snapshot_failed) {
      in->api->set_error(out, in->snapshot_error);
      return;
    }
    try {
      write_value(in->api, out,
                  in->collector.collect(static_cast<Level>(level), Tick(in->api, tick)));
    } catch (const std::exception& e) {
      in->api->set_error(out, e.what());
    } catch (...) {
      in->api->set_error(out, "unknown exception in collect");
    }
  }
  static void destroy(void* self) { delete static_cast<Instance*>(self); }
};

}  // namespace detail
}  // namespace sonde::sdk

/// Exports a collector class as a sonde plugin (one per shared library).
#define SONDE_COLLECTOR_PLUGIN(Class, name_, description_, priority_, default_entry_yaml_) \
  namespace {                                                                              \
  const sonde_collector_v1 sonde_collector_table_ = {                                      \
      sizeof(sonde_collector_v1),                                                          \
      default_entry_yaml_,                                                                 \
      &::sonde::sdk::detail::Adapter<Class>::create,                                       \
      &::sonde::sdk::detail::Adapter<Class>::devices,                                      \
      &::sonde::sdk::detail::Adapter<Class>::snapshot,                                     \
      &::sonde::sdk::detail::Adapter<Class>::collect,                                      \
      &::sonde::sdk::detail::Adapter<Class>::destroy,                                      \
      {}};                                                                                 \
  const void* sonde_capability_(uint32_t id) {                                             \
    return id == SONDE_CAP_COLLECTOR ? &sonde_collector_table_ : nullptr;                  \
  }                                                                                        \
  const sonde_plugin sonde_plugin_table_ = {                                               \
      SONDE_ABI_MAJOR, SONDE_ABI_MINOR, sizeof(sonde_plugin), name_,                       \
      description_,    priority_,       &sonde_capability_,   {}};                         \
  }                                                                                        \
  SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void) {                       \
    return &sonde_plugin_table_;                                                           \
  }

// ---- Status plugins (ABI 1.1, SONDE_CAP_STATUS): hooks of `sonde status`, `gpustat` and `top`
// ----
//
//   class Team : public sonde::sdk::StatusPlugin {
//    public:
//     using StatusPlugin::StatusPlugin;
//     void add_options(sonde::sdk::Status& s) override { s.add_option("team", "team name", ""); }
//     void get_process_info(sonde::sdk::Status& s, sonde::sdk::Gpu&, sonde::sdk::Process& p)
//     override {
//       if (auto t = s.option("team")) p.set("team", *t);
//     }
//   };
//   SONDE_STATUS_PLUGIN(Team, "team", "team of each GPU process", 10)
//
// host_processes (ABI 1.2) gives `sonde top`'s every process, GPU or not, once per refresh.
//
// An exception thrown by configure() is a usage error (its message is printed, sonde exits 2);
// one thrown by any other hook is logged as a warning and the command goes on.
namespace sonde::sdk {

class Status {
 public:
  Status(const sonde_status_api* api, sonde_status* s) : api_(api), s_(s) {}
  bool add_flag(const std::string& name, const std::string& help) {
    return api_->add_flag(s_, name.c_str(), help.c_str()) == 1;
  }
  bool add_option(const std::string& name, const std::string& help,
                  const std::string& default_value) {
    return api_->add_option(s_, name.c_str(), help.c_str(), default_value.c_str()) == 1;
  }
  std::optional<std::string> option(const std::string& name) const {
    const char* v = nullptr;
    return api_->option_value(s_, name.c_str(), &v) == 1 && v ? std::optional<std::string>(v)
                                                              : std::nullopt;
  }
  bool flag(const std::string& name) const { return api_->flag_value(s_, name.c_str()) == 1; }
  std::string command() const { return api_->command(s_); }
  bool json() const { return api_->json_output(s_) == 1; }
  bool color() const { return api_->use_color(s_) == 1; }
  double watch_interval_s() const { return api_->watch_interval_s(s_); }
  double cpu_interval_s() const { return api_->cpu_interval_s(s_); }
  std::string proc_root() const { return api_->proc_root(s_); }
  void log(const std::string& m) const { api_->log(s_, 0, m.c_str()); }
  void warn(const std::string& m) const { api_->log(s_, 1, m.c_str()); }
  /// A field of the node, under the plugin's name in --json.
  void set(const std::string& key, const std::string& value) {
    api_->set_string(s_, key.c_str(), value.c_str());
  }
  void set(const std::string& key, double value) { api_->set_number(s_, key.c_str(), value); }
  const sonde_status_api* api() const { return api_; }

 private:
  const sonde_status_api* api_;
  sonde_status* s_;
};

class Gpu {
 public:
  Gpu(const sonde_status_api* api, const sonde_status_gpu* g) : api_(api), g_(g) {}
  int index() const { return api_->gpu_index(g_); }
  std::string vendor() const { return api_->gpu_vendor(g_); }
  std::string name() const { return api_->gpu_name(g_); }
  std::string uuid() const { return api_->gpu_uuid(g_); }
  /// nullopt when the device does not support it (keys in plugin.h).
  std::optional<double> number(const std::string& key) const {
    double v = 0;
    return api_->gpu_number(g_, key.c_str(), &v) == 1 ? std::optional<double>(v) : std::nullopt;
  }
  size_t process_count() const { return api_->gpu_process_count(g_); }
  void set(const std::string& key, const std::string& value) {
    api_->gpu_set_string(mut(), key.c_str(), value.c_str());
  }
  void set(const std::string& key, double value) {
    api_->gpu_set_number(mut(), key.c_str(), value);
  }

 private:
  sonde_status_gpu* mut() { return const_cast<sonde_status_gpu*>(g_); }
  const sonde_status_api* api_;
  const sonde_status_gpu* g_;
};

class Process {
 public:
  Process(const sonde_status_api* api, const sonde_status_process* p) : api_(api), p_(p) {}
  int pid() const { return api_->process_pid(p_); }
  std::string user() const { return api_->process_user(p_); }
  std::string command() const { return api_->process_command(p_); }
  std::optional<uint64_t> gpu_memory_bytes() const {
    uint64_t v = 0;
    return api_->process_gpu_memory(p_, &v) == 1 ? std::optional<uint64_t>(v) : std::nullopt;
  }
  std::optional<std::string> field(const std::string& key) const {
    const char* v = api_->process_field(p_, key.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  }
  void set(const std::string& key, const std::string& value) {
    api_->process_set_string(mut(), key.c_str(), value.c_str());
  }
  void set(const std::string& key, double value) {
    api_->process_set_number(mut(), key.c_str(), value);
  }

 private:
  sonde_status_process* mut() { return const_cast<sonde_status_process*>(p_); }
  const sonde_status_api* api_;
  const sonde_status_process* p_;
};

class Text {
 public:
  Text(const sonde_status_api* api, sonde_status_text* t) : api_(api), t_(t) {}
  std::string get() const { return api_->text_get(t_); }
  void set(const std::string& text) { api_->text_set(t_, text.c_str()); }
  void append(const std::string& text) { api_->text_append(t_, text.c_str()); }

 private:
  const sonde_status_api* api_;
  sonde_status_text* t_;
};

class StatusPlugin {
 public:
  explicit StatusPlugin(Status&) {}
  virtual ~StatusPlugin() = default;
  virtual void add_options(Status&) {}
  virtual void configure(Status&) {}
  virtual void before_query(Status&) {}
  virtual void query_device(Status&, Gpu&) {}
  virtual void get_process_info(Status&, Gpu&, Process&) {}
  virtual void after_query(Status&) {}
  virtual void repr_gpu(Status&, const Gpu&, Text&) {}
  virtual void repr_process(Status&, const Gpu&, const Process&, Text&) {}
  virtual void print_header(Status&, Text&) {}
  virtual void print_footer(Status&, Text&) {}
  /// `sonde top` (ABI 1.2): every process of its table, once per refresh. Left out of the
  /// plugin's table unless the class overrides it, so a plugin without it costs `top` nothing.
  virtual void host_processes(Status&, std::vector<Process>&) {}
};

namespace detail {

template <class T>
struct StatusAdapter {
  struct Instance {
    const sonde_status_api* api;
    Status status;
    T plugin;
    Instance(const sonde_status_api* a, sonde_status* s) : api(a), status(a, s), plugin(status) {}
  };
  static Instance* in(void* self) { return static_cast<Instance*>(self); }
  static Status st(Instance* i, sonde_status* s) { return Status(i->api, s); }
  template <class F>
  static void guard(Instance* i, sonde_status* s, const char* hook, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      Status(i->api, s).warn(std::string(hook) + ": " + e.what());
    } catch (...) {
      Status(i->api, s).warn(std::string(hook) + ": unknown exception");
    }
  }
  static void* create(const sonde_status_api* api, sonde_status* s, char* err, size_t size) {
    try {
      return new Instance(api, s);
    } catch (const std::exception& e) {
      copy_error(err, size, e.what());
    } catch (...) {
      copy_error(err, size, "unknown exception in the status plugin's constructor");
    }
    return nullptr;
  }
  static void destroy(void* self) { delete in(self); }
  static void add_options(void* self, sonde_status* s) {
    auto* i = in(self);
    guard(i, s, "add_options", [&] {
      Status x = st(i, s);
      i->plugin.add_options(x);
    });
  }
  static int configure(void* self, sonde_status* s, char* err, size_t size) {
    auto* i = in(self);
    try {
      Status x = st(i, s);
      i->plugin.configure(x);
      return 0;
    } catch (const std::exception& e) {
      copy_error(err, size, e.what());
    } catch (...) {
      copy_error(err, size, "unknown exception in configure");
    }
    return 1;
  }
  static void before_query(void* self, sonde_status* s) {
    auto* i = in(self);
    guard(i, s, "before_query", [&] {
      Status x = st(i, s);
      i->plugin.before_query(x);
    });
  }
  static void query_device(void* self, sonde_status* s, sonde_status_gpu* g) {
    auto* i = in(self);
    guard(i, s, "query_device", [&] {
      Status x = st(i, s);
      Gpu gpu(i->api, g);
      i->plugin.query_device(x, gpu);
    });
  }
  static void get_process_info(void* self, sonde_status* s, sonde_status_gpu* g,
                               sonde_status_process* p) {
    auto* i = in(self);
    guard(i, s, "get_process_info", [&] {
      Status x = st(i, s);
      Gpu gpu(i->api, g);
      Process proc(i->api, p);
      i->plugin.get_process_info(x, gpu, proc);
    });
  }
  static void after_query(void* self, sonde_status* s) {
    auto* i = in(self);
    guard(i, s, "after_query", [&] {
      Status x = st(i, s);
      i->plugin.after_query(x);
    });
  }
  static void repr_gpu(void* self, sonde_status* s, const sonde_status_gpu* g,
                       sonde_status_text* t) {
    auto* i = in(self);
    guard(i, s, "repr_gpu", [&] {
      Status x = st(i, s);
      Text text(i->api, t);
      i->plugin.repr_gpu(x, Gpu(i->api, g), text);
    });
  }
  static void repr_process(void* self, sonde_status* s, const sonde_status_gpu* g,
                           const sonde_status_process* p, sonde_status_text* t) {
    auto* i = in(self);
    guard(i, s, "repr_process", [&] {
      Status x = st(i, s);
      Text text(i->api, t);
      i->plugin.repr_process(x, Gpu(i->api, g), Process(i->api, p), text);
    });
  }
  static void print_header(void* self, sonde_status* s, sonde_status_text* t) {
    auto* i = in(self);
    guard(i, s, "print_header", [&] {
      Status x = st(i, s);
      Text text(i->api, t);
      i->plugin.print_header(x, text);
    });
  }
  static void print_footer(void* self, sonde_status* s, sonde_status_text* t) {
    auto* i = in(self);
    guard(i, s, "print_footer", [&] {
      Status x = st(i, s);
      Text text(i->api, t);
      i->plugin.print_footer(x, text);
    });
  }
  static void host_processes(void* self, sonde_status* s, sonde_status_process* const* p,
                             size_t n) {
    auto* i = in(self);
    guard(i, s, "host_processes", [&] {
      Status x = st(i, s);
      std::vector<Process> procs;
      procs.reserve(n);
      for (size_t k = 0; k < n; ++k) procs.emplace_back(i->api, p[k]);
      i->plugin.host_processes(x, procs);
    });
  }
  static constexpr bool kHostProcesses =
      !std::is_same_v<decltype(&T::host_processes), decltype(&StatusPlugin::host_processes)>;
  static const sonde_status_v1* table() {
    static const sonde_status_v1 t = {sizeof(sonde_status_v1),
                                      &create,
                                      &destroy,
                                      &add_options,
                                      &configure,
                                      &before_query,
                                      &query_device,
                                      &get_process_info,
                                      &after_query,
                                      &repr_gpu,
                                      &repr_process,
                                      &print_header,
                                      &print_footer,
                                      kHostProcesses ? &host_processes : nullptr,
                                      {}};
    return &t;
  }
};

}  // namespace detail
}  // namespace sonde::sdk

/// Exports a status plugin class (one per shared library; see StatusPlugin).
#define SONDE_STATUS_PLUGIN(Class, name_, description_, priority_)                             \
  namespace {                                                                                  \
  const void* sonde_status_capability_(uint32_t id) {                                          \
    return id == SONDE_CAP_STATUS                                                              \
               ? static_cast<const void*>(::sonde::sdk::detail::StatusAdapter<Class>::table()) \
               : nullptr;                                                                      \
  }                                                                                            \
  const sonde_plugin sonde_status_plugin_table_ = {                                            \
      SONDE_ABI_MAJOR, SONDE_ABI_MINOR, sizeof(sonde_plugin),      name_,                      \
      description_,    priority_,       &sonde_status_capability_, {}};                        \
  }                                                                                            \
  SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void) {                           \
    return &sonde_status_plugin_table_;                                                        \
  }
