// Configuration: parsing, validation and merging of YAML files (see docs/configuration.md).
#include "core/config.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <iterator>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>

#include <yaml-cpp/eventhandler.h>

#include "core/trust.hpp"

namespace sonde {

namespace {

// Counts a YAML stream's documents, up to `cap`, remembering where the second one starts. Not
// YAML::LoadAll: on some malformed input (",21:rs []") yaml-cpp 0.7's parser reports an endless
// series of empty documents, and LoadAll collects them until memory runs out (found by
// tests/fuzz/config_fuzz.cpp).
class DocumentCounter final : public YAML::EventHandler {
 public:
  std::size_t documents = 0;
  YAML::Mark second;  ///< where the second document's first node is (else its start)
  void OnDocumentStart(const YAML::Mark& mark) override {
    if (++documents == 2) second = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (documents == 2 && !second_node_) {
      second = mark;
      second_node_ = true;
    }
  }
  bool second_node_ = false;
};

DocumentCounter count_documents(const std::string& text, std::size_t cap) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentCounter counter;
  std::size_t handled = 0;
  while (handled < cap && parser.HandleNextDocument(counter)) ++handled;
  return counter;
}

// The only global: the built-in defaults, merged first under the name "<defaults>".
constexpr const char* kDefaultConfigYaml =
    R"(# sonde built-in defaults. Files merged later change these key by key.
interval: 0.5        # seconds between two samples
out_dir: sonde-runs  # where `sonde run` and `sonde record` create their run directories
raise_priority: true  # raise sonde's own sampling thread's priority when permitted
# levels: not set, i.e. every level that applies (slurm only inside a Slurm job)
collectors:
  # The target's process tree, uid and Slurm job for the tick context; produces no columns.
  process:
    _target_: sonde.collectors.process
    inject: [pid, process, uid, slurm_job]
    handler: {_target_: NoOpHandler}
  # CPU utilisation in percent: cpu_util_0..N-1 and cpu_util_avg|min|max.
  cpu:
    _target_: sonde.collectors.cpu
    inject: [node_info]
    handler: {_target_: PerDeviceAggregateHandler, prefix: cpu_util_}
  # Memory in use, GiB, shared pages counted once: Pss sum of the level's processes (RSS where
  # /proc/<pid>/smaps_rollup is unreadable); MemTotal - MemAvailable for system, or AnonPages +
  # Mapped when larger.
  memory:
    _target_: sonde.collectors.memory
    inject: []
    handler: {_target_: ScalarHandler, column: memory}
  # RSS sum of the level's processes, GiB, as ps shows it (shared pages once per process); no
  # system-level value.
  memory_rss:
    _target_: sonde.collectors.memory_rss
    inject: []
    handler: {_target_: ScalarHandler, column: memory_rss}
  # Disk I/O rates: operations/s and bytes/s.
  io:
    _target_: sonde.collectors.io
    inject: []
    handler:
      _target_: CumulativeRateHandler
      columns: [io_read_count, io_write_count, io_read, io_write]
  # Network rates: bytes/s and packets/s.
  network:
    _target_: sonde.collectors.network
    inject: []
    handler:
      _target_: CumulativeRateHandler
      columns: [net_bytes_sent, net_bytes_recv, net_packets_sent, net_packets_recv]
  # Number of processes in the level.
  procs:
    _target_: sonde.collectors.procs
    inject: []
    handler: {_target_: ScalarHandler, column: num_procs}
  # GPUs (NVML, ROCm SMI): utilisation %, memory-controller utilisation % (band), memory GiB,
  # power W: gpu_util_0..N-1|avg|min|max, gpu_band_*, gpu_mem_*, gpu_power_*. Unavailable
  # without GPUs.
  gpu:
    _target_: sonde.collectors.gpu
    inject: []
    handler: {_target_: PerDeviceMultiAggregateHandler, prefix: gpu_, metrics: [util, band, mem, power]}
  # Energy (RAPL powercap, NVML, ROCm SMI): power W and energy since the start J per domain,
  # energy_power_0..N-1|avg|min|max, energy_joules_*; entry i is manifest node_info.energy.domains[i].
  # Unavailable without RAPL and GPUs (docs/energy.md). Parameters: carbon_intensity (g CO2/kWh
  # for the summary's CO2 estimate; default 480, the 2023 world average of Ember's Global
  # Electricity Review 2024), gpus (default true).
  energy:
    _target_: sonde.collectors.energy
    inject: []
    handler: {_target_: PerDeviceMultiAggregateHandler, prefix: energy_, metrics: [power, joules]}
)";

