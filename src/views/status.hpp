#pragma once
// `sonde status` and `sonde gpustat`: one query of the node (GPUs, their processes, host
// figures from the status plugins) and its renderings: sonde's text, gpustat's text, and the JSON
// of each. The status hooks of plugins (include/sonde/plugin.h, SONDE_CAP_STATUS) run through
// StatusHooks (src/views/status_hooks.hpp) at the points named in query_status().
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gpu/gpu.hpp"

namespace sonde::status {

class StatusHooks;

/// A field added by a plugin (or a built-in status plugin): shown as `key=value` in sonde's text,
/// as `"key": value` in JSON. `number` set: a number; else the string.
struct Field {
  std::string key;
  std::string text;
  std::optional<double> number;
  nlohmann::ordered_json json() const;
};
/// Sets or replaces `key` in `fields` (insertion order kept).
void set_field(std::vector<Field>& fields, Field f);
const Field* find_field(const std::vector<Field>& fields, const std::string& key);

struct ProcessRow {
  int pid = 0;
  std::optional<std::string> user;  ///< nullopt: the process is gone or unreadable
  std::string command;              ///< basename of argv[0] ("?" when unknown)
  std::vector<std::string> full_command;
  std::optional<std::uint64_t> gpu_memory_bytes;
  std::optional<double> cpu_percent;  ///< over the query's CPU window; nullopt when not measured
  std::optional<std::uint64_t> rss_bytes;
  std::optional<double> sm_util;  ///< per-process SM utilisation where the driver offers it
  std::vector<Field> fields;      ///< from plugins
  std::string text_cache;         ///< scratch for the C accessors (process_field)
};

/// One MIG device of a GPU in MIG mode and its processes (the same rows as the GPU's, plugin
/// fields included).
struct MigRow {
  gpu::MigDevice device;                             ///< its `processes` are moved out
  std::optional<std::vector<ProcessRow>> processes;  ///< nullopt: not supported
};

struct GpuRow {
  gpu::GpuDevice device;                             ///< its `processes` and `mig` are moved out
  std::optional<std::vector<ProcessRow>> processes;  ///< nullopt: not supported
  std::vector<Field> fields;
  std::vector<MigRow> mig;  ///< MIG mode on: its MIG devices (device.mig_mode tells the mode)
};

/// What plugins add to the node, per plugin name (the JSON object "<plugin>": {…}).
struct PluginFields {
  std::string plugin;
  std::vector<Field> fields;
};

struct StatusData {
  std::string hostname;
  std::chrono::system_clock::time_point query_time;
  std::string nvidia_driver;  ///< empty without NVML
  std::string amd_driver;     ///< empty without ROCm SMI
  bool nvml_loaded = false;
  std::vector<std::string> notes;  ///< why a backend is absent
  std::vector<GpuRow> gpus;
  std::vector<PluginFields> node_fields;
};

/// Host-side readings used for the process rows (by pid), from `proc_root`.
struct ProcInfo {
  std::optional<std::string> user;
  std::string command = "?";
  std::vector<std::string> full_command;
  std::optional<std::uint64_t> rss_bytes;
  std::optional<std::uint64_t> cpu_ticks;  ///< utime + stime
};
ProcInfo read_proc_info(const std::string& proc_root, int pid);
/// A process's command as status shows it: the base name of argv[0]; "?" when there is none.
std::string command_name(const std::vector<std::string>& argv);
/// User name of a uid (cached), or the number as text.
std::string user_name(std::uint32_t uid);

// ---- rendering ----

struct TextOptions {
  bool color = false;
};

/// ANSI SGR sequences, or "" without colour.
struct Palette {
  bool on = false;
  const char* operator()(const char* sgr) const { return on ? sgr : ""; }
  static constexpr const char* reset = "\x1b[0m";
  static constexpr const char* bold = "\x1b[1m";
  static constexpr const char* gray = "\x1b[1;30m";
  static constexpr const char* red = "\x1b[31m";
  static constexpr const char* bold_red = "\x1b[1;31m";
  static constexpr const char* green = "\x1b[32m";
  static constexpr const char* bold_green = "\x1b[1;32m";
  static constexpr const char* yellow = "\x1b[33m";
  static constexpr const char* bold_yellow = "\x1b[1;33m";
  static constexpr const char* blue = "\x1b[34m";
  static constexpr const char* magenta = "\x1b[35m";
  static constexpr const char* bold_magenta = "\x1b[1;35m";
  static constexpr const char* cyan = "\x1b[36m";
  static constexpr const char* bold_cyan = "\x1b[1;36m";
  static constexpr const char* bold_white = "\x1b[1;37m";
};

/// "1.5 GiB", "340 MiB", "12 KiB", "??" for nullopt.
std::string human_bytes(std::optional<std::uint64_t> bytes);
/// `value` rounded to an integer, or "??".
std::string int_or_unknown(std::optional<double> value);

/// Time as gpustat prints it (C locale's "%c": "Wed Dec  2 14:30:00 2026"), local time.
std::string ctime_text(std::chrono::system_clock::time_point t);
/// ISO 8601 local time with microseconds, as Python's datetime.isoformat().
std::string iso_time(std::chrono::system_clock::time_point t);

/// sonde's JSON of a query (`sonde status --json`).
nlohmann::ordered_json status_json(const StatusData& data);

/// gpustat's options (its flags, same meaning).
struct GpustatOptions {
  bool show_cmd = false;       ///< -c
  bool show_user = false;      ///< -u
  bool show_pid = false;       ///< -p
  bool show_full_cmd = false;  ///< -f
  bool show_fan = false;       ///< -F
  std::string show_codec;      ///< -e: "", "enc", "dec", "enc,dec"
  std::string show_power;      ///< -P: "", "draw", "limit", "draw,limit"
  bool show_header = true;     ///< --no-header
  bool no_processes = false;   ///< --no-processes
  std::optional<int> gpuname_width;
  std::optional<std::vector<int>> ids;  ///< --id
};

/// gpustat's JSON (keys exactly as gpustat 1.x; NVIDIA GPUs only, like gpustat).
nlohmann::ordered_json gpustat_json(const StatusData& data, const GpustatOptions& options);

// ---- the query ----

struct QueryOptions {
  std::string proc_root = "/proc";
  /// CPU figures (host and per process) are measured over this many seconds; 0: not measured.
  double cpu_interval_s = 0.1;
  /// Only these GPU indices (gpustat --id); nullopt: all.
  std::optional<std::vector<int>> ids;
  /// What the caller knows of a process already (sonde top reads every process itself): its
  /// ProcInfo instead of reading /proc again; nullopt (or no function): read_proc_info.
  std::function<std::optional<ProcInfo>(int pid)> known_process;
};

/// One query: GPUs and their processes, with the hooks at their points (before_query,
/// query_device, get_process_info, after_query).
StatusData query_status(gpu::Gpus& gpus, StatusHooks& hooks, const QueryOptions& options);

/// sonde's text: header, GPU lines with their processes, the plugins' header and footer lines.
/// Lines end with '\n'.
std::string status_text(const StatusData& data, StatusHooks& hooks, bool color);

/// gpustat's text (its line format; the plugins' repr/print hooks apply).
std::string gpustat_text(const StatusData& data, StatusHooks& hooks, const GpustatOptions& options,
                         bool color);

}  // namespace sonde::status
