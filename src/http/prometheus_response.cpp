#include "http/prometheus_response.hpp"

#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_text.hpp"

namespace sonde::promq {
namespace {

/// A string member of `j`, or `fallback` when it is missing or not a string (a server's answer
/// decides the types: `"errorType": 5` must not throw).
std::string string_member(const nlohmann::json& j, const char* key, const char* fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

Result<nlohmann::json> parse_envelope(const std::string& body, const std::string& context) {
  // Bounded: an answer nested a million deep is refused before it is parsed (holding it would
  // cost gigabytes, and freeing it recursion as deep).
  nlohmann::json j = parse_json_bounded(body);
  if (j.is_discarded())
    return make_error(Errc::parse, fmt::format("{}: expected Prometheus' JSON answer, got `{}`",
                                               context, clip(body, 120)));
  if (!j.is_object() || !j.contains("status") || !j["status"].is_string())
    return make_error(
        Errc::parse,
        fmt::format("{}: expected a JSON object with `status` (not Prometheus' API)", context));
  if (j["status"] != "success") {
    const std::string type = string_member(j, "errorType", "error");
    const std::string text = string_member(j, "error", "(no error text)");
    return make_error(Errc::failed, fmt::format("{}: Prometheus says {}: {}", context,
                                                clip(type, 40), clip(text, 300)));
  }
  if (!j.contains("data"))
    return make_error(Errc::parse, fmt::format("{}: no `data` in Prometheus' answer", context));
  return j;
}

bool parse_value(const nlohmann::json& pair, Sample& s) {
  if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number() || !pair[1].is_string())
    return false;
  s.t = pair[0].get<double>();
  const std::string& v = pair[1].get_ref<const std::string&>();
  char* end = nullptr;
  s.v = std::strtod(v.c_str(), &end);
  return end && *end == '\0' && !v.empty();
}

bool parse_labels(const nlohmann::json& m, std::map<std::string, std::string>& out) {
  if (!m.is_object()) return false;
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (!it.value().is_string()) return false;
    out.emplace(it.key(), it.value().get<std::string>());
  }
  return true;
}
}  // namespace

std::string clip(const std::string& s, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  if (s.size() > n) out += "…";
  return out;
}

Result<std::vector<Series>> parse_query_response(const std::string& body,
                                                 const std::string& context) {
  auto env = parse_envelope(body, context);
  if (!env) return env.error();
  const nlohmann::json& data = (*env)["data"];
  if (!data.is_object() || !data.contains("resultType") || !data.contains("result"))
    return make_error(Errc::parse, fmt::format("{}: expected `data` with `resultType` and "
                                               "`result`",
                                               context));
  const std::string type =
      data["resultType"].is_string() ? data["resultType"].get<std::string>() : std::string();
  const nlohmann::json& result = data["result"];
  std::vector<Series> out;
  auto bad = [&](const std::string& what) {
    return make_error(Errc::parse, fmt::format("{}: malformed {} result: {}", context, type, what));
  };
  if (type == "scalar") {
    Series s;
    Sample v;
    if (!parse_value(result, v)) return bad("expected [time, \"value\"]");
    s.samples.push_back(v);
    out.push_back(std::move(s));
    return out;
  }
  if (type != "vector" && type != "matrix")
    return make_error(Errc::parse, fmt::format("{}: unexpected resultType `{}` (expected vector, "
                                               "matrix or scalar)",
                                               context, clip(type, 40)));
  if (!result.is_array()) return bad("`result` is not a list");
  out.reserve(result.size());
  for (const auto& r : result) {
    Series s;
    if (!r.is_object() || !r.contains("metric") || !parse_labels(r["metric"], s.labels))
      return bad("expected `metric` with string labels");
    if (type == "vector") {
      Sample v;
      if (!r.contains("value") || !parse_value(r["value"], v))
        return bad("expected `value`: [time, \"value\"]");
      s.samples.push_back(v);
    } else {
      if (!r.contains("values") || !r["values"].is_array())
        return bad("expected `values`: [[time, \"value\"], ...]");
      s.samples.reserve(r["values"].size());
      for (const auto& p : r["values"]) {
        Sample v;
        if (!parse_value(p, v)) return bad("expected `values`: [[time, \"value\"], ...]");
        s.samples.push_back(v);
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

Result<std::vector<std::map<std::string, std::string>>> parse_series_response(
    const std::string& body, const std::string& context) {
  auto env = parse_envelope(body, context);
  if (!env) return env.error();
  const nlohmann::json& data = (*env)["data"];
  if (!data.is_array())
    return make_error(Errc::parse, fmt::format("{}: expected `data` to be a list", context));
  std::vector<std::map<std::string, std::string>> out;
  for (const auto& m : data) {
    std::map<std::string, std::string> labels;
    if (!parse_labels(m, labels))
      return make_error(Errc::parse,
                        fmt::format("{}: expected label sets of strings in `data`", context));
    out.push_back(std::move(labels));
  }
  return out;
}

}  // namespace sonde::promq