/// What a handler argument must be, for "needs ..." messages.
std::string_view arg_kind(std::string_view arg) {
  if (arg == "column") return "a column name";
  if (arg == "prefix") return "a column-name prefix";
  if (arg == "metrics") return "a non-empty list of metric names";
  return "a non-empty list of column names";
}

/// The built-in handlers and the arguments each one requires (all of them are required).
struct HandlerInfo {
  std::string_view name;
  std::string_view args[2];
  std::size_t num_args;
};
constexpr HandlerInfo kHandlers[] = {
    {"ScalarHandler", {"column", {}}, 1},
    {"PerDeviceAggregateHandler", {"prefix", {}}, 1},
    {"PerDeviceMultiAggregateHandler", {"prefix", "metrics"}, 2},
    {"CumulativeRateHandler", {"columns", {}}, 1},
    {"NoOpHandler", {{}, {}}, 0},
};

constexpr std::string_view kEntryKeys[] = {"_target_", "inject", "enabled", "timeout", "handler"};

using Items = std::vector<std::pair<YAML::Node, YAML::Node>>;

template <class Range>
std::string join(const Range& range, std::string_view sep = ", ") {
  std::string out;
  for (const auto& item : range) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::string handler_names() {
  std::vector<std::string> names;
  for (const HandlerInfo& h : kHandlers) names.emplace_back(h.name);
  return join(names);
}

std::string level_names() {
  std::vector<std::string> names;
  for (Level l : kAllLevels) names.emplace_back(level_name(l));
  return join(names);
}

Origin origin_at(const std::string& file, const YAML::Mark& mark) {
  // yaml-cpp counts from 0 and uses -1 for "no position"; a message always names a position.
  return Origin{file, std::max(mark.line, 0) + 1, std::max(mark.column, 0) + 1};
}

Error config_error(const Origin& where, const std::string& message) {
  return make_error(Errc::config, where.str() + ": " + message);
}

/// "'fast'", "a list", ... for "got ..." in messages.
std::string describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      if (n.Tag() == "!") return "'" + n.Scalar() + "' (a quoted string)";
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

bool is_column_name(std::string_view s) {
  if (s.empty()) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(s.front())) return false;
  return std::all_of(s.begin() + 1, s.end(),
                     [&](char c) { return alpha(c) || (c >= '0' && c <= '9'); });
}

/// Whether line `line` (0-based) of `text` has a tab in its indentation.
bool indented_with_tab(std::string_view text, int line) {
  std::size_t pos = 0;
  for (int i = 0; i < line && pos != std::string_view::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (pos == std::string_view::npos) return false;
  std::size_t end = text.find_first_not_of(" \t", pos);
  return text.substr(pos, end == std::string_view::npos ? end : end - pos).find('\t') !=
         std::string_view::npos;
}

/// The first character YAML does not allow in a stream (it allows tab, line feed, carriage
/// return and printable Unicode in UTF-8), or nullopt. yaml-cpp accepts raw control bytes and
/// invalid UTF-8 but `config show` cannot print them back as YAML (found by
/// tests/fuzz/config_fuzz.cpp), so they are refused where they are, before parsing.
struct BadCharacter {
  int line = 0;    ///< 0-based, as yaml-cpp's marks
  int column = 0;  ///< 0-based, in characters
  std::string what;
};

std::optional<BadCharacter> first_bad_character(std::string_view text) {
  int line = 0;
  int column = 0;
  std::size_t i = 0;
  auto bad = [&](std::string what) { return BadCharacter{line, column, std::move(what)}; };
  auto hex = [](unsigned v, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%0*X", digits, v);
    return std::string(buf);
  };
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\n') {
        ++line;
        column = 0;
        ++i;
        continue;
      }
      if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7F)
        return bad("control character U+" + hex(c, 4));
      ++column;
      ++i;
      continue;
    }
    // A UTF-8 sequence: its length, the smallest code point it may encode (no overlong forms).
    std::size_t len = 0;
    unsigned cp = 0;
    unsigned min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return bad("byte 0x" + hex(c, 2) + ", which is not UTF-8");
    }
    for (std::size_t k = 1; k < len; ++k) {
      if (i + k >= text.size()) return bad("a UTF-8 sequence cut short at the end of the file");
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return bad("byte 0x" + hex(c, 2) + ", which is not UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return bad("byte 0x" + hex(c, 2) + ", which is not UTF-8");
    // YAML's printable set leaves out the C1 controls (but NEL), the surrogates and U+FFFE/FFFF.
    if ((cp >= 0x80 && cp <= 0x9F && cp != 0x85) || cp == 0xFFFE || cp == 0xFFFF)
      return bad("control character U+" + hex(cp, 4));
    ++column;
    i += len;
  }
  return std::nullopt;
}

