#pragma once
// The answers of Prometheus' HTTP API (/api/v1/query, query_range, series) parsed into series of
// (time, value): text a remote server controls, so the parse never throws, is bounded in depth
// and reports what it expected (fuzz target tests/fuzz/prometheus_response_fuzz.cpp).
#include <map>
#include <string>
#include <vector>

#include "core/result.hpp"

// The query side of Prometheus: sonde::promq, apart from the exporter's sonde::prom
// (sinks/prometheus.hpp): both have a struct Sample, and one name for the two broke the one-
// definition rule (vector<Sample> code of one used on the other; found by ASan).
namespace sonde::promq {

struct Sample {
  double t = 0;  ///< epoch seconds
  double v = 0;  ///< NaN and ±Inf as Prometheus gives them
};

/// One series of a vector (one sample) or matrix (samples in time order) result.
struct Series {
  std::map<std::string, std::string> labels;
  std::vector<Sample> samples;
  std::string label(const std::string& name) const {
    auto it = labels.find(name);
    return it == labels.end() ? std::string() : it->second;
  }
};

/// The start of `s`, at most `n` bytes, for messages: what a server sent reaches a terminal only
/// with its control bytes (escape sequences, forged newlines) written as \xNN.
std::string clip(const std::string& s, std::size_t n = 200);

/// Parses the body of a query or query_range response (resultType vector, matrix or scalar;
/// a scalar is one series without labels). `context` (URL and query) prefixes every error;
/// Prometheus' own error (`"status":"error"`) is returned with its errorType and text.
Result<std::vector<Series>> parse_query_response(const std::string& body,
                                                 const std::string& context);
/// Parses a /api/v1/series response: the label sets.
Result<std::vector<std::map<std::string, std::string>>> parse_series_response(
    const std::string& body, const std::string& context);

}  // namespace sonde::promq
