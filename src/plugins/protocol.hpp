#pragma once
// Process plugins: the JSON-lines protocol of docs/plugin-protocol.md and the factories of the
// "exec" and "python:" targets (implemented in process_host.cpp). The message builders and
// parsers are pure functions (protocol.cpp), shared by the host side (ProcessCollector) and the
// serving side (`sonde plugin-host`, plugin_host.cpp).
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/collector.hpp"

namespace sonde::plugins {

/// Target "exec": the `command` kwarg (a non-empty list of strings) speaks the protocol.
TargetFactory exec_factory();
/// Target "python:pkg.module.Class": the shipped runner hosts the class.
TargetFactory python_factory();

namespace protocol {

/// Longest line either side accepts (a reply with a huge context or vector is a protocol error
/// beyond this).
inline constexpr std::size_t kMaxLineBytes = 64u << 20;

// ---- values ----

/// Converts the JSON value of one level of a tick reply to the raw kind the handler accepts
/// (CollectorArgs::handler_accepts): a number (scalar); a list of numbers (per-device vector,
/// `null` entries meaning "not measured", or counters); a list of lists of numbers (per-device
/// vectors); anything for "none". A per-device vector may also be {"values": [...], "mean": x}.
/// Non-finite numbers, `null` where a number is needed and wrong shapes are errors.
Result<RawValue> raw_from_json(const nlohmann::json& value, std::string_view accepts);

/// The inverse, for the serving side: NaN entries become `null` (not representable in JSON).
nlohmann::json raw_to_json(const RawValue& value);

// ---- keyword arguments and injected values ----

/// A YAML kwarg as JSON: plain scalars become booleans, integers or finite numbers when they read
/// as such, quoted scalars stay strings.
nlohmann::json yaml_to_json(const YAML::Node& node);
/// The inverse (strings are tagged as quoted so that they stay strings).
YAML::Node json_to_yaml(const nlohmann::json& value);

nlohmann::json node_info_to_json(const NodeInfo& node);
NodeInfo node_info_from_json(const nlohmann::json& j);

// ---- messages, host → child ----

/// The setup request: name, kwargs (all but `skip_kwargs`), the injected values the entry asked
/// for, the candidate levels, the interval, the deadline and the handler's kind and metrics.
std::string setup_request(const CollectorArgs& args, std::span<const Level> levels,
                          std::span<const std::string> skip_kwargs);

/// The tick request; `context` adds the pid set of each non-system level and total_pids.
std::string tick_request(const TickContext& ctx, std::span<const Level> levels, bool context);

inline constexpr std::string_view kShutdownRequest = "{\"op\":\"shutdown\"}\n";

// ---- replies, child → host ----

struct SetupReply {
  /// Devices per level; nullopt: no value at this level.
  std::array<std::optional<std::size_t>, kNumLevels> devices{};
  bool context = false;  ///< wants the per-tick pid context
  int priority = 0;
};

/// Parses a setup reply; {"ok":false,"error":…} becomes an Errc::unavailable error with the
/// child's message.
Result<SetupReply> parse_setup_reply(std::string_view line);

struct TickReply {
  std::uint64_t tick = 0;
  /// Set when the whole tick failed ({"ok":false,"error":…}, or no "values").
  std::optional<std::string> error;
  /// Per level: the converted value or the error of that level (nullopt: level not in the reply).
  std::array<std::optional<Result<RawValue>>, kNumLevels> values{};
};

/// Parses a tick reply. An error means the line is not a JSON object with an unsigned "tick"
/// (it cannot be matched to a request); {"ok":false,"error":…} sets TickReply::error.
Result<TickReply> parse_tick_reply(std::string_view line, std::string_view accepts);

// ---- the serving side (sonde plugin-host) ----

/// A tick request turned back into what a collector reads: the TickContext points into `procs`.
struct TickRequest {
  TickContext ctx;
  std::vector<Level> levels;
  ProcSnapshot procs;
  TickRequest() = default;
  TickRequest(const TickRequest&) = delete;
  TickRequest& operator=(const TickRequest&) = delete;
};

/// Fills `out` from a parsed tick request; errors name the member that is malformed.
Result<void> parse_tick_request(const nlohmann::json& msg, TickRequest& out);

/// Parses the levels member of a request ("levels": ["process", …]).
Result<std::vector<Level>> parse_levels(const nlohmann::json& msg);

// ---- framing ----

/// Splits a byte stream into lines. `feed` appends bytes; `next` returns the next complete line
/// (without '\n' and a trailing '\r') or nullopt. Lines longer than kMaxLineBytes set `overflow`.
class LineBuffer {
 public:
  void feed(std::string_view bytes);
  std::optional<std::string> next();
  /// Bytes received after the last complete line.
  std::string_view partial() const { return std::string_view(buf_).substr(start_); }
  bool overflow() const { return overflow_; }
  void clear();

 private:
  std::string buf_;
  std::size_t start_ = 0;
  std::size_t scanned_ = 0;  ///< bytes after start_ known to hold no '\n'
  bool overflow_ = false;
};

}  // namespace protocol
}  // namespace sonde::plugins
