#pragma once
// Configuration: YAML files merged in docs/configuration.md's order, validated into typed
// settings. Every error names the file, the line and what was expected.
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
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

/// The finite range of one numeric setting or command-line option. One table for the YAML
/// parser, the command line and docs/security.md ("Resource bounds"); a value outside it (or
/// inf, nan, a word) is refused with the key's file:line or the option's name.
struct NumericRange {
  const char* name;         ///< YAML key or option ("interval", "--duration", ...)
  double min;               ///< smallest accepted value
  double max;               ///< largest accepted value
  const char* unit;         ///< "seconds" or "" (a count)
  const char* description;  ///< what it bounds
};
const std::vector<NumericRange>& numeric_ranges();
/// The row named `name`; every name used in the code is in the table.
const NumericRange& numeric_range(std::string_view name);
/// Parses `text` as a finite number in `range` (integers only when `integer`); returns the value,
/// or the message "expected a number of seconds from 0.001 to 86400, got 'inf'".
Result<double> parse_in_range(const NumericRange& range, std::string_view text,
                              bool integer = false);
/// "expected a number of seconds from 0.001 to 86400" (no "got").
std::string range_expectation(const NumericRange& range, bool integer = false);

/// Bounds on what one configuration file may make sonde read and build (billion laughs).
inline constexpr std::size_t kMaxConfigBytes = 4u << 20;  ///< a larger file is refused
/// Nodes one document may expand to through its aliases: at most this many in all ...
inline constexpr std::size_t kMaxExpandedNodes = 100'000;
/// ... and at most this many per byte of the file (plus a small allowance).
inline constexpr std::size_t kMaxExpandedNodesPerByte = 16;

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
/// a new collector name is appended. Unknown keys, wrong types, bad levels, numbers out of their
/// range (numeric_ranges()), bad handler or inject keys, and aliases that expand beyond
/// kMaxExpandedNodes are errors naming file:line:column and what was expected.
Result<void> merge_config_text(Config& cfg, const std::string& text, const std::string& file);

/// Called with one line for each implicit configuration file that is ignored.
using ConfigWarn = std::function<void(const std::string&)>;

/// Reads and merges a file after the trust checks of docs/security.md (src/core/trust.hpp: no
/// symbolic link, a regular file, owned by root or the invoking user and not writable by others,
/// the same for its directory). `required` (an explicit --config, `config check`): every failure
/// is an error. Otherwise (a file found implicitly) a missing file, or one under a directory the
/// user cannot search, is skipped silently; one that exists but cannot be read, or that the
/// trust rules refuse, is ignored with one line through `warn` (stderr when empty). A malformed
/// file is an error either way.
Result<void> merge_config_file(Config& cfg, const std::string& path, bool required,
                               const ConfigWarn& warn = {});

/// Defaults, then /etc/sonde/config.yaml, $XDG_CONFIG_HOME/sonde/config.yaml (or
/// ~/.config/sonde/config.yaml; under AT_SECURE the invoking user's home from the password
/// database), ./sonde.yaml, then `explicit_file` when not empty.
/// Every location is injectable for tests; an empty `etc_file`, `cwd_file` or
/// `xdg_config_home` skips that file.
struct ConfigSearch {
  std::string explicit_file;
  std::string etc_file = "/etc/sonde/config.yaml";
  std::optional<std::string> xdg_config_home;  ///< default: $XDG_CONFIG_HOME or $HOME/.config
  std::string cwd_file = "sonde.yaml";
  ConfigWarn warn;  ///< ignored implicit files (stderr when empty)
};
Result<Config> load_config(const ConfigSearch& search);

/// Serialises the merged configuration as YAML (for `sonde config show`).
std::string dump_config(const Config& cfg);

}  // namespace sonde