std::string format_double(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

/// Parses one YAML document; everything it reports is prefixed with the file's name.
class Parser {
 public:
  explicit Parser(const std::string& file) : file_(file) {}

  Result<void> merge(Config& cfg, const YAML::Node& root) {
    if (!root.IsMap()) {
      return error(root.Mark(), "expected a map of settings (" + setting_keys() +
                                    ") at the top level, got " + describe(root));
    }
    auto items = map_items(root, "");
    if (!items) return items.error();
    for (const auto& [k, v] : *items) {
      const std::string& key = k.Scalar();
      Result<void> r;
      if (key == "interval") {
        auto s = number_value(k, v, key, numeric_range("interval"));
        if (!s) return s.error();
        cfg.interval_s = *s;
      } else if (key == "levels") {
        r = levels(cfg, k, v);
      } else if (key == "out_dir") {
        auto s = string_value(k, v, key);
        if (!s) return s.error();
        cfg.out_dir = *s;
      } else if (key == "raise_priority") {
        auto b = bool_value(k, v, key);
        if (!b) return b.error();
        cfg.raise_priority = *b;
      } else if (key == "collectors") {
        r = collectors(cfg, k, v);
      } else {
        return error(k.Mark(),
                     "unknown key '" + key + "' (expected one of: " + setting_keys() + ")");
      }
      if (!r) return r;
    }
    return {};
  }

 private:
  static std::string setting_keys() {
    std::vector<std::string> keys;
    for (const SettingInfo& s : setting_table()) keys.emplace_back(s.key);
    return join(keys);
  }

  Error error(const YAML::Mark& mark, const std::string& message) const {
    return config_error(origin_at(file_, mark), message);
  }

  /// Where to report a value: an empty value has no position of its own, so use its key's.
  static YAML::Mark value_mark(const YAML::Node& key, const YAML::Node& value) {
    if (value.IsNull() && value.Mark().line != key.Mark().line) return key.Mark();
    return value.Mark();
  }

  /// The key/value pairs of a map whose keys are non-empty, unique strings.
  Result<Items> map_items(const YAML::Node& map, const std::string& path) const {
    Items items;
    std::map<std::string, int> seen;  // key -> 1-based line
    for (const auto& kv : map) {
      const YAML::Node k = kv.first;  // copies: the iterator's value is a temporary proxy
      std::string where = path.empty() ? std::string() : path + ": ";
      if (!k.IsScalar() || k.Scalar().empty())
        return error(k.Mark(), where + "expected a name as key, got " + describe(k));
      auto [pos, inserted] = seen.emplace(k.Scalar(), k.Mark().line + 1);
      if (!inserted) {
        return error(k.Mark(), where + "duplicate key '" + k.Scalar() + "' (first given on line " +
                                   std::to_string(pos->second) + ")");
      }
      items.emplace_back(k, kv.second);
    }
    return items;
  }

  /// A plain (unquoted) finite number in `range`: a quoted scalar is a string in YAML, so "0.5"
  /// is refused like any other word.
  Result<double> number_value(const YAML::Node& k, const YAML::Node& v, const std::string& path,
                              const NumericRange& range) const {
    double d = 0;
    const bool number = v.IsScalar() && v.Tag() != "!" && YAML::convert<double>::decode(v, d);
    if (!number || !(d >= range.min && d <= range.max)) {
      return error(value_mark(k, v),
                   path + ": " + range_expectation(range) + ", got " + describe(v));
    }
    return d;
  }

  Result<std::string> string_value(const YAML::Node& k, const YAML::Node& v,
                                   const std::string& path) const {
    if (!v.IsScalar() || v.Scalar().empty())
      return error(value_mark(k, v), path + ": expected a string, got " + describe(v));
    return v.Scalar();
  }

  Result<bool> bool_value(const YAML::Node& k, const YAML::Node& v, const std::string& path) const {
    bool b = false;
    if (!v.IsScalar() || v.Tag() == "!" || !YAML::convert<bool>::decode(v, b))
      return error(value_mark(k, v), path + ": expected true or false, got " + describe(v));
    return b;
  }

  Result<std::string> column_name(const YAML::Node& k, const YAML::Node& v,
                                  const std::string& path) const {
    if (!v.IsScalar() || !is_column_name(v.Scalar())) {
      return error(
          value_mark(k, v),
          path + ": expected a column name matching [A-Za-z_][A-Za-z0-9_]*, got " + describe(v));
    }
    return v.Scalar();
  }

  /// A non-empty list of unique column names.
  Result<std::vector<std::string>> column_list(const YAML::Node& k, const YAML::Node& v,
                                               const std::string& path) const {
    if (!v.IsSequence() || v.size() == 0) {
      return error(value_mark(k, v),
                   path + ": expected a non-empty list of column names, got " +
                       (v.IsSequence() ? std::string("an empty list") : describe(v)));
    }
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      YAML::Node item = v[i];
      auto name = column_name(item, item, path + "[" + std::to_string(i) + "]");
      if (!name) return name.error();
      if (std::find(out.begin(), out.end(), *name) != out.end())
        return error(item.Mark(), path + ": duplicate column '" + *name + "'");
      out.push_back(*name);
    }
    return out;
  }

  Result<void> levels(Config& cfg, const YAML::Node& k, const YAML::Node& v) const {
    if (!v.IsSequence() || v.size() == 0) {
      return error(value_mark(k, v),
                   "levels: expected a non-empty list of levels (" + level_names() + "), got " +
                       (v.IsSequence() ? std::string("an empty list") : describe(v)));
    }
    std::vector<Level> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      YAML::Node item = v[i];
      std::optional<Level> level;
      if (item.IsScalar()) level = parse_level(item.Scalar());
      if (!level) {
        return error(item.Mark(), "levels: unknown level " + describe(item) +
                                      " (expected one of: " + level_names() + ")");
      }
      if (std::find(out.begin(), out.end(), *level) != out.end())
        return error(item.Mark(), "levels: duplicate level " + describe(item));
      out.push_back(*level);
    }
    cfg.levels = std::move(out);
    cfg.levels_origin = origin_at(file_, k.Mark());
    return {};
  }

  Result<void> collectors(Config& cfg, const YAML::Node& k, const YAML::Node& v) const {
    if (!v.IsMap()) {
      return error(value_mark(k, v),
                   "collectors: expected a map of collector name to entry, got " + describe(v));
    }
    auto items = map_items(v, "collectors");
    if (!items) return items.error();
    for (const auto& [name_node, entry] : *items) {
      const std::string& name = name_node.Scalar();
      auto it = std::find_if(cfg.collectors.begin(), cfg.collectors.end(),
                             [&](const CollectorSpec& c) { return c.name == name; });
      bool is_new = it == cfg.collectors.end();
      CollectorSpec spec;
      if (is_new) {
        spec.name = name;
      } else {
        spec = *it;
      }
      auto r = collector_entry(spec, is_new, name_node, entry);
      if (!r) return r;
      if (is_new) {
        cfg.collectors.push_back(std::move(spec));
      } else {
        *it = std::move(spec);
      }
    }
    return {};
  }

  Result<void> collector_entry(CollectorSpec& spec, bool is_new, const YAML::Node& k,
                               const YAML::Node& v) const {
    const std::string path = "collectors." + spec.name;
    if (!v.IsMap()) {
      return error(value_mark(k, v), path +
                                         ": expected a map with _target_, handler, inject, "
                                         "enabled, timeout and keyword arguments, got " +
                                         describe(v));
    }
    auto items = map_items(v, path);
    if (!items) return items.error();
    bool has_target = false;
    bool has_handler = false;
    for (const auto& [ek, ev] : *items) {
      const std::string& key = ek.Scalar();
      const std::string key_path = path + "." + key;
      if (key == "_target_") {
        auto s = string_value(ek, ev, key_path);
        if (!s) return s.error();
        spec.target = *s;
        spec.target_origin = origin_at(file_, value_mark(ek, ev));
        has_target = true;
      } else if (key == "inject") {
        auto r = inject(spec, ek, ev, key_path);
        if (!r) return r;
      } else if (key == "enabled") {
        auto b = bool_value(ek, ev, key_path);
        if (!b) return b.error();
        spec.enabled = *b;
      } else if (key == "timeout") {
        auto s = number_value(ek, ev, key_path, numeric_range("timeout"));
        if (!s) return s.error();
        spec.timeout_s = *s;
      } else if (key == "handler") {
        auto h = handler(ek, ev, key_path);
        if (!h) return h.error();
        spec.handler = std::move(*h);
        has_handler = true;
      } else if (key.front() == '_') {
        // Probably a misspelt _target_; a keyword argument never starts with '_'.
        return error(ek.Mark(), path + ": unknown reserved key '" + key +
                                    "' (expected one of: " + join(kEntryKeys) + ")");
      } else {
        spec.kwargs[key] = KwArg{YAML::Clone(ev), origin_at(file_, value_mark(ek, ev))};
      }
    }
    if (is_new && !has_target) {
      return error(k.Mark(), path +
                                 ": a new collector needs '_target_' (e.g. sonde.collectors.cpu, "
                                 "plugin:libfoo.so, python:module.Class, exec)");
    }
    if (is_new && !has_handler) {
      return error(k.Mark(), path +
                                 ": a new collector needs 'handler' (a map with _target_: one "
                                 "of " +
                                 handler_names() + ")");
    }
    spec.origin = origin_at(file_, k.Mark());
    return {};
  }

  Result<void> inject(CollectorSpec& spec, const YAML::Node& k, const YAML::Node& v,
                      const std::string& path) const {
    const std::string valid = join(kInjectKeys);
    if (!v.IsSequence())
      return error(value_mark(k, v),
                   path + ": expected a list of inject keys (" + valid + "), got " + describe(v));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      YAML::Node item = v[i];
      bool known = item.IsScalar() && std::find(std::begin(kInjectKeys), std::end(kInjectKeys),
                                                item.Scalar()) != std::end(kInjectKeys);
      if (!known) {
        return error(item.Mark(), path + ": unknown inject key " + describe(item) +
                                      " (expected one of: " + valid + ")");
      }
      if (std::find(out.begin(), out.end(), item.Scalar()) != out.end())
        return error(item.Mark(), path + ": duplicate inject key " + describe(item));
      out.push_back(item.Scalar());
    }
    spec.inject = std::move(out);
    return {};
  }

  Result<HandlerSpec> handler(const YAML::Node& k, const YAML::Node& v,
                              const std::string& path) const {
    if (!v.IsMap()) {
      return error(value_mark(k, v), path + ": expected a map with _target_ (one of " +
                                         handler_names() + ") and its arguments, got " +
                                         describe(v));
    }
    auto items = map_items(v, path);
    if (!items) return items.error();
    HandlerSpec spec;
    spec.origin = origin_at(file_, k.Mark());
    const HandlerInfo* info = nullptr;
    for (const auto& [hk, hv] : *items) {
      if (hk.Scalar() != "_target_") continue;
      auto target = string_value(hk, hv, path + "._target_");
      if (!target) return target.error();
      // JUmPER configs name handlers by Python path; the last component is the handler.
      std::string short_name = target->substr(target->rfind('.') + 1);
      for (const HandlerInfo& h : kHandlers)
        if (h.name == short_name) info = &h;
      if (!info) {
        return error(hv.Mark(), path + "._target_: unknown handler '" + *target +
                                    "' (expected one of: " + handler_names() + ")");
      }
      spec.target = short_name;
    }
    if (!info) {
      return error(k.Mark(),
                   path + ": missing '_target_' (expected one of: " + handler_names() + ")");
    }
    const auto args = std::span(info->args, info->num_args);
    for (const auto& [hk, hv] : *items) {
      const std::string& key = hk.Scalar();
      const std::string key_path = path + "." + key;
      if (key == "_target_") continue;
      if (std::find(args.begin(), args.end(), key) == args.end()) {
        std::string expected =
            args.empty() ? std::string("it takes none") : "expected: " + join(args);
        return error(hk.Mark(), path + ": unknown argument '" + key + "' for " + spec.target +
                                    " (" + expected + ")");
      }
      if (key == "column" || key == "prefix") {
        auto name = column_name(hk, hv, key_path);
        if (!name) return name.error();
        (key == "column" ? spec.column : spec.prefix) = *name;
      } else {
        auto list = column_list(hk, hv, key_path);
        if (!list) return list.error();
        (key == "columns" ? spec.columns : spec.metrics) = std::move(*list);
      }
    }
    for (std::string_view arg : args) {
      bool given = arg == "column"    ? spec.column.has_value()
                   : arg == "prefix"  ? spec.prefix.has_value()
                   : arg == "columns" ? !spec.columns.empty()
                                      : !spec.metrics.empty();
      if (!given) {
        return error(k.Mark(), path + ": " + spec.target + " needs '" + std::string(arg) + "' (" +
                                   std::string(arg_kind(arg)) + ")");
      }
    }
    return spec;
  }

  const std::string& file_;
};

