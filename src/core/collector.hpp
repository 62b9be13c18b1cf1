#pragma once
// The collector interface and the registry of built-in collectors.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/config.hpp"
#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/node_info.hpp"
#include "core/proc_scanner.hpp"
#include "core/raw_value.hpp"
#include "core/result.hpp"

namespace sonde {

/// Everything a collector may look at during one tick.
struct TickContext {
  std::uint64_t tick = 0;  ///< 0 for the first tick
  double time_s = 0;       ///< CLOCK_MONOTONIC seconds
  double wallclock_s = 0;  ///< epoch seconds
  double dt_s = 0;         ///< since the previous tick; 0 at the first
  const ProcSnapshot* procs = nullptr;
  const NodeInfo* node = nullptr;
  const TargetInfo* target = nullptr;
  const Roots* roots = nullptr;
};

/// A typed keyword argument value after checking against the parameter table.
using ParamValue = std::variant<bool, long long, double, std::string, std::vector<std::string>>;

enum class ParamType { boolean, integer, number, string, string_list };

struct ParamSpec {
  std::string name;
  ParamType type;
  ParamValue default_value;
  std::string description;
};

/// What a collector is built with: roots, the injected values it asked for, its kwargs.
struct CollectorArgs {
  std::string name;
  const Roots* roots = nullptr;
  const NodeInfo* node = nullptr;  ///< set only when inject has node_info
  const TargetInfo* target = nullptr;
  std::vector<std::string> inject;
  std::map<std::string, ParamValue> params;  ///< every ParamSpec, defaults filled in
  /// Keyword arguments as written, for plugins (which have no parameter table in sonde).
  std::map<std::string, KwArg> raw_kwargs;
  /// The raw kind the collector's handler accepts ("scalar", "per-device vector",
  /// "per-device vectors", "counters", "none"): process plugins convert JSON with it.
  std::string handler_accepts;
  /// The handler's metric names (PerDeviceMultiAggregateHandler), for process plugins.
  std::vector<std::string> handler_metrics;
  double interval_s = 0.5;
  /// How long one tick's snapshot + collect calls may take.
  double deadline_s = 0.25;
  /// Where warnings go.
  std::function<void(const std::string&)> warn;
  /// Where facts go that change no figure the user asked for (Engine::note): the manifest only.
  std::function<void(const std::string&)> note;

  const ParamValue& param(const std::string& key) const { return params.at(key); }
  bool flag(const std::string& key) const { return std::get<bool>(param(key)); }
  const std::vector<std::string>& strings(const std::string& key) const {
    return std::get<std::vector<std::string>>(param(key));
  }
};

class Collector {
 public:
  virtual ~Collector() = default;
  /// Checks that the collector can work here; an error means "unavailable: <message>".
  virtual Result<void> setup() { return {}; }
  /// Whether the collector has values at this level.
  virtual bool supports(Level) const { return true; }
  /// Entries of per-device values at this level (1 for scalars and counters).
  virtual std::size_t devices(Level) const { return 1; }
  /// What it needs from the /proc scan.
  virtual ScanNeeds needs() const { return {}; }
  /// GPU discovery (phase 1): fills in the GPU part of node info.
  virtual void contribute_node_info(NodeInfo&) const {}
  /// Shared per-tick work, once before the collect calls of this tick.
  virtual void snapshot(const TickContext&) {}
  virtual Result<RawValue> collect(Level level, const TickContext& ctx) = 0;
  virtual void teardown() {}
  /// CPU time (core-seconds) of `level` measured but in no row yet: what the cpu collector carries
  /// into the next interval because it did not fit this one. The summary counts it when the run
  /// ends, so that no measured time is dropped.
  virtual double carried_cpu_s(Level) const { return 0; }

  // Shown by `sonde collectors`.
  virtual std::string_view source() const { return "builtin"; }  ///< builtin|native|python|exec
  virtual std::string file() const { return {}; }                ///< plugin file or command
  virtual int priority() const { return 0; }                     ///< core is 0
  /// True when snapshot/collect run code sonde does not control in sonde's own process: the
  /// engine then runs them on a worker thread under the deadline.
  virtual bool needs_watchdog() const { return false; }
};

/// Makes collectors for targets that are not built-in names ("plugin:libx.so", "python:m.C",
/// "exec"). An error means the entry is unusable; Errc::config errors stop the run (exit 2),
/// others make the collector unavailable.
struct TargetFactory {
  std::string prefix;  ///< matched against the start of _target_ ("exec" matches exactly)
  std::function<Result<std::unique_ptr<Collector>>(const std::string& target,
                                                   const CollectorArgs& args)>
      make;
};

struct CollectorInfo {
  std::string target;  ///< e.g. "sonde.collectors.cpu"
  std::string description;
  std::vector<ParamSpec> params;
  bool needs_node_info = false;  ///< built after GPU discovery even if inject omits node_info
  std::function<std::unique_ptr<Collector>(const CollectorArgs&)> make;
};

class Registry {
 public:
  void add(CollectorInfo info);
  /// Finds by full target ("sonde.collectors.cpu") or short name ("cpu").
  const CollectorInfo* find(const std::string& target) const;
  const std::vector<CollectorInfo>& all() const { return infos_; }

  void add_factory(TargetFactory factory);
  /// The factory whose prefix starts `target`, or nullptr.
  const TargetFactory* find_factory(const std::string& target) const;

 private:
  std::vector<CollectorInfo> infos_;
  std::vector<TargetFactory> factories_;
};

/// The one place where built-in collectors are registered (no static self-registration).
void register_builtin_collectors(Registry& registry);

/// Checks a kwarg against a parameter spec; errors name the origin and the expected type.
Result<ParamValue> convert_param(const ParamSpec& spec, const KwArg& arg,
                                 const std::string& collector);

}  // namespace sonde
