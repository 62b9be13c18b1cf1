#pragma once
// Prometheus' HTTP API as the report commands use it: /api/v1/query, /api/v1/query_range and
// /api/v1/series through http::Client (the answers parsed by http/prometheus_response.hpp), and
// the small helpers that build PromQL (label values quoted, instance regexes, durations).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "http/client.hpp"
#include "http/prometheus_response.hpp"

namespace sonde::promq {

/// `"value"` quoted for PromQL (backslash, quote and newline escaped).
std::string quote(const std::string& value);
/// An RE2 regex matching exactly the given strings: `^(?:a|b)$` with metacharacters escaped
/// (Prometheus anchors label regexes itself; the alternation is what is returned).
std::string exact_regex(const std::vector<std::string>& values);
/// A PromQL duration in milliseconds, e.g. `1500ms`, at least 1ms.
std::string duration(double seconds);

/// The query step for a range of `range_s` seconds: at most `max_points` points per series
/// (Prometheus refuses more than 11,000), never finer than `min_step_s`, rounded up to whole
/// milliseconds (whole seconds above 1 s).
double choose_step(double range_s, double min_step_s, int max_points = 11000);

/// What the requests cost, for `--verbose` and the bench.
struct ApiStats {
  std::uint64_t requests = 0;
  std::uint64_t bytes = 0;  ///< response bodies (after any content decoding)
  std::uint64_t samples = 0;
  double wall_s = 0;   ///< in requests (sending, Prometheus' work, receiving)
  double parse_s = 0;  ///< parsing the answers
};

class Api {
 public:
  explicit Api(std::unique_ptr<http::Client> client) : client_(std::move(client)) {}
  /// An instant query at `time` (epoch seconds).
  Result<std::vector<Series>> query(const std::string& promql, double time);
  /// A range query from `start` to `end` every `step` seconds.
  Result<std::vector<Series>> query_range(const std::string& promql, double start, double end,
                                          double step);
  /// The label sets of the series matching `match` between `start` and `end`.
  Result<std::vector<std::map<std::string, std::string>>> series(const std::string& match,
                                                                 double start, double end);
  const ApiStats& stats() const { return stats_; }
  std::string url() const { return client_->url(""); }

 private:
  Result<std::string> call(const std::string& path,
                           const std::vector<std::pair<std::string, std::string>>& fields,
                           const std::string& shown);
  /// call(), then the answer parsed as a query's (instant or range), counted in stats_.
  Result<std::vector<Series>> query_at(
      const std::string& path, const std::vector<std::pair<std::string, std::string>>& fields,
      const std::string& promql);
  std::unique_ptr<http::Client> client_;
  ApiStats stats_;
};

/// Formats epoch seconds for the API (`1700000000.123`).
std::string api_time(double t);

}  // namespace sonde::promq
