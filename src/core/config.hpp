#pragma once
// Configuration: YAML files merged in DESIGN.md's order, validated into typed settings. Every
// error names the file, the line and what was expected.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/level.hpp"
#include "core/result.hpp"

namespace sonde {

/// Where a value came from: file (or "<defaults>", "<command line>") and 1-based line/column.
struct Origin {
  std::string file;
  int line = 0;
  int column = 0;
  std::string str() const;  ///< "file:line:column" (or just the file when line is 0)
};

/// A keyword argument of a collector entry (any key other than the reserved ones), kept as YAML
/// so that the collector's parameter table can check its type.
struct KwArg {
  YAML::Node value;
  Origin origin;
};

struct HandlerSpec {
  std::string target;                 ///< e.g. "CumulativeRateHandler" (short name)
  std::optional<std::string> column;  ///< ScalarHandler
  std::optional<std::string> prefix;  ///< PerDevice(Multi)AggregateHandler
  std::vector<std::string> metrics;   ///< PerDeviceMultiAggregateHandler
  std::vector<std::string> columns;   ///< CumulativeRateHandler
  Origin origin;
};

struct CollectorSpec {
  std::string name;                 ///< the key under collectors:
  std::string target;               ///< "_target_", e.g. "sonde.collectors.cpu"
  Origin target_origin;             ///< where _target_ was given
  std::vector<std::string> inject;  ///< subset of kInjectKeys
  bool enabled = true;
  std::optional<double> timeout_s;  ///< per-collect deadline; default: interval / 2
  HandlerSpec handler;
  std::map<std::string, KwArg> kwargs;  ///< every other key
  Origin origin;                        ///< where the entry was last defined
};

inline constexpr const char* kInjectKeys[] = {"node_info", "pid", "process", "uid", "slurm_job"};

/// One row of the typed settings table (Config as data): produces parsing, docs and `config show`.
struct SettingInfo {
  const char* key;
  const char* type;
  const char* default_value;
  const char* description;
};
const std::vector<SettingInfo>& setting_table();

struct Config {
  double interval_s = 0.5;
  /// Levels asked for; empty means "all that apply" (slurm only inside a job).
  std::vector<Level> levels;
  Origin levels_origin;
  std::string out_dir = "sonde-runs";
  /// Raise sonde's own sampling thread to nice -10 when permitted (never other processes).
  bool raise_priority = true;
  /// Collectors in first-definition order (defaults first, then new names as files add them).
  std::vector<CollectorSpec> collectors;
  /// Files that were read, in merge order (for `config show` and the manifest).
  std::vector<std::string> sources;

  const CollectorSpec* find(const std::string& name) const;
};

/// The built-in defaults as YAML text (also what `config show --defaults` prints).
const std::string& default_config_yaml();

/// Parses one YAML document (`text`, named `file` in errors) and merges it into `cfg`: scalars
/// replace, `collectors` entries merge key by key (a `handler` given replaces the whole handler),
/// a new collector name is appended. Unknown keys, wrong types, bad levels, interval <= 0, bad
/// handler or inject keys are errors naming file:line:column and what was expected.
Result<void> merge_config_text(Config& cfg, const std::string& text, const std::string& file);

/// Reads and merges a file; a missing file is an error only when `required`.
Result<void> merge_config_file(Config& cfg, const std::string& path, bool required);

/// Defaults, then /etc/sonde/config.yaml, $XDG_CONFIG_HOME/sonde/config.yaml (or
/// ~/.config/sonde/config.yaml), ./sonde.yaml, then `explicit_file` when not empty.
/// Every location is injectable for tests; an empty `etc_file`, `cwd_file` or
/// `xdg_config_home` skips that file.
struct ConfigSearch {
  std::string explicit_file;
  std::string etc_file = "/etc/sonde/config.yaml";
  std::optional<std::string> xdg_config_home;  ///< default: $XDG_CONFIG_HOME or $HOME/.config
  std::string cwd_file = "sonde.yaml";
};
Result<Config> load_config(const ConfigSearch& search);

/// Serialises the merged configuration as YAML (for `sonde config show`).
std::string dump_config(const Config& cfg);

}  // namespace sonde
