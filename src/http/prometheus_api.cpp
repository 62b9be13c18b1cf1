#include "http/prometheus_api.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sonde::promq {
namespace {

/// The start of `s`, at most `n` bytes, for messages: what the server sent reaches a terminal
/// only with its control bytes (escape sequences, forged newlines) written as \xNN.
std::string clip(const std::string& s, std::size_t n = 200) {
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

/// A string member of `j`, or `fallback` when it is missing or not a string (a server's answer
/// decides the types: `"errorType": 5` must not throw).
std::string string_member(const nlohmann::json& j, const char* key, const char* fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
}

Result<nlohmann::json> parse_envelope(const std::string& body, const std::string& context) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception&) {
    return make_error(Errc::parse, fmt::format("{}: expected Prometheus' JSON answer, got `{}`",
                                               context, clip(body, 120)));
  }
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

std::string quote(const std::string& value) {
  std::string out = "\"";
  for (char c : value) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out + "\"";
}

std::string exact_regex(const std::vector<std::string>& values) {
  std::string out;
  for (const auto& v : values) {
    if (!out.empty()) out += '|';
    for (char c : v) {
      if (std::string_view("\\.+*?()|[]{}^$").find(c) != std::string_view::npos) out += '\\';
      out += c;
    }
  }
  return out;
}

std::string duration(double seconds) {
  const auto ms = static_cast<long long>(std::ceil(std::max(seconds, 0.0) * 1000 - 1e-6));
  return fmt::format("{}ms", std::max(ms, 1LL));
}

double choose_step(double range_s, double min_step_s, int max_points) {
  double step = std::max(range_s / std::max(max_points - 1, 1), min_step_s);
  if (!(step > 0)) step = 1;
  step = step >= 1 ? std::ceil(step - 1e-9) : std::ceil(step * 1000 - 1e-6) / 1000;
  return std::max(step, 0.001);
}

std::string api_time(double t) {
  return fmt::format("{:.3f}", t);
}

Result<std::string> Api::call(const std::string& path,
                              const std::vector<std::pair<std::string, std::string>>& fields,
                              const std::string& shown) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = client_->post_form(path, fields);
  stats_.wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.requests;
  if (!r) return r.error();
  stats_.bytes += r->body.size();
  const std::string context = fmt::format("{} ({})", client_->url(path), clip(shown));
  if (r->status == 401 || r->status == 403)
    return make_error(Errc::failed,
                      fmt::format("{}: HTTP {}: {} (give --prometheus-user with a password, or a "
                                  "bearer token: docs/prometheus.md, \"Authentication\")",
                                  context, r->status,
                                  r->status == 401 ? "authentication required" : "forbidden"));
  // Prometheus answers errors (400 bad_data, 422 execution, 503 timeout) with a JSON body.
  if (r->status != 200 && r->content_type.find("json") == std::string::npos)
    return make_error(Errc::failed, fmt::format("{}: HTTP {} (not Prometheus' API? `{}`)", context,
                                                r->status, clip(r->body, 120)));
  return std::move(r->body);
}

Result<std::vector<Series>> Api::query_at(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& fields,
    const std::string& promql) {
  auto body = call(path, fields, promql);
  if (!body) return body.error();
  const auto t0 = std::chrono::steady_clock::now();
  auto r = parse_query_response(*body, fmt::format("{} ({})", client_->url(path), clip(promql)));
  stats_.parse_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r)
    for (const auto& s : *r) stats_.samples += s.samples.size();
  return r;
}

Result<std::vector<Series>> Api::query(const std::string& promql, double time) {
  return query_at("/api/v1/query", {{"query", promql}, {"time", api_time(time)}}, promql);
}

Result<std::vector<Series>> Api::query_range(const std::string& promql, double start, double end,
                                             double step) {
  return query_at("/api/v1/query_range",
                  {{"query", promql},
                   {"start", api_time(start)},
                   {"end", api_time(end)},
                   {"step", fmt::format("{:.3f}", step)}},
                  promql);
}

Result<std::vector<std::map<std::string, std::string>>> Api::series(const std::string& match,
                                                                    double start, double end) {
  auto body = call("/api/v1/series",
                   {{"match[]", match}, {"start", api_time(start)}, {"end", api_time(end)}}, match);
  if (!body) return body.error();
  return parse_series_response(*body,
                               fmt::format("{} ({})", client_->url("/api/v1/series"), clip(match)));
}

}  // namespace sonde::promq
