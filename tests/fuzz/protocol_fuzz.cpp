// Fuzz target: the process-plugin protocol (src/plugins/protocol.hpp), both directions. The input
// is a byte stream cut into lines by LineBuffer (fed in pieces whose sizes the input's first byte
// chooses); each line is parsed as a setup reply, as a tick reply for every handler kind, and as a
// request the serving side (`sonde plugin-host`) reads. Checks: lines hold no '\n'; a reply value
// that was accepted converts back to the same JSON (raw_to_json, then raw_from_json).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "plugins/protocol.hpp"

using sonde::fuzz::check;
namespace protocol = sonde::plugins::protocol;

namespace {

constexpr std::string_view kAccepts[] = {
    "none", "scalar", "per-device vector", "counters", "per-device vectors", "a kind not known"};

void reply_line(const std::string& line) {
  (void)protocol::parse_setup_reply(line);
  for (std::string_view accepts : kAccepts) {
    auto reply = protocol::parse_tick_reply(line, accepts);
    if (!reply) continue;
    for (const auto& value : reply->values) {
      if (!value || !value->ok()) continue;
      const nlohmann::json j = protocol::raw_to_json(value->value());
      auto back = protocol::raw_from_json(j, accepts);
      check(back.ok(), "an accepted reply value converts back");
      check(protocol::raw_to_json(back.value()).dump() == j.dump(),
            "an accepted reply value converts back unchanged");
    }
  }
}

void request_line(const std::string& line) {
  const nlohmann::json msg = nlohmann::json::parse(line, nullptr, false);
  if (msg.is_discarded() || !msg.is_object()) return;
  // The serving side answers a request whose members have the wrong JSON types with the
  // exception's message (plugin_host.cpp): nlohmann's exceptions are an expected outcome.
  try {
    (void)protocol::parse_levels(msg);
    protocol::TickRequest request;
    if (protocol::parse_tick_request(msg, request).ok()) {
      for (const auto& level : request.procs.members)
        for (std::uint32_t i : level)
          check(i < request.procs.pids.size(), "a level's member indexes the request's pids");
    }
    if (auto inj = msg.find("inject"); inj != msg.end() && inj->is_object())
      if (auto n = inj->find("node_info"); n != inj->end())
        (void)protocol::node_info_to_json(protocol::node_info_from_json(*n));
    if (auto kw = msg.find("kwargs"); kw != msg.end() && kw->is_object())
      for (const auto& [key, value] : kw->items())
        (void)protocol::yaml_to_json(protocol::json_to_yaml(value));
  } catch (const std::exception&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + data[0] % 64;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  protocol::LineBuffer buffer;
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    buffer.feed(stream.substr(at, piece));
    while (auto line = buffer.next()) {
      check(line->find('\n') == std::string::npos, "a line holds no newline");
      reply_line(*line);
      request_line(*line);
    }
  }
  check(buffer.partial().find('\n') == std::string_view::npos, "the partial line holds no newline");
  return 0;
}