/// Emits a kwarg as it was written; a quoted scalar stays quoted so that it stays a string.
void emit_node(YAML::Emitter& out, const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: out << YAML::Null; return;
    case YAML::NodeType::Scalar:
      if (n.Tag() == "!") out << YAML::DoubleQuoted;
      out << n.Scalar();
      return;
    case YAML::NodeType::Sequence:
      if (n.Style() == YAML::EmitterStyle::Flow) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const auto& item : n) emit_node(out, item);
      out << YAML::EndSeq;
      return;
    case YAML::NodeType::Map:
      if (n.Style() == YAML::EmitterStyle::Flow) out << YAML::Flow;
      out << YAML::BeginMap;
      for (const auto& kv : n) {
        out << YAML::Key;
        emit_node(out, kv.first);
        out << YAML::Value;
        emit_node(out, kv.second);
      }
      out << YAML::EndMap;
      return;
  }
}

/// Walks `n` as if every alias were expanded, spending one unit of `budget` per node; true
/// (and stops) when the budget runs out. Its cost is bounded by the budget, not by the tree.
/// `depth` counts the nesting: past kMaxNesting it stops as well (`too_deep`), before a tree
/// that refers to itself through an alias ("&a [*a]") or a deep one overflows the stack.
constexpr int kMaxNesting = 64;
bool expands_beyond(const YAML::Node& n, std::size_t& budget, bool& too_deep, int depth = 0) {
  if (budget == 0) return true;
  if (depth > kMaxNesting) {
    too_deep = true;
    return true;
  }
  --budget;
  if (n.IsSequence()) {
    for (const auto& item : n)
      if (expands_beyond(item, budget, too_deep, depth + 1)) return true;
  } else if (n.IsMap()) {
    for (const auto& kv : n)
      if (expands_beyond(kv.first, budget, too_deep, depth + 1) ||
          expands_beyond(kv.second, budget, too_deep, depth + 1))
        return true;
  }
  return false;
}

