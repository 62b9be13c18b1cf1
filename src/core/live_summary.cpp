// The summary of a live run (core/live_summary.hpp): statistics per tick, the end-of-run summary.
#include "core/live_summary.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/json_text.hpp"
#include "core/units.hpp"

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
      cols[i].add(row[i], tick.ctx.dt_s);
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

nlohmann::json opt(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

// GPU part of the summary. The GPUs the level used are those where it held memory (at the system
// level: all of them); their per-device means are averaged. Fills the GPU inputs of the tags
// (bottleneck_tags).

void gpu_summary(nlohmann::json& j, TagInputs& in, const RunStats& stats, Level level,
                 const NodeInfo& node) {
  j["num_gpus"] = node.num_gpus;
  j["gpu_name"] = node.gpu_name;
  j["gpu_memory_gib"] = node.gpu_memory_gib;
  j["gpus_used"] = nlohmann::json();
  j["gpu_util_mean"] = nlohmann::json();
  j["gpu_band_mean"] = nlohmann::json();
  j["gpu_mem_peak_gib"] = nlohmann::json();
  j["gpu_power_mean_w"] = nlohmann::json();
  j["gpu_energy_j"] = nlohmann::json();
  if (node.num_gpus <= 0 || stats.find(level, "gpu_util_avg") == nullptr) return;
  int used = 0;
  double util = 0, band = 0, mem_peak = 0, power = 0, energy = 0;
  int util_n = 0, band_n = 0, power_n = 0;
  for (int i = 0; i < node.num_gpus; ++i) {
    const auto* m = stats.find(level, fmt::format("gpu_mem_{}", i));
    const bool held = m && m->count && m->max > 0;
    if (level != Level::system && !held) continue;
    ++used;
    if (m && m->count) mem_peak = std::max(mem_peak, m->max);
    if (const auto* u = stats.find(level, fmt::format("gpu_util_{}", i)); u && u->count) {
      util += *u->mean();
      ++util_n;
    }
    if (const auto* b = stats.find(level, fmt::format("gpu_band_{}", i)); b && b->count) {
      band += *b->mean();
      ++band_n;
    }
    if (const auto* p = stats.find(level, fmt::format("gpu_power_{}", i)); p && p->count) {
      power += *p->mean();
      energy += p->integral;
      ++power_n;
    }
  }
  j["gpus_used"] = used;
  if (used == 0) return;
  j["gpu_mem_peak_gib"] = mem_peak;
  if (util_n) j["gpu_util_mean"] = util / util_n;
  if (band_n) j["gpu_band_mean"] = band / band_n;
  if (power_n) {
    j["gpu_power_mean_w"] = power;
    j["gpu_energy_j"] = energy;
  }
  if (util_n) in.gpu_util_mean_pct = util / util_n;
  in.gpu_mem_peak_gib = mem_peak;
  in.gpu_memory_gib = node.gpu_memory_gib;
}

// Energy part of the summary (sonde.collectors.energy): the level's joules per domain (the last
// value of its cumulative energy_joules_<i> column), their total over the domains that are not
// inside another one (NodeInfo::energy.counted), kWh and the CO2 estimate.
void energy_summary(nlohmann::json& j, const RunStats& stats, Level level, const NodeInfo& node) {
  j["energy_j"] = nlohmann::json();
  j["energy_kwh"] = nlohmann::json();
  j["co2_g"] = nlohmann::json();
  j["energy_by_domain_j"] = nlohmann::json::object();
  j["energy_node_j"] = nlohmann::json();
  const auto& e = node.energy;
  j["carbon_intensity_g_per_kwh"] =
      e.domains.empty() ? nlohmann::json() : nlohmann::json(e.carbon_intensity_g_per_kwh);
  if (e.domains.empty()) return;
  auto total_at = [&](Level l, nlohmann::json* by_domain) -> std::optional<double> {
    double total = 0;
    bool any = false;
    for (std::size_t i = 0; i < e.domains.size(); ++i) {
      const auto* c = stats.find(l, fmt::format("energy_joules_{}", i));
      if (c == nullptr || c->count == 0) continue;
      if (by_domain) (*by_domain)[e.domains[i]] = c->max;
      if (std::find(e.counted.begin(), e.counted.end(), e.domains[i]) == e.counted.end()) continue;
      total += c->max;
      any = true;
    }
    return any ? std::optional<double>(total) : std::nullopt;
  };
  nlohmann::json by_domain = nlohmann::json::object();
  const auto total = total_at(level, &by_domain);
  j["energy_by_domain_j"] = by_domain;
  if (total) {
    j["energy_j"] = *total;
    j["energy_kwh"] = *total / 3.6e6;
    j["co2_g"] = *total / 3.6e6 * e.carbon_intensity_g_per_kwh;
  }
  if (level != Level::system)
    if (auto node_total = total_at(Level::system, nullptr)) j["energy_node_j"] = *node_total;
}

std::string joules_text(double j) {
  if (std::fabs(j) >= 1e6) return fmt::format("{:.2f} MJ", j / 1e6);
  if (std::fabs(j) >= 1e3) return fmt::format("{:.2f} kJ", j / 1e3);
  return fmt::format("{:.1f} J", j);
}

}  // namespace

