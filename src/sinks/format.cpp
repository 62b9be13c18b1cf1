#include "sinks/format.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cmath>

#include <fmt/format.h>

namespace sonde {

void append_number(std::string& out, double v, std::string_view nan_text) {
  if (!std::isfinite(v)) {
    out += nan_text;
    return;
  }
  fmt::format_to(std::back_inserter(out), "{:.10g}", v);
}

void append_time(std::string& out, double time_s, std::string_view nan_text) {
  if (!std::isfinite(time_s)) {
    out += nan_text;
    return;
  }
  fmt::format_to(std::back_inserter(out), "{:.6f}", time_s);
}

nlohmann::json columns_by_level_json(const Engine& engine) {
  nlohmann::json j = nlohmann::json::object();
  for (Level l : engine.levels()) j[std::string(level_name(l))] = engine.columns(l);
  return j;
}

nlohmann::json levels_json(const Engine& engine) {
  nlohmann::json j = nlohmann::json::array();
  for (Level l : engine.levels()) j.push_back(std::string(level_name(l)));
  return j;
}

nlohmann::json level_sources_json(const Engine& engine, const std::string& no_cgroup_why) {
  const ProcScanner& scanner = engine.scanner();
  nlohmann::json out = nlohmann::json::object();
  for (Level l : engine.levels()) {
    nlohmann::json s;
    const cgroup::Group& group = scanner.level_cgroup(l);
    if (l == Level::system) {
      s["cpu"] = "/proc/stat";
      s["memory"] = "/proc/meminfo";
      s["io"] = "/proc/diskstats (whole physical disks)";
    } else if (group) {
      const std::string& minus = scanner.level_cgroup_minus(l);
      const bool per_cpu = scanner.level_cgroup_per_cpu(l);
      s["cpu"] =
          fmt::format("cgroup v{} {} ({}){}", group.version, group.path,
                      group.version == 1 ? (per_cpu ? "cpuacct.usage_percpu" : "cpuacct.usage")
                                         : "cpu.stat usage_usec",
                      minus.empty() ? "" : ", less " + minus);
      s["cgroup"] = group.path;
      s["cgroup_version"] = group.version;
      if (!minus.empty()) s["cgroup_minus"] = minus;
      s["memory"] = "Pss of the members (/proc/<pid>/smaps_rollup)";
      // The group's block I/O is not the columns' (docs/accuracy.md, "I/O"): v1 blkio counts a
      // group's bios only on a device with a throttle limit set and charges buffered writeback
      // to the root group; v2 io.stat counts writes at writeback, not when they are dirtied.
      s["io"] =
          "the members' /proc/<pid>/io (the cgroup's blkio/io.stat counts block I/O at "
          "another point: docs/accuracy.md)";
      if (const std::string& left = scanner.level_cgroup_left(l); !left.empty())
        s["cgroup_left"] = left;
    } else {
      s["cpu"] = "the members' /proc/<pid>/stat, wait4 of those sonde reaps";
      s["memory"] = "Pss of the members (/proc/<pid>/smaps_rollup)";
      s["io"] = "the members' /proc/<pid>/io";
      if (l == Level::process && !no_cgroup_why.empty()) s["cgroup_not_used"] = no_cgroup_why;
      if (l == Level::slurm && !scanner.job_cgroup_not_used().empty())
        s["cgroup_not_used"] = scanner.job_cgroup_not_used();
    }
    out[std::string(level_name(l))] = std::move(s);
  }
  return out;
}

nlohmann::json node_info_json(const Engine& engine) {
  const NodeInfo& n = engine.node_info();
  nlohmann::json j;
  j["hostname"] = n.hostname;
  j["kernel"] = n.kernel;
  j["num_cpus"] = n.num_cpus;
  j["num_system_cpus"] = n.num_system_cpus;
  j["cpu_handles"] = n.cpu_handles;
  j["cpu_quota"] = n.cpu_quota ? nlohmann::json(*n.cpu_quota) : nlohmann::json();
  j["mem_total_bytes"] = n.mem_total_bytes;
  nlohmann::json limits = nlohmann::json::object(), sources = nlohmann::json::object();
  for (Level l : kAllLevels) {
    limits[std::string(level_name(l))] = n.memory_limit_bytes[level_index(l)];
    sources[std::string(level_name(l))] = n.memory_limit_source[level_index(l)];
  }
  j["memory_limits"] = limits;
  j["memory_limit_sources"] = sources;
  // What 100 % CPU means at each level (cpu_util_* are percent of these CPUs).
  nlohmann::json cpus = nlohmann::json::object();
  for (Level l : kAllLevels)
    cpus[std::string(level_name(l))] = {{"num_cpus", n.level_num_cpus[level_index(l)]},
                                        {"cpu_ids", n.level_cpu_ids[level_index(l)]},
                                        {"source", n.level_cpus_source[level_index(l)]}};
  j["cpus_per_level"] = cpus;
  j["num_gpus"] = n.num_gpus;
  j["gpu_name"] = n.gpu_name;
  j["gpu_memory_gib"] = n.gpu_memory_gib;
  if (!n.energy.domains.empty())
    j["energy"] = {{"domains", n.energy.domains},
                   {"counted", n.energy.counted},
                   {"method", n.energy.method},
                   {"carbon_intensity_g_per_kwh", n.energy.carbon_intensity_g_per_kwh}};
  return j;
}

void set_manifest_end(nlohmann::json& manifest, double end_wallclock, const RunOutcome& outcome,
                      bool complete, const nlohmann::json& summary, std::uint64_t ticks,
                      std::uint64_t ticks_missed) {
  manifest["end_wallclock"] = end_wallclock;
  manifest["exit_status"] =
      outcome.exit_status ? nlohmann::json(*outcome.exit_status) : nlohmann::json();
  manifest["complete"] = complete;
  manifest["ticks"] = ticks;
  manifest["ticks_missed"] = ticks_missed;
  manifest["summary"] = summary;
}

Result<UniqueFd> open_new_run_dir(const std::string& dir, std::string_view advice) {
  auto dir_fd = open_output_dir(dir, true);
  if (!dir_fd)
    return make_error(dir_fd.error().code,
                      fmt::format("cannot use run directory: {}", dir_fd.error().message));
  struct stat st {};
  if (::fstatat(dir_fd->get(), "manifest.json", &st, AT_SYMLINK_NOFOLLOW) == 0)
    return make_error(Errc::config,
                      fmt::format("{} already holds a run (manifest.json); {}", dir, advice));
  return dir_fd;
}

}  // namespace sonde
