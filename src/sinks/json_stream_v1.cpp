#include "sinks/json_stream_v1.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/json_text.hpp"

namespace sonde {

namespace {

double number_or_zero(const nlohmann::json& v) {
  if (!v.is_number()) return 0.0;
  const double d = v.get<double>();
  return std::isfinite(d) ? d : 0.0;
}

// The values of <prefix><N> keys (N = 0, 1, …) in index order.
std::vector<double> indexed(const nlohmann::json& sample, std::string_view prefix) {
  std::vector<std::pair<long, double>> found;
  for (auto it = sample.begin(); it != sample.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() <= prefix.size() || key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = key.substr(prefix.size());
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    found.emplace_back(std::stol(digits), number_or_zero(it.value()));
  }
  std::sort(found.begin(), found.end());
  std::vector<double> out;
  out.reserve(found.size());
  for (const auto& [i, v] : found) out.push_back(v);
  return out;
}

void append_array(std::string& out, const std::vector<double>& values) {
  out += '[';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    fmt::format_to(std::back_inserter(out), "{:.4f}", values[i]);
  }
  out += ']';
}

}  // namespace

std::string JsonStreamV1::convert(std::string_view line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(fmt::format("stream protocol v1: not a JSON line ({}): {}",
                                            e.what(), std::string(line.substr(0, 80))));
  }
  if (!j.is_object())
    throw std::invalid_argument("stream protocol v1: expected a JSON object per line");
  if (j.contains("status")) {
    if (j["status"] != "ready") return std::string(line) + (line.ends_with('\n') ? "" : "\n");
    interval_s_ = number_or_zero(j.value("interval", nlohmann::json()));
    nlohmann::ordered_json r;
    r["status"] = "ready";
    for (const char* k : {"pid", "num_cpus", "num_system_cpus", "num_gpus", "gpu_memory",
                          "gpu_name", "memory_limits", "cpu_handles", "levels"})
      if (j.contains(k)) r[k] = j[k];
    return json_text(r) + "\n";
  }
  if (!j.contains("sample") || !j["sample"].is_object() || !j.contains("level"))
    throw std::invalid_argument(
        "stream protocol v1: expected a ready, error or sample line (level, sample)");
  const auto& s = j["sample"];
  const std::string level = j["level"].get<std::string>();
  const double time = number_or_zero(s.value("time", nlohmann::json()));
  Io& io = io_[level];
  // The first sample of a level covers one interval (sonde's stream starts after a baseline).
  const double dt = io.have_time ? std::max(0.0, time - io.last_time) : interval_s_;
  io.last_time = time;
  io.have_time = true;
  const char* io_cols[4] = {"io_read_count", "io_write_count", "io_read", "io_write"};
  for (int i = 0; i < 4; ++i)
    io.totals[i] += number_or_zero(s.value(io_cols[i], nlohmann::json())) * dt;

  std::string out;
  fmt::format_to(
      std::back_inserter(out),
      "{{\"time\":{:.6f},\"wallclock\":{:.6f},\"level\":\"{}\",\"sample\":{{\"cpu_util\":", time,
      number_or_zero(j.value("wallclock", nlohmann::json())), level);
  append_array(out, indexed(s, "cpu_util_"));
  fmt::format_to(std::back_inserter(out), ",\"memory\":{:.6f},\"gpu_util\":",
                 number_or_zero(s.value("memory", nlohmann::json())));
  append_array(out, indexed(s, "gpu_util_"));
  out += ",\"gpu_band\":";
  append_array(out, indexed(s, "gpu_band_"));
  out += ",\"gpu_mem\":";
  append_array(out, indexed(s, "gpu_mem_"));
  fmt::format_to(std::back_inserter(out), ",\"io_counters\":[{},{},{},{}]}}}}\n",
                 std::llround(io.totals[0]), std::llround(io.totals[1]), std::llround(io.totals[2]),
                 std::llround(io.totals[3]));
  return out;
}

}  // namespace sonde