void emit_flow_list(YAML::Emitter& out, const std::vector<std::string>& items) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& s : items) out << s;
  out << YAML::EndSeq;
}

}  // namespace

std::string Origin::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const CollectorSpec* Config::find(const std::string& name) const {
  for (const CollectorSpec& c : collectors)
    if (c.name == name) return &c;
  return nullptr;
}

const std::vector<SettingInfo>& setting_table() {
  static const std::vector<SettingInfo> table = {
      {"interval", "number (seconds)", "0.5",
       "Time between two samples, in seconds; from 0.001 to 86400 (one day)."},
      {"levels", "list of process, user, slurm, system", "(every level that applies)",
       "Levels to sample; without it every level that applies (slurm only inside a Slurm job)."},
      {"out_dir", "string", "sonde-runs",
       "Directory in which `sonde run` and `sonde record` create their run directories."},
      {"raise_priority", "boolean", "true",
       "Let sonde raise its own sampling thread's priority (nice -10) when it is permitted to "
       "(root or CAP_SYS_NICE), so ticks stay on time on a busy node. Never touches other "
       "processes; the manifest says whether it happened."},
      {"collectors", "map of name to collector entry",
       "process, cpu, memory, io, network, procs, gpu",
       "Collectors to run, each with its _target_, inject, handler and keyword arguments."},
  };
  return table;
}