nlohmann::json summary_json(const Engine& engine, const RunStats& stats,
                            const RunOutcome& outcome) {
  // The program's own figures come from the process level; without a target, from the node.
  const Level level = engine.active(Level::process) ? Level::process : Level::system;
  const NodeInfo& node = engine.node_info();
  // What 100 % means at that level (NodeInfo::level_num_cpus).
  const double per_level = node.level_num_cpus[level_index(level)];
  const double cpus = per_level > 0            ? per_level
                      : level == Level::system ? node.num_system_cpus
                                               : node.num_cpus;
  nlohmann::json j;
  j["command"] = outcome.command;
  if (!outcome.target_command.empty()) {
    j["target_command"] = outcome.target_command;
    j["target_pid"] = outcome.target_pid;
  }
  j["exit_status"] = outcome.exit_status ? nlohmann::json(*outcome.exit_status) : nlohmann::json();
  j["wall_s"] = outcome.wall_s;
  j["user_cpu_s"] = opt(outcome.user_cpu_s);
  j["system_cpu_s"] = opt(outcome.system_cpu_s);
  j["level"] = std::string(level_name(level));
  j["ticks"] = stats.ticks();
  j["run_dir"] = outcome.run_dir;
  j["num_cpus"] = cpus;

  const auto* cpu = stats.find(level, "cpu_util_avg");
  j["cpu_mean_cores"] =
      cpu && cpu->count ? nlohmann::json(*cpu->mean() / 100 * cpus) : nlohmann::json();
  j["cpu_peak_cores"] =
      cpu && cpu->count ? nlohmann::json(cpu->max / 100 * cpus) : nlohmann::json();
  // CPU time measured but in no row (carried past the last one, see Collector::carried_cpu_s):
  // in the total and the mean, over the rows' span, so that they agree with the rows and wait4.
  double carried = 0;
  for (const CollectorSlot& slot : engine.collectors())
    if (slot.collector && !slot.guarded && slot.state == CollectorState::ok)
      carried += slot.collector->carried_cpu_s(level);
  // Recovered by sonde's own reaps after the last tick (the command's last truncated ticks); for
  // a level from its cgroup, what the cgroup ran after the last row (the command's exit).
  const ProcScanner& scanner = engine.scanner();
  if (level != Level::system && scanner.level_cgroup_active(level)) {
    carried += scanner.cgroup_tail_s(level);
    // The group holds everything the command ran after it joined, orphans included; its wait4
    // also has the few instructions between fork and joining, which no cgroup saw.
    const auto& ran = scanner.level_cgroup_reading(level).cpu_s;
    if (level == Level::process && ran && outcome.user_cpu_s && outcome.system_cpu_s)
      carried += std::max(
          0.0, *outcome.user_cpu_s + *outcome.system_cpu_s - (*ran + scanner.cgroup_tail_s(level)));
  } else if (level != Level::system) {
    carried += scanner.reaped_late_s(level);
  }
  j["cpu_carried_s"] = carried;
  if (cpu && cpu->count && carried > 0 && cpu->span > 0)
    j["cpu_mean_cores"] = j["cpu_mean_cores"].get<double>() + carried / cpu->span;
  j["cpu_seconds"] = cpu ? nlohmann::json(cpu->integral / 100 * cpus + carried) : nlohmann::json();
  TagInputs in;
  if (cpu && cpu->count) in.cpu_mean_pct = *cpu->mean();
  if (j["cpu_mean_cores"].is_number()) in.cpu_mean_cores = j["cpu_mean_cores"].get<double>();
  // Beside the node's: a busy node leaves a program less than it could have used.
  if (level != Level::system)
    if (const auto* node_cpu = stats.find(Level::system, "cpu_util_avg");
        node_cpu && node_cpu->count) {
      in.node_cpu_mean_pct = *node_cpu->mean();
      j["node_cpu_mean_pct"] = *in.node_cpu_mean_pct;
      j["node_num_cpus"] = node.num_system_cpus;
    }

  const auto* mem = stats.find(level, "memory");
  const double limit_gib = static_cast<double>(node.memory_limit_bytes[level_index(level)]) / kGiB;
  j["memory_peak_gib"] = mem && mem->count ? nlohmann::json(mem->max) : nlohmann::json();
  j["memory_limit_gib"] = limit_gib;
  if (mem && mem->count) in.memory_peak_gib = mem->max;
  // The kernel's peaks, which sampling can miss (a short command, a spike between ticks): the
  // largest process's (wait4), and the command's cgroup's charge. The tag takes the larger of the
  // sampled peak and the largest process's, both lower bounds of the true peak.
  j["max_rss_gib"] =
      outcome.max_rss_bytes ? nlohmann::json(*outcome.max_rss_bytes / kGiB) : nlohmann::json();
  j["memory_peak_cgroup_gib"] = outcome.cgroup_memory_peak_bytes
                                    ? nlohmann::json(*outcome.cgroup_memory_peak_bytes / kGiB)
                                    : nlohmann::json();
  if (outcome.max_rss_bytes && level == Level::process)
    in.memory_peak_gib = std::max(in.memory_peak_gib.value_or(0), *outcome.max_rss_bytes / kGiB);
  in.memory_limit_gib = limit_gib;

  auto integral = [&](Level l, const char* col) {
    const auto* c = stats.find(l, col);
    return c ? nlohmann::json(c->integral) : nlohmann::json();
  };
  j["read_bytes"] = integral(level, "io_read");
  j["written_bytes"] = integral(level, "io_write");
  j["net_sent_bytes"] = integral(Level::system, "net_bytes_sent");
  j["net_recv_bytes"] = integral(Level::system, "net_bytes_recv");
  gpu_summary(j, in, stats, level, node);
  energy_summary(j, stats, level, node);
  j["tags"] = bottleneck_tags(in);
  if (outcome.processes.is_object()) {
    j["processes"] = outcome.processes;
    // Processes shorter than a tick (never listed), and what sonde recovered at its own reaps.
    if (j["cpu_seconds"].is_number() && outcome.processes.contains("cpu_s_sum"))
      j["processes"]["cpu_s_outside"] = std::max(
          0.0, j["cpu_seconds"].get<double>() - outcome.processes["cpu_s_sum"].get<double>());
  }
  if (outcome.phases.is_array()) j["phases"] = outcome.phases;
  return j;
}

