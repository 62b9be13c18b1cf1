#include "core/summary.hpp"

#include <cmath>

#include <fmt/format.h>

namespace sonde {

RunStats::RunStats(const Engine& engine) : engine_(engine) {
  for (Level l : engine.levels()) columns_[level_index(l)].resize(engine.columns(l).size());
}

void RunStats::add(const Engine::Tick& tick) {
  ++ticks_;
  for (Level l : engine_.levels()) {
    const auto& row = tick.rows[level_index(l)];
    auto& cols = columns_[level_index(l)];
    for (std::size_t i = 0; i < row.size(); ++i) {
      const double v = row[i];
      if (!std::isfinite(v)) continue;
      Column& c = cols[i];
      if (c.count == 0) c.min = c.max = v;
      c.min = std::min(c.min, v);
      c.max = std::max(c.max, v);
      c.sum += v;
      ++c.count;
      c.integral += v * tick.ctx.dt_s;
    }
  }
}

const RunStats::Column* RunStats::find(Level level, const std::string& column) const {
  if (!engine_.active(level)) return nullptr;
  const auto& names = engine_.columns(level);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == column) return &columns_[level_index(level)][i];
  return nullptr;
}

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

nlohmann::json opt(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

std::string bytes_text(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", b) : fmt::format("{:.1f} {}", b, units[u]);
}
}  // namespace

nlohmann::json summary_json(const Engine& engine, const RunStats& stats,
                            const RunOutcome& outcome) {
  // The program's own figures come from the process level; without a target, from the node.
  const Level level = engine.active(Level::process) ? Level::process : Level::system;
  const NodeInfo& node = engine.node_info();
  const double cpus = level == Level::system ? node.num_system_cpus : node.num_cpus;
  nlohmann::json j;
  j["command"] = outcome.command;
  j["exit_status"] = outcome.exit_status ? nlohmann::json(*outcome.exit_status) : nlohmann::json();
  j["wall_s"] = outcome.wall_s;
  j["user_cpu_s"] = opt(outcome.user_cpu_s);
  j["system_cpu_s"] = opt(outcome.system_cpu_s);
  j["level"] = std::string(level_name(level));
  j["ticks"] = stats.ticks();
  j["run_dir"] = outcome.run_dir;
  j["num_cpus"] = cpus;

  std::vector<std::string> tags;
  const auto* cpu = stats.find(level, "cpu_util_avg");
  j["cpu_mean_cores"] =
      cpu && cpu->count ? nlohmann::json(*cpu->mean() / 100 * cpus) : nlohmann::json();
  j["cpu_peak_cores"] =
      cpu && cpu->count ? nlohmann::json(cpu->max / 100 * cpus) : nlohmann::json();
  j["cpu_seconds"] = cpu ? nlohmann::json(cpu->integral / 100 * cpus) : nlohmann::json();
  if (cpu && cpu->count && *cpu->mean() >= 70) tags.push_back("cpu-bound");

  const auto* mem = stats.find(level, "memory");
  const double limit_gib = static_cast<double>(node.memory_limit_bytes[level_index(level)]) / kGiB;
  j["memory_peak_gib"] = mem && mem->count ? nlohmann::json(mem->max) : nlohmann::json();
  j["memory_limit_gib"] = limit_gib;
  if (mem && mem->count && limit_gib > 0 && mem->max >= 0.8 * limit_gib)
    tags.push_back("memory-bound");

  auto integral = [&](Level l, const char* col) {
    const auto* c = stats.find(l, col);
    return c ? nlohmann::json(c->integral) : nlohmann::json();
  };
  j["read_bytes"] = integral(level, "io_read");
  j["written_bytes"] = integral(level, "io_write");
  j["net_sent_bytes"] = integral(Level::system, "net_bytes_sent");
  j["net_recv_bytes"] = integral(Level::system, "net_bytes_recv");
  j["tags"] = tags;
  return j;
}

std::string summary_text(const nlohmann::json& s) {
  auto num = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key) || s[key].is_null()) return std::nullopt;
    return s[key].get<double>();
  };
  // The command on one line, shell-quoted where needed.
  std::string cmd;
  for (const auto& a : s["command"]) {
    std::string arg = a.get<std::string>();
    if (arg.find_first_of(" \t\n'\"$") != std::string::npos) {
      std::string q = "'";
      for (char c : arg)
        q += c == '\n' ? std::string("\\n") : c == '\'' ? std::string("'\\''") : std::string(1, c);
      arg = q + "'";
    }
    cmd += (cmd.empty() ? "" : " ") + arg;
  }
  std::string out = fmt::format("sonde summary ({} level, {} ticks)\n",
                                s["level"].get<std::string>(), s["ticks"].get<std::uint64_t>());
  if (!cmd.empty()) out += fmt::format("  command      {}\n", cmd);
  out += fmt::format("  exit status  {}\n",
                     s["exit_status"].is_null() ? std::string("-") : s["exit_status"].dump());
  out += fmt::format("  wall time    {:.2f} s\n", s["wall_s"].get<double>());
  if (auto u = num("user_cpu_s"))
    out += fmt::format("  CPU time     user {:.2f} s, system {:.2f} s (wait4)\n", *u,
                       num("system_cpu_s").value_or(0));
  if (auto m = num("cpu_mean_cores"))
    out += fmt::format("  CPU          mean {:.2f} cores, peak {:.2f} of {:g} available\n", *m,
                       num("cpu_peak_cores").value_or(0), num("num_cpus").value_or(0));
  if (auto m = num("memory_peak_gib"))
    out += fmt::format("  memory       peak {:.3f} GiB of {:.1f} GiB limit\n", *m,
                       num("memory_limit_gib").value_or(0));
  if (auto r = num("read_bytes"))
    out += fmt::format("  I/O          read {}, written {}\n", bytes_text(*r),
                       bytes_text(num("written_bytes").value_or(0)));
  if (auto n = num("net_sent_bytes"))
    out += fmt::format("  network      sent {}, received {} (whole node)\n", bytes_text(*n),
                       bytes_text(num("net_recv_bytes").value_or(0)));
  std::string tags;
  for (const auto& t : s["tags"]) tags += (tags.empty() ? "" : ", ") + t.get<std::string>();
  out += fmt::format("  tags         {}\n", tags.empty() ? std::string("none") : tags);
  if (!s["run_dir"].get<std::string>().empty())
    out += fmt::format("  run dir      {}\n", s["run_dir"].get<std::string>());
  return out;
}

}  // namespace sonde