const std::vector<NumericRange>& numeric_ranges() {
  static const std::vector<NumericRange> table = {
      {"interval", 0.001, 86400, "seconds", "time between two samples (interval:, --interval)"},
      {"timeout", 0.001, 86400, "seconds",
       "deadline of one collect call (collectors.NAME.timeout)"},
      {"--duration", 0.001, 31'536'000, "seconds", "sonde record --duration (at most 365 days)"},
      {"--pid", 1, 4'194'304, "",
       "sonde record --pid, sonde stream --target-pid (the kernel's PID_MAX_LIMIT)"},
      {"--max-series", 1, 100'000, "",
       "sonde serve --max-series: label values per user/job family"},
      {"--watch", 0.001, 86400, "seconds",
       "sonde status -i/--watch: time between two redraws (at least 0.1 is used)"},
      {"--cpu-interval", 0, 10, "seconds", "sonde status --cpu-interval (0: not measured)"},
      {"--gpuname-width", 0, 1000, "", "sonde gpustat --gpuname-width"},
      {"port", 0, 65535, "", "sonde serve --listen HOST:PORT (0: any free port)"},
  };
  return table;
}

const NumericRange& numeric_range(std::string_view name) {
  for (const NumericRange& r : numeric_ranges())
    if (name == r.name) return r;
  std::cerr << "sonde: internal error: no numeric range named " << name << "\n";
  std::abort();
}