namespace {
// The summary's process table: the first `top` rows of summary.processes.
std::string processes_text(const nlohmann::json& p, std::size_t top) {
  if (!p.is_object() || !p.contains("processes") || p["processes"].empty()) return "";
  const std::size_t count = p.value("count", std::size_t{0});
  std::string out = fmt::format("  processes    {} seen; by CPU time:\n", count);
  out += fmt::format("    {:>8} {:>8} {:>11} {:>10} {:>10} {:>13}  {}\n", "PID", "CPU s", "memory",
                     "read", "written", "seen", "command");
  auto bytes = [](const nlohmann::json& v) {
    return v.is_number() ? bytes_text(v.get<double>()) : std::string("-");
  };
  std::size_t shown = 0;
  double rest_cpu = 0;
  for (const auto& r : p["processes"]) {
    if (shown == top) {
      rest_cpu += r.value("cpu_s", 0.0);
      continue;
    }
    ++shown;
    std::string cmd = r.value("command", std::string());
    if (cmd.size() > 60) cmd = cmd.substr(0, 57) + "...";
    out += fmt::format(
        "    {:>8} {:>8.2f} {:>7.3f} GiB {:>10} {:>10} {:>13}  {}\n", r.value("pid", 0),
        r.value("cpu_s", 0.0), r.value("memory_peak_gib", 0.0), bytes(r["read_bytes"]),
        bytes(r["written_bytes"]),
        fmt::format("{:.1f}-{:.1f} s", r.value("first_s", 0.0), r.value("last_s", 0.0)), cmd);
  }
  std::size_t rest = count - std::min(count, shown);
  if (p.contains("others") && p["others"].is_object()) rest_cpu += p["others"].value("cpu_s", 0.0);
  if (rest > 0) out += fmt::format("    {} more: {:.2f} CPU s\n", rest, rest_cpu);
  if (p.contains("cpu_s_outside") && p["cpu_s_outside"].get<double>() >= 0.005)
    out += fmt::format("    not in any row above: {:.2f} CPU s (processes shorter than a tick)\n",
                       p["cpu_s_outside"].get<double>());
  return out;
}

// The summary's phases (the program's marks): one line each.
std::string phases_text(const nlohmann::json& phases) {
  if (!phases.is_array() || phases.empty()) return "";
  std::string out = fmt::format("  phases       {} (marks of the program):\n", phases.size());
  out += fmt::format("    {:>15} {:>8} {:>8} {:>6} {:>11} {:>10} {:>10} {:>6}  {}\n", "from-to",
                     "seconds", "CPU s", "cores", "memory", "read", "written", "GPU", "phase");
  auto num = [](const nlohmann::json& v, const char* f) {
    return v.is_number() ? fmt::format(fmt::runtime(f), v.get<double>()) : std::string("-");
  };
  auto bytes = [](const nlohmann::json& v) {
    return v.is_number() ? bytes_text(v.get<double>()) : std::string("-");
  };
  for (const auto& p : phases) {
    std::string name = p.value("name", std::string());
    if (name.size() > 40) name = name.substr(0, 37) + "...";
    out += fmt::format(
        "    {:>15} {:>8.2f} {:>8} {:>6} {:>11} {:>10} {:>10} {:>6}  {}\n",
        fmt::format("{:.1f}-{:.1f} s", p.value("start_s", 0.0), p.value("end_s", 0.0)),
        p.value("duration_s", 0.0), num(p["cpu_s"], "{:.2f}"), num(p["cpu_mean_cores"], "{:.2f}"),
        num(p["memory_peak_gib"], "{:.3f} GiB"), bytes(p["io_read_bytes"]),
        bytes(p["io_write_bytes"]), num(p["gpu_util_mean"], "{:.0f} %"), name);
  }
  return out;
}
}  // namespace

