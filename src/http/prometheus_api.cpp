#include "http/prometheus_api.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace sonde::promq {

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