std::string range_expectation(const NumericRange& range, bool integer) {
  std::string what = integer ? "a whole number" : "a number";
  if (*range.unit) what += std::string(" of ") + range.unit;
  const auto fixed = [](double v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, res.ptr);
  };
  return "expected " + what + " from " + fixed(range.min) + " to " + fixed(range.max);
}

Result<double> parse_in_range(const NumericRange& range, std::string_view text, bool integer) {
  double d = 0;
  const char* end = text.data() + text.size();
  // from_chars: no locale, no leading spaces or '+'; "inf" and "nan" parse and are then refused.
  auto res = std::from_chars(text.data(), end, d);
  const bool ok = res.ec == std::errc() && res.ptr == end && d >= range.min && d <= range.max &&
                  (!integer || d == std::floor(d));
  if (!ok)
    return make_error(Errc::config,
                      range_expectation(range, integer) + ", got '" + std::string(text) + "'");
  return d;
}

const std::string& default_config_yaml() {
  static const std::string text = kDefaultConfigYaml;
  return text;
}

Result<void> merge_config_text(Config& cfg, const std::string& text, const std::string& file) {
  Config merged = cfg;  // a failed merge leaves `cfg` as it was
  if (auto bad = first_bad_character(text)) {
    return config_error(Origin{file, bad->line + 1, bad->column + 1},
                        "invalid YAML: " + bad->what +
                            " (a configuration is UTF-8 text; write other characters as escapes "
                            "in a double-quoted string, e.g. \"\\x01\")");
  }
  try {
    if (const DocumentCounter counted = count_documents(text, 2); counted.documents > 1)
      return config_error(origin_at(file, counted.second),
                          "expected one YAML document, found 2 or more");
    std::vector<YAML::Node> docs;
    if (YAML::Node first = YAML::Load(text); first.IsDefined()) docs.push_back(std::move(first));
    // Aliases share nodes, so a small file can stand for a huge tree ("billion laughs") that
    // `config show`, the collectors' arguments and their children would build in full.
    const std::size_t limit =
        std::min(kMaxExpandedNodes, 1000 + kMaxExpandedNodesPerByte * text.size());
    std::size_t budget = limit;
    bool too_deep = false;
    if (!docs.empty() && expands_beyond(docs[0], budget, too_deep)) {
      if (too_deep) {
        return config_error(origin_at(file, docs[0].Mark()),
                            "the YAML nests deeper than " + std::to_string(kMaxNesting) +
                                " levels (or an alias refers to a node that holds it); "
                                "refusing it");
      }
      return config_error(origin_at(file, docs[0].Mark()),
                          "the YAML expands to more than " + std::to_string(limit) +
                              " nodes through its aliases (at most " +
                              std::to_string(kMaxExpandedNodesPerByte) +
                              " per byte of the file and " + std::to_string(kMaxExpandedNodes) +
                              " in all); refusing it");
    }
    // An empty file (or one with only comments) changes nothing.
    if (!docs.empty() && !docs[0].IsNull()) {
      auto r = Parser(file).merge(merged, docs[0]);
      if (!r) return r;
    }
  } catch (const YAML::Exception& e) {
    // yaml-cpp's message for a tab-indented line is often just "illegal map value".
    std::string hint;
    if (e.msg.find("tab") == std::string::npos && e.mark.line >= 0 &&
        indented_with_tab(text, e.mark.line))
      hint = " (YAML is indented with spaces, not tabs)";
    return config_error(origin_at(file, e.mark), "invalid YAML: " + e.msg + hint);
  }
  merged.sources.push_back(file);
  cfg = std::move(merged);
  return {};
}