std::string summary_text(const nlohmann::json& s) {
  auto num = [&](const char* key) -> std::optional<double> {
    if (!s.contains(key) || s[key].is_null()) return std::nullopt;
    return s[key].get<double>();
  };
  // The command on one line, shell-quoted where needed; record --pid: the watched process's.
  auto quoted = [](const nlohmann::json& args) {
    std::string cmd;
    for (const auto& a : args) {
      std::string arg = a.is_string() ? a.get<std::string>() : json_text(a);
      if (arg.find_first_of(" \t\n'\"$") != std::string::npos) {
        std::string q = "'";
        for (char c : arg)
          q += c == '\n'   ? std::string("\\n")
               : c == '\'' ? std::string("'\\''")
                           : std::string(1, c);
        arg = q + "'";
      }
      cmd += (cmd.empty() ? "" : " ") + arg;
    }
    return cmd;
  };
  const std::string cmd = s.contains("command") ? quoted(s["command"]) : std::string();
  std::string out = fmt::format("sonde summary ({} level, {} ticks)\n",
                                s["level"].get<std::string>(), s["ticks"].get<std::uint64_t>());
  if (!cmd.empty()) out += fmt::format("  command      {}\n", cmd);
  if (cmd.empty() && s.contains("target_command") && s["target_command"].is_array())
    out += fmt::format("  process      pid {}: {}\n",
                       json_text(s.value("target_pid", nlohmann::json())),
                       quoted(s["target_command"]));
  out += fmt::format("  exit status  {}\n",
                     s["exit_status"].is_null() ? std::string("-") : json_text(s["exit_status"]));
  out += fmt::format("  wall time    {:.2f} s\n", s["wall_s"].get<double>());
  if (auto u = num("user_cpu_s"))
    out += fmt::format("  CPU time     user {:.2f} s, system {:.2f} s (wait4)\n", *u,
                       num("system_cpu_s").value_or(0));
  if (auto m = num("cpu_mean_cores"))
    out += fmt::format(
        "  CPU          mean {:.2f} cores, peak {:.2f} of {:g} available{}\n", *m,
        num("cpu_peak_cores").value_or(0), num("num_cpus").value_or(0),
        num("cpu_carried_s").value_or(0) >= 0.005
            ? fmt::format(" ({:.2f} s recovered after the last row)", *num("cpu_carried_s"))
            : std::string());
  if (auto m = num("memory_peak_gib")) {
    out += fmt::format("  memory       peak {:.3f} GiB of {:.1f} GiB limit (sampled)", *m,
                       num("memory_limit_gib").value_or(0));
    out += "\n";
    std::string kernel;
    if (auto r = num("max_rss_gib"))
      kernel += fmt::format("largest process {:.3f} GiB (wait4 max RSS)", *r);
    if (auto c = num("memory_peak_cgroup_gib"))
      kernel +=
          fmt::format("{}cgroup {:.3f} GiB (with page cache)", kernel.empty() ? "" : ", ", *c);
    if (!kernel.empty()) out += "               kernel peaks: " + kernel + "\n";
  }
  if (auto r = num("read_bytes"))
    out += fmt::format("  I/O          read {}, written {}\n", bytes_text(*r),
                       bytes_text(num("written_bytes").value_or(0)));
  if (auto u = num("gpus_used"); u && *u > 0)
    out += fmt::format(
        "  GPU          {:g} of {:g} used, util mean {}, peak memory {:.2f} GiB of "
        "{:.1f} GiB, power mean {}\n",
        *u, num("num_gpus").value_or(0),
        num("gpu_util_mean") ? fmt::format("{:.0f} %", *num("gpu_util_mean")) : std::string("??"),
        num("gpu_mem_peak_gib").value_or(0), num("gpu_memory_gib").value_or(0),
        num("gpu_power_mean_w") ? fmt::format("{:.0f} W", *num("gpu_power_mean_w"))
                                : std::string("??"));
  if (auto e = num("energy_j")) {
    std::string parts;
    if (s.contains("energy_by_domain_j"))
      for (const auto& [domain, v] : s["energy_by_domain_j"].items())
        parts += (parts.empty() ? "" : ", ") + domain + " " + joules_text(v.get<double>());
    out += fmt::format("  energy       {} ({:.3g} kWh): {}\n", joules_text(*e),
                       num("energy_kwh").value_or(0), parts);
    out += fmt::format("  CO2          {:.3g} g at {:g} g CO2/kWh (carbon_intensity){}\n",
                       num("co2_g").value_or(0), num("carbon_intensity_g_per_kwh").value_or(0),
                       num("energy_node_j") ? fmt::format("; the whole node used {}",
                                                          joules_text(*num("energy_node_j")))
                                            : std::string());
  }
  if (auto n = num("net_sent_bytes"))
    out += fmt::format("  network      sent {}, received {} (whole node)\n", bytes_text(*n),
                       bytes_text(num("net_recv_bytes").value_or(0)));
  if (s.contains("processes")) out += processes_text(s["processes"], 5);
  if (s.contains("phases")) out += phases_text(s["phases"]);
  std::string tags;
  for (const auto& t : s["tags"]) tags += (tags.empty() ? "" : ", ") + t.get<std::string>();
  out += fmt::format("  tags         {}\n", tags.empty() ? std::string("none") : tags);
  // What node-saturated means, with the figures that made it.
  for (const auto& t : s["tags"])
    if (t == "node-saturated" && num("node_cpu_mean_pct") && num("cpu_mean_cores"))
      out += fmt::format(
          "               the node was busy (its CPUs {:.0f} % used on average): your program got "
          "{:.2f} of {:g} cores\n",
          *num("node_cpu_mean_pct"), *num("cpu_mean_cores"), num("num_cpus").value_or(0));
  if (!s["run_dir"].get<std::string>().empty())
    out += fmt::format("  run dir      {}\n", s["run_dir"].get<std::string>());
  return out;
}

}  // namespace sonde
