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