Result<void> merge_config_file(Config& cfg, const std::string& path, bool required,
                               const ConfigWarn& warn) {
  auto fd = open_trusted(path, "config file");
  if (!fd) {
    if (required) return fd.error();
    if (fd.error().code == Errc::io) {
      // Missing, or under a directory this user cannot search (HOME=/root for another user):
      // nothing to read, as when there is no file.
      struct stat st {};
      if (::lstat(path.c_str(), &st) != 0) return {};
    }
    // It exists but cannot be read, or the trust rules refuse it: say so once, go on without.
    std::string message = fd.error().message;
    if (message.rfind("refusing ", 0) == 0) message.replace(0, 8, "ignoring");
    message += " (see docs/security.md)";
    if (warn) {
      warn(message);
    } else {
      std::cerr << "sonde: warning: " << message << "\n";
    }
    return {};
  }
  auto text = read_trusted(*fd, path, kMaxConfigBytes);
  if (!text) return text.error();
  return merge_config_text(cfg, *text, path);
}

Result<Config> load_config(const ConfigSearch& search) {
  Config cfg;
  if (auto r = merge_config_text(cfg, default_config_yaml(), "<defaults>"); !r) return r.error();
  if (!search.etc_file.empty()) {
    if (auto r = merge_config_file(cfg, search.etc_file, false, search.warn); !r) return r.error();
  }
  std::string xdg;
  if (search.xdg_config_home) {
    xdg = *search.xdg_config_home;
  } else if (secure_mode()) {
    // Setuid or with capabilities: no file named by the environment, the invoking user's home.
    if (const struct passwd* pw = ::getpwuid(::getuid()); pw && pw->pw_dir && *pw->pw_dir)
      xdg = std::string(pw->pw_dir) + "/.config";
  } else if (const char* env = std::getenv("XDG_CONFIG_HOME"); env && *env) {
    xdg = env;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    xdg = std::string(home) + "/.config";
  }
  if (!xdg.empty()) {
    if (auto r = merge_config_file(cfg, xdg + "/sonde/config.yaml", false, search.warn); !r)
      return r.error();
  }
  if (!search.cwd_file.empty()) {
    if (auto r = merge_config_file(cfg, search.cwd_file, false, search.warn); !r) return r.error();
  }
  if (!search.explicit_file.empty()) {
    if (auto r = merge_config_file(cfg, search.explicit_file, true, search.warn); !r)
      return r.error();
  }
  return cfg;
}

std::string dump_config(const Config& cfg) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "interval" << YAML::Value << format_double(cfg.interval_s);
  if (!cfg.levels.empty()) {
    std::vector<std::string> names;
    for (Level l : cfg.levels) names.emplace_back(level_name(l));
    out << YAML::Key << "levels" << YAML::Value;
    emit_flow_list(out, names);
  }
  out << YAML::Key << "out_dir" << YAML::Value << cfg.out_dir;
  out << YAML::Key << "raise_priority" << YAML::Value << cfg.raise_priority;
  out << YAML::Key << "collectors" << YAML::Value << YAML::BeginMap;
  for (const CollectorSpec& c : cfg.collectors) {
    out << YAML::Key << c.name << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "_target_" << YAML::Value << c.target;
    out << YAML::Key << "inject" << YAML::Value;
    emit_flow_list(out, c.inject);
    out << YAML::Key << "enabled" << YAML::Value << c.enabled;
    if (c.timeout_s) out << YAML::Key << "timeout" << YAML::Value << format_double(*c.timeout_s);
    const HandlerSpec& h = c.handler;
    out << YAML::Key << "handler" << YAML::Value << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "_target_" << YAML::Value << h.target;
    if (h.column) out << YAML::Key << "column" << YAML::Value << *h.column;
    if (h.prefix) out << YAML::Key << "prefix" << YAML::Value << *h.prefix;
    if (!h.metrics.empty()) {
      out << YAML::Key << "metrics" << YAML::Value;
      emit_flow_list(out, h.metrics);
    }
    if (!h.columns.empty()) {
      out << YAML::Key << "columns" << YAML::Value;
      emit_flow_list(out, h.columns);
    }
    out << YAML::EndMap;
    for (const auto& [key, arg] : c.kwargs) {
      out << YAML::Key << key << YAML::Value;
      emit_node(out, arg.value);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap << YAML::EndMap;

  std::string text = "# sonde configuration, merged from (later wins):\n";
  for (const std::string& s : cfg.sources) text += "#   " + s + "\n";
  if (cfg.levels.empty()) text += "# levels: not set, i.e. every level that applies\n";
  text += out.c_str();
  text += "\n";
  return text;
}

}  // namespace sonde
