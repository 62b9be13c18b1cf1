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
