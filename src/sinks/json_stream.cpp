#include "sinks/json_stream.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/json_stream_v1.hpp"

namespace sonde {

JsonStreamSink::JsonStreamSink(int fd, int protocol)
    : fd_(fd), v1_(protocol == 1 ? std::make_unique<JsonStreamV1>() : nullptr) {}
JsonStreamSink::~JsonStreamSink() = default;

bool JsonStreamSink::emit(std::string_view s) {
  // JUmPER's older protocol: each line of the current protocol becomes its v1 line.
  std::string v1;
  if (v1_) {
    for (std::size_t start = 0; start < s.size();) {
      std::size_t end = s.find('\n', start);
      if (end == std::string_view::npos) end = s.size();
      if (end > start) v1 += v1_->convert(s.substr(start, end - start));
      start = end + 1;
    }
    s = v1;
  }
  while (!s.empty()) {
    const ssize_t n = ::write(fd_, s.data(), s.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool JsonStreamSink::ready(const Engine& engine) {
  const NodeInfo& n = engine.node_info();
  nlohmann::ordered_json j;  // "status" first, as JUmPER's collector writes it
  j["status"] = "ready";
  j["pid"] = engine.target().pid;
  // JUmPER expects whole CPUs here; a fractional quota is in node_info.cpu_quota.
  if (std::floor(n.num_cpus) == n.num_cpus)
    j["num_cpus"] = static_cast<long>(n.num_cpus);
  else
    j["num_cpus"] = n.num_cpus;
  j["num_system_cpus"] = n.num_system_cpus;
  j["num_gpus"] = n.num_gpus;
  j["gpu_memory"] = n.gpu_memory_gib;
  j["gpu_name"] = n.gpu_name;
  nlohmann::ordered_json limits = nlohmann::ordered_json::object();
  for (Level l : engine.levels())
    limits[std::string(level_name(l))] =
        static_cast<double>(n.memory_limit_bytes[level_index(l)]) / (1024.0 * 1024.0 * 1024.0);
  j["memory_limits"] = limits;
  j["cpu_handles"] = n.cpu_handles;
  j["levels"] = levels_json(engine);
  // Every sample carries `time`: JUmPER builds its empty views from this schema and warns when
  // `time` is missing from it.
  nlohmann::json columns = columns_by_level_json(engine);
  for (auto& [level, names] : columns.items()) names.insert(names.begin(), "time");
  j["columns_by_level"] = std::move(columns);
  j["interval"] = engine.interval_s();
  j["node_info"] = node_info_json(engine);
  return emit(json_text(j) + "\n");
}

void JsonStreamSink::error(int fd, const std::string& message) {
  JsonStreamSink s(fd);
  // JUmPER reads `error`; `message` is kept for earlier sonde clients.
  (void)s.emit(
      json_text(nlohmann::json{{"status", "error"}, {"error", message}, {"message", message}}) +
      "\n");
}

bool JsonStreamSink::write(const Engine& engine, const Engine::Tick& tick) {
  line_.clear();
  for (Level l : engine.levels()) {
    const auto& cols = engine.columns(l);
    const auto& row = tick.rows[level_index(l)];
    fmt::format_to(std::back_inserter(line_),
                   "{{\"level\":\"{}\",\"wallclock\":{:.6f},\"sample\":{{\"time\":", level_name(l),
                   tick.ctx.wallclock_s);
    append_time(line_, tick.ctx.time_s, "null");
    for (std::size_t i = 0; i < cols.size(); ++i) {
      line_ += ",\"";
      line_ += cols[i];  // column names are validated identifiers: no escaping needed
      line_ += "\":";
      append_number(line_, row[i], "null");
    }
    line_ += "}}\n";
    if (per_line_) {
      if (!emit(line_)) return false;
      line_.clear();
    }
  }
  return line_.empty() || emit(line_);
}

}  // namespace sonde
