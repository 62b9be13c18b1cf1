// One status query and its renderings (sonde's text and JSON, gpustat's text and JSON).
#include "views/status.hpp"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/pid_reads.hpp"
#include "core/procfs.hpp"
#include "views/status_hooks.hpp"

namespace sonde::status {

nlohmann::ordered_json Field::json() const {
  if (number) return std::isfinite(*number) ? nlohmann::ordered_json(*number) : nullptr;
  return text;
}

void set_field(std::vector<Field>& fields, Field f) {
  for (auto& existing : fields)
    if (existing.key == f.key) {
      existing = std::move(f);
      return;
    }
  fields.push_back(std::move(f));
}

const Field* find_field(const std::vector<Field>& fields, const std::string& key) {
  for (const auto& f : fields)
    if (f.key == key) return &f;
  return nullptr;
}

std::string user_name(std::uint32_t uid) {
  static std::map<std::uint32_t, std::string> cache;
  if (auto it = cache.find(uid); it != cache.end()) return it->second;
  std::string name = std::to_string(uid);
  struct passwd pw {};
  struct passwd* result = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &result) == 0 && result != nullptr)
    name = result->pw_name;
  cache.emplace(uid, name);
  return name;
}

std::string command_name(const std::vector<std::string>& argv) {
  if (argv.empty()) return "?";
  const auto slash = argv.front().rfind('/');
  std::string name = slash == std::string::npos ? argv.front() : argv.front().substr(slash + 1);
  return name.empty() ? "?" : name;
}

ProcInfo read_proc_info(const std::string& proc_root, int pid) {
  ProcInfo info;
  const std::string dir = fmt::format("{}/{}", proc_root, pid);
  if (auto uid = read_pid_uid(proc_root, pid)) info.user = user_name(*uid);
  if (auto cmd = read_file(dir + "/cmdline"); cmd && !cmd->empty()) {
    std::size_t start = 0;
    while (start < cmd->size()) {
      std::size_t end = cmd->find('\0', start);
      if (end == std::string::npos) end = cmd->size();
      info.full_command.push_back(cmd->substr(start, end - start));
      start = end + 1;
    }
    info.command = command_name(info.full_command);
  }
  if (auto st = read_pid(proc_root, pid)) {
    info.cpu_ticks = st->cpu_ticks;
    info.rss_bytes = st->rss_bytes;
    if (info.full_command.empty()) info.full_command.push_back(st->comm);
  }
  if (info.full_command.empty()) info.full_command.push_back("?");
  return info;
}

// ---- the query ----

StatusData query_status(gpu::Gpus& gpus, StatusHooks& hooks, const QueryOptions& options) {
  StatusData data;
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) == 0) data.hostname = host;
  data.query_time = std::chrono::system_clock::now();
  data.notes = gpus.notes;
  data.nvml_loaded = gpus.nvml_loaded;
  hooks.before_query(data);

  gpu::GpuSnapshot snap = gpu::query_all(gpus, true);
  data.nvidia_driver = snap.nvidia_driver;
  data.amd_driver = snap.amd_driver;

  // Every process once, however many GPUs it uses.
  std::map<int, ProcInfo> procs;
  for (auto& dev : snap.devices) {
    if (options.ids &&
        std::find(options.ids->begin(), options.ids->end(), dev.index) == options.ids->end())
      continue;
    GpuRow row;
    auto rows_of = [&](const std::vector<gpu::GpuProcess>& list) {
      std::vector<ProcessRow> out;
      for (const auto& p : list) {
        ProcessRow pr;
        pr.pid = p.pid;
        pr.gpu_memory_bytes = p.used_memory_bytes;
        pr.sm_util = p.sm_util;
        auto it = procs.find(p.pid);
        if (it == procs.end()) {
          std::optional<ProcInfo> known;
          if (options.known_process) known = options.known_process(p.pid);
          it = procs
                   .emplace(p.pid,
                            known ? std::move(*known) : read_proc_info(options.proc_root, p.pid))
                   .first;
        }
        const ProcInfo& info = it->second;
        pr.user = info.user;
        pr.command = info.command;
        pr.full_command = info.full_command;
        pr.rss_bytes = info.rss_bytes;
        out.push_back(std::move(pr));
      }
      return out;
    };
    if (dev.processes) row.processes = rows_of(*dev.processes);
    for (auto& m : dev.mig) {
      MigRow mr;
      if (m.processes) mr.processes = rows_of(*m.processes);
      mr.device = std::move(m);
      mr.device.processes.reset();  // kept in mr.processes
      row.mig.push_back(std::move(mr));
    }
    row.device = std::move(dev);
    row.device.processes.reset();  // kept in row.processes
    row.device.mig.clear();        // kept in row.mig
    data.gpus.push_back(std::move(row));
  }

  // CPU of the GPU processes over the window (what gpustat's cpu_percent is).
  if (options.cpu_interval_s > 0 && !procs.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::duration<double>(options.cpu_interval_s));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    static const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
    std::map<int, double> cpu;
    for (const auto& [pid, info] : procs) {
      if (!info.cpu_ticks) continue;
      auto st = read_pid(options.proc_root, pid);
      if (!st) continue;
      const auto now = st->cpu_ticks;
      if (now < *info.cpu_ticks) continue;
      cpu[pid] = static_cast<double>(now - *info.cpu_ticks) / hz / dt * 100.0;
    }
    auto set_cpu = [&](std::optional<std::vector<ProcessRow>>& rows) {
      if (rows)
        for (auto& p : *rows)
          if (auto it = cpu.find(p.pid); it != cpu.end()) p.cpu_percent = it->second;
    };
    for (auto& g : data.gpus) {
      set_cpu(g.processes);
      for (auto& m : g.mig) set_cpu(m.processes);
    }
  }

  for (auto& g : data.gpus) {
    hooks.query_device(data, g);
    if (g.processes)
      for (auto& p : *g.processes) hooks.get_process_info(data, g, p);
    // A MIG device's processes carry the fields the plugins gave the same process on its GPU.
    if (!g.processes) continue;
    for (auto& m : g.mig)
      if (m.processes)
        for (auto& p : *m.processes)
          for (const auto& q : *g.processes)
            if (q.pid == p.pid) p.fields = q.fields;
  }
  hooks.after_query(data);
  return data;
}

// ---- formatting helpers ----

std::string human_bytes(std::optional<std::uint64_t> bytes) {
  if (!bytes) return "??";
  const double b = static_cast<double>(*bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.0f} KiB", b / 1024.0);
  return fmt::format("{} B", *bytes);
}

std::string int_or_unknown(std::optional<double> value) {
  if (!value || !std::isfinite(*value)) return "??";
  return fmt::format("{}", static_cast<long long>(std::llround(*value)));
}

std::string ctime_text(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  // The C locale's %c, spelled out (independent of the process locale).
  static const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  return fmt::format("{} {} {:>2} {:02}:{:02}:{:02} {}", days[tm.tm_wday], months[tm.tm_mon],
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, tm.tm_year + 1900);
}

std::string iso_time(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&tt, &tm);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()) %
                  std::chrono::seconds(1);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us.count());
}

namespace {

using ojson = nlohmann::ordered_json;

template <class T>
ojson opt(const std::optional<T>& v) {
  if (!v) return nullptr;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(*v)) return nullptr;
  return *v;
}

ojson opt_int(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return static_cast<long long>(std::floor(*v));
}

std::optional<std::uint64_t> mib(const std::optional<std::uint64_t>& bytes) {
  return bytes ? std::optional<std::uint64_t>(*bytes / (1024 * 1024)) : std::nullopt;
}

void add_fields(ojson& o, const std::vector<Field>& fields) {
  for (const auto& f : fields) o[f.key] = f.json();
}

// A GPU's processes: null where not supported, else an object each (`fill` writes a process's
// own keys, the plugins' fields follow).
template <class Fill>
ojson processes_json(const std::optional<std::vector<ProcessRow>>& processes, Fill fill) {
  if (!processes) return nullptr;
  ojson list = ojson::array();
  for (const auto& p : *processes) {
    ojson pj;
    fill(pj, p);
    add_fields(pj, p.fields);
    list.push_back(std::move(pj));
  }
  return list;
}

// The node-level plugins' fields: one object per plugin.
void add_node_fields(ojson& o, const StatusData& data) {
  for (const auto& pf : data.node_fields) {
    ojson f = ojson::object();
    add_fields(f, pf.fields);
    o[pf.plugin] = std::move(f);
  }
}

std::string no_gpu_reason(const StatusData& data) {
  std::string why;
  for (const auto& n : data.notes) why += (why.empty() ? "" : "; ") + n;
  return why;
}

}  // namespace

// ---- sonde's JSON ----

namespace {
// What names a MIG device, the same in sonde's JSON and in gpustat's.
ojson mig_identity(const gpu::MigDevice& md) {
  ojson mj;
  mj["index"] = md.index;
  mj["uuid"] = md.uuid;
  mj["name"] = md.name;
  mj["profile"] = md.profile;
  mj["gpu_instance_id"] = opt(md.gpu_instance_id);
  mj["compute_instance_id"] = opt(md.compute_instance_id);
  return mj;
}
}  // namespace

ojson status_json(const StatusData& data) {
  ojson o;
  o["hostname"] = data.hostname;
  o["query_time"] = iso_time(data.query_time);
  o["driver_version"] = {
      {"nvidia", data.nvidia_driver.empty() ? ojson() : ojson(data.nvidia_driver)},
      {"amd", data.amd_driver.empty() ? ojson() : ojson(data.amd_driver)}};
  o["notes"] = data.notes;
  o["gpus"] = ojson::array();
  for (const auto& g : data.gpus) {
    const auto& d = g.device;
    ojson j;
    j["index"] = d.index;
    j["vendor"] = d.vendor;
    j["name"] = d.name;
    j["uuid"] = d.uuid;
    j["pci_bus_id"] = d.pci_bus_id;
    j["temperature_c"] = opt(d.temperature_c);
    j["fan_percent"] = opt(d.fan_percent);
    j["util_gpu_percent"] = opt(d.util_gpu);
    j["util_mem_percent"] = opt(d.util_mem);
    j["mem_used_bytes"] = opt(d.mem_used_bytes);
    j["mem_total_bytes"] = opt(d.mem_total_bytes);
    j["power_w"] = opt(d.power_w);
    j["power_limit_w"] = opt(d.power_limit_w);
    j["energy_mj"] = opt(d.energy_mj);
    j["enc_util_percent"] = opt(d.enc_util);
    j["dec_util_percent"] = opt(d.dec_util);
    j["error"] = opt(d.error);
    add_fields(j, g.fields);
    auto fill = [](ojson& pj, const ProcessRow& p) {
      pj["pid"] = p.pid;
      pj["user"] = opt(p.user);
      pj["command"] = p.command;
      pj["full_command"] = p.full_command;
      pj["gpu_memory_bytes"] = opt(p.gpu_memory_bytes);
      pj["sm_util_percent"] = opt(p.sm_util);
      pj["cpu_percent"] = opt(p.cpu_percent);
      pj["rss_bytes"] = opt(p.rss_bytes);
    };
    j["processes"] = processes_json(g.processes, fill);
    j["mig_mode"] = opt(d.mig_mode);
    j["mig_devices"] = ojson::array();
    for (const auto& m : g.mig) {
      const auto& md = m.device;
      ojson mj = mig_identity(md);
      mj["util_gpu_percent"] = opt(md.util_gpu);
      mj["mem_used_bytes"] = opt(md.mem_used_bytes);
      mj["mem_total_bytes"] = opt(md.mem_total_bytes);
      mj["error"] = opt(md.error);
      mj["processes"] = processes_json(m.processes, fill);
      j["mig_devices"].push_back(std::move(mj));
    }
    o["gpus"].push_back(std::move(j));
  }
  add_node_fields(o, data);
  return o;
}

// ---- gpustat's JSON ----

namespace {
// gpustat's name of a device it could not query (core.py InvalidGPU).
std::string invalid_gpu_name(const std::string& error) {
  if (error == "GPU is lost") return "((GPU is lost))";
  if (error == "unknown NVML error") return "((Unknown Error))";
  return "((" + error + "))";
}
}  // namespace

ojson gpustat_json(const StatusData& data, const GpustatOptions&) {
  ojson o;
  o["hostname"] = data.hostname;
  o["driver_version"] = data.nvidia_driver.empty()
                            ? (data.amd_driver.empty() ? ojson() : ojson(data.amd_driver))
                            : ojson(data.nvidia_driver);
  o["query_time"] = iso_time(data.query_time);
  o["gpus"] = ojson::array();
  for (const auto& g : data.gpus) {
    // A device that could not be queried: gpustat's InvalidGPU, every value unknown.
    gpu::GpuDevice unknown;
    unknown.index = g.device.index;
    unknown.uuid = g.device.uuid;
    unknown.name = g.device.name;
    unknown.error = g.device.error;
    const auto& d = g.device.error ? unknown : g.device;
    ojson j;
    j["index"] = d.index;
    j["uuid"] = d.uuid;
    j["name"] = d.error ? invalid_gpu_name(*d.error) : d.name;  // gpustat's InvalidGPU name
    j["temperature.gpu"] = opt_int(d.temperature_c);
    j["fan.speed"] = opt_int(d.fan_percent);
    j["utilization.gpu"] = opt_int(d.util_gpu);
    j["utilization.enc"] = opt_int(d.enc_util);
    j["utilization.dec"] = opt_int(d.dec_util);
    j["power.draw"] = opt_int(d.power_w);
    j["enforced.power.limit"] = opt_int(d.power_limit_w);
    j["memory.used"] = opt(mib(d.mem_used_bytes));
    j["memory.total"] = opt(mib(d.mem_total_bytes));
    auto fill = [](ojson& pj, const ProcessRow& p) {
      pj["username"] = opt(p.user);
      pj["command"] = p.command;
      pj["full_command"] = p.full_command;
      pj["gpu_memory_usage"] = opt(mib(p.gpu_memory_bytes));
      pj["cpu_percent"] = opt(p.cpu_percent);
      pj["cpu_memory_usage"] = opt(p.rss_bytes);
      pj["pid"] = p.pid;
    };
    j["processes"] = d.error ? ojson() : processes_json(g.processes, fill);
    if (d.error) j["error"] = *d.error;
    // gpustat has no MIG output (its issue #102): sonde's own key, only on a GPU in MIG mode,
    // one object per MIG device in gpustat's key style. Utilisation is null where the driver
    // does not give it (MIG devices), never 0.
    if (!d.error && d.mig_mode.value_or(false)) {
      ojson list = ojson::array();
      for (const auto& m : g.mig) {
        const auto& md = m.device;
        ojson mj = mig_identity(md);
        mj["utilization.gpu"] = opt_int(md.util_gpu);
        mj["memory.used"] = opt(mib(md.mem_used_bytes));
        mj["memory.total"] = opt(mib(md.mem_total_bytes));
        mj["processes"] = processes_json(m.processes, fill);
        if (md.error) mj["error"] = *md.error;
        list.push_back(std::move(mj));
      }
      j["mig_devices"] = std::move(list);
    }
    add_fields(j, g.fields);
    o["gpus"].push_back(std::move(j));
  }
  add_node_fields(o, data);
  return o;
}

// ---- sonde's text ----

std::string status_text(const StatusData& data, StatusHooks& hooks, bool color) {
  const Palette c{color};
  std::string out;
  std::string drivers;
  if (!data.nvidia_driver.empty()) drivers += "  NVIDIA driver " + data.nvidia_driver;
  if (!data.amd_driver.empty()) drivers += "  AMD driver " + data.amd_driver;
  out += fmt::format("{}{}{}  {}{}{}{}\n", c(Palette::bold_white), data.hostname, c(Palette::reset),
                     ctime_text(data.query_time), c(Palette::gray), drivers, c(Palette::reset));
  out += hooks.print_header();
  if (data.gpus.empty()) {
    const std::string why = no_gpu_reason(data);
    out += fmt::format("{}No GPU found{}{}\n", c(Palette::yellow), c(Palette::reset),
                       why.empty() ? std::string() : ": " + why);
  }
  std::size_t name_width = 16;
  for (const auto& g : data.gpus) name_width = std::max(name_width, g.device.name.size());
  for (const auto& g : data.gpus) {
    const auto& d = g.device;
    std::string line;
    if (d.error) {
      line =
          fmt::format("{}[{}]{} {}{:<{}}{} | {}{}{}", c(Palette::cyan), d.index, c(Palette::reset),
                      c(Palette::blue), d.name.empty() ? "??" : d.name, name_width,
                      c(Palette::reset), c(Palette::bold_red), *d.error, c(Palette::reset));
    } else {
      const bool hot = d.temperature_c && *d.temperature_c >= 50;
      const bool busy = d.util_gpu && *d.util_gpu >= 30;
      // NVML gives no utilisation for a GPU in MIG mode: "n/a" (the JSON's null), not "??".
      auto percent = [&](const std::optional<double>& v) {
        return !v && d.mig_mode.value_or(false) ? std::string("n/a") : int_or_unknown(v) + " %";
      };
      line = fmt::format(
          "{}[{}]{} {}{:<{}}{} | {}{:>3}°C{}, {}{:>5}{} util, {:>5} mem bw | {}{:>9}{} / {:>9} "
          "| "
          "{}{:>3}{} / {:>3} W",
          c(Palette::cyan), d.index, c(Palette::reset), c(Palette::blue), d.name, name_width,
          c(Palette::reset), c(hot ? Palette::bold_red : Palette::red),
          int_or_unknown(d.temperature_c), c(Palette::reset),
          c(busy ? Palette::bold_green : Palette::green), percent(d.util_gpu), c(Palette::reset),
          percent(d.util_mem), c(Palette::bold_yellow), human_bytes(d.mem_used_bytes),
          c(Palette::reset), human_bytes(d.mem_total_bytes), c(Palette::magenta),
          int_or_unknown(d.power_w), c(Palette::reset), int_or_unknown(d.power_limit_w));
      if (d.fan_percent) line += fmt::format(" | fan {:>3} %", int_or_unknown(d.fan_percent));
      if (d.enc_util || d.dec_util)
        line += fmt::format(" | enc {} % dec {} %", int_or_unknown(d.enc_util),
                            int_or_unknown(d.dec_util));
      if (!g.processes)
        line += " | processes: not supported";
      else if (g.processes->empty())
        line += " | no processes";
      if (d.mig_mode.value_or(false))
        line += fmt::format(" | MIG on, {} device{}", g.mig.size(), g.mig.size() == 1 ? "" : "s");
    }
    for (const auto& f : g.fields) line += fmt::format("  {}={}", f.key, f.text);
    out += hooks.repr_gpu(g, line) + "\n";
    auto process_line = [&](const std::string& indent, bool last, const ProcessRow& p) {
      std::string cmd;
      for (const auto& a : p.full_command) cmd += (cmd.empty() ? "" : " ") + a;
      std::string pl = fmt::format(
          "{}{} {}{:<10}{} {:>7} {}{:>9}{} gpu mem  {:>4} % cpu  {:>9} rss  {}{}{}", indent,
          last ? "└─" : "├─", c(Palette::gray), p.user.value_or("??"), c(Palette::reset), p.pid,
          c(Palette::yellow), human_bytes(p.gpu_memory_bytes), c(Palette::reset),
          int_or_unknown(p.cpu_percent), human_bytes(p.rss_bytes), c(Palette::cyan),
          cmd.size() > 60 ? cmd.substr(0, 59) + "…" : cmd, c(Palette::reset));
      if (p.sm_util) pl += fmt::format("  sm={}%", int_or_unknown(p.sm_util));
      for (const auto& f : p.fields) pl += fmt::format("  {}={}", f.key, f.text);
      out += hooks.repr_process(g, p, pl) + "\n";
    };
    // In MIG mode a process is shown under the MIG device it runs on; the GPU's own list keeps
    // the others (none, usually).
    std::vector<const ProcessRow*> own;
    if (g.processes)
      for (const auto& p : *g.processes) {
        const bool on_mig = std::any_of(g.mig.begin(), g.mig.end(), [&](const MigRow& m) {
          return m.processes && std::any_of(m.processes->begin(), m.processes->end(),
                                            [&](const ProcessRow& q) { return q.pid == p.pid; });
        });
        if (!on_mig) own.push_back(&p);
      }
    const std::size_t children = own.size() + g.mig.size();
    for (std::size_t i = 0; i < own.size(); ++i) process_line("    ", i + 1 == children, *own[i]);
    for (std::size_t k = 0; k < g.mig.size(); ++k) {
      const MigRow& m = g.mig[k];
      const auto& md = m.device;
      const bool last = own.size() + k + 1 == children;
      std::string ml = fmt::format(
          "    {} {}MIG {:<8}{} GI {:>2} CI {:>2}", last ? "└─" : "├─", c(Palette::blue),
          md.profile.empty() ? md.name : md.profile, c(Palette::reset),
          md.gpu_instance_id ? std::to_string(*md.gpu_instance_id) : "??",
          md.compute_instance_id ? std::to_string(*md.compute_instance_id) : "??");
      if (md.error) {
        ml += fmt::format(" | {}{}{}", c(Palette::bold_red), *md.error, c(Palette::reset));
      } else {
        ml +=
            fmt::format(" | {}{:>3}{} util | {}{:>9}{} / {:>9}", c(Palette::green),
                        md.util_gpu ? int_or_unknown(md.util_gpu) + " %" : "n/a", c(Palette::reset),
                        c(Palette::bold_yellow), human_bytes(md.mem_used_bytes), c(Palette::reset),
                        human_bytes(md.mem_total_bytes));
        if (!m.processes)
          ml += " | processes: not supported";
        else if (m.processes->empty())
          ml += " | no processes";
        else
          ml += fmt::format(" | {} process{}", m.processes->size(),
                            m.processes->size() == 1 ? "" : "es");
      }
      out += ml + "\n";
      if (!m.processes) continue;
      for (std::size_t i = 0; i < m.processes->size(); ++i)
        process_line(last ? "       " : "    │  ", i + 1 == m.processes->size(), (*m.processes)[i]);
    }
  }
  out += hooks.print_footer();
  return out;
}

// ---- gpustat's text ----

namespace {

// gpustat's util.bytes2human.
std::string bytes2human(std::uint64_t b) {
  static const char* suffixes[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  std::size_t s = 0;
  while (b > 9999 && s + 1 < std::size(suffixes)) {
    b >>= 10;
    ++s;
  }
  return fmt::format("{}{}", b, suffixes[s]);
}

std::string q(const std::optional<double>& v) {
  return v && std::isfinite(*v) ? fmt::format("{}", static_cast<long long>(std::floor(*v)))
                                : std::string("??");
}
std::string q(const std::optional<std::uint64_t>& v) {
  return v ? fmt::format("{}", *v) : std::string("??");
}

std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char ch : s)
    if ((ch & 0xC0) != 0x80) ++n;
  return n;
}

// gpustat's util.shorten_left(name, w, placeholder="…") padded to `w` code points: a long name
// keeps its end ("…M4-40GB"), as gpustat shows it.
std::string fit_name(const std::string& name, std::size_t w) {
  const std::size_t cps = code_points(name);
  if (cps <= w) return name + std::string(w - cps, ' ');
  if (w == 0) return {};
  std::size_t keep = w - 1, i = name.size();
  while (keep > 0 && i > 0) {  // back over `keep` code points
    --i;
    if ((static_cast<unsigned char>(name[i]) & 0xC0) != 0x80) --keep;
  }
  return "…" + name.substr(i);
}

}  // namespace

std::string gpustat_text(const StatusData& data, StatusHooks& hooks, const GpustatOptions& o,
                         bool color) {
  const Palette c{color};
  // gpustat: the longest name (in code points) unless --gpuname-width; 0 hides the name.
  std::size_t width = 0;
  if (o.gpuname_width) {
    width = static_cast<std::size_t>(*o.gpuname_width);
  } else {
    for (const auto& g : data.gpus)
      width = std::max(
          width, code_points(g.device.error ? invalid_gpu_name(*g.device.error) : g.device.name));
  }
  std::string out;
  if (o.show_header) {
    std::string driver = data.nvidia_driver.empty() ? data.amd_driver : data.nvidia_driver;
    std::string h =
        fmt::format("{}{:<{}}{}  {}  {}{}{}", c(Palette::bold_white), data.hostname,
                    (width ? width : 16) + 3, c(Palette::reset), ctime_text(data.query_time),
                    c(Palette::gray), driver, c(Palette::reset));
    while (!h.empty() && h.back() == ' ') h.pop_back();
    out += h + "\n";
  }
  out += hooks.print_header();
  const bool power_limit = o.show_power.find("limit") != std::string::npos;
  for (const auto& row : data.gpus) {
    // A device that could not be queried is gpustat's InvalidGPU: its name says why, every
    // value is unknown, its processes are not supported.
    GpuRow invalid;
    if (row.device.error) {
      invalid.device.index = row.device.index;
      invalid.device.name = invalid_gpu_name(*row.device.error);
      invalid.fields = row.fields;
    }
    const auto& g = row.device.error ? invalid : row;
    const auto& d = g.device;
    const bool hot = d.temperature_c && *d.temperature_c >= 50;
    const bool busy = d.util_gpu && *d.util_gpu >= 30;
    std::string r = fmt::format("{}[{}]{} ", c(Palette::cyan), d.index, c(Palette::reset));
    if (width > 0)
      r += fmt::format("{}{}{} |", c(row.device.error ? Palette::red : Palette::blue),
                       fit_name(d.name.empty() ? "??" : d.name, width), c(Palette::reset));
    r += fmt::format("{}{:>3}°C{}, ", c(hot ? Palette::bold_red : Palette::red), q(d.temperature_c),
                     c(Palette::reset));
    if (o.show_fan) {
      const bool fast = d.fan_percent && *d.fan_percent >= 30;
      r += fmt::format("{}{:>3} %{}, ", c(fast ? Palette::bold_cyan : Palette::cyan),
                       q(d.fan_percent), c(Palette::reset));
    }
    r += fmt::format("{}{:>3} %{}", c(busy ? Palette::bold_green : Palette::green), q(d.util_gpu),
                     c(Palette::reset));
    if (!o.show_codec.empty()) {
      std::vector<std::string> parts;
      if (o.show_codec.find("enc") != std::string::npos)
        parts.push_back(fmt::format("{}E: {}{}{:>3} %{}", c(Palette::bold), c(Palette::reset),
                                    c(Palette::green), q(d.enc_util), c(Palette::reset)));
      if (o.show_codec.find("dec") != std::string::npos)
        parts.push_back(fmt::format("{}D: {}{}{:>3} %{}", c(Palette::bold), c(Palette::reset),
                                    c(Palette::green), q(d.dec_util), c(Palette::reset)));
      r += " (" + (parts.size() == 2 ? parts[0] + "  " + parts[1] : parts[0]) + ")";
    }
    if (!o.show_power.empty()) {
      const bool high = d.power_w && d.power_limit_w && *d.power_limit_w > 0 &&
                        *d.power_w / *d.power_limit_w >= 0.4;
      r += fmt::format(",  {}{:>3}{}", c(high ? Palette::bold_magenta : Palette::magenta),
                       q(d.power_w), c(Palette::reset));
      // gpustat: the unit only after the limit (`-P draw` prints the bare number)
      if (power_limit)
        r += fmt::format(" / {}{:>3} W{}", c(Palette::magenta), q(d.power_limit_w),
                         c(Palette::reset));
    }
    std::optional<std::uint64_t> used, total;
    if (d.mem_used_bytes) used = *d.mem_used_bytes / (1024 * 1024);
    if (d.mem_total_bytes) total = *d.mem_total_bytes / (1024 * 1024);
    r += fmt::format(" | {}{:>5}{} / {}{:>5}{} MB", c(Palette::bold_yellow), q(used),
                     c(Palette::reset), c(Palette::yellow), q(total), c(Palette::reset));
    if (!o.no_processes) r += " |";  // gpustat: the bar only before process information
    std::vector<std::string> full;
    if (!o.no_processes) {
      if (!g.processes) {
        r += " (Not Supported)";
      } else {
        for (const auto& p : *g.processes) {
          std::string pr;
          if (!o.show_cmd || o.show_user)
            pr += fmt::format("{}{}{}", c(Palette::gray), p.user.value_or("--"), c(Palette::reset));
          if (o.show_cmd) {
            if (!pr.empty()) pr += ':';
            pr += fmt::format("{}{}{}", c(Palette::cyan), p.command, c(Palette::reset));
          }
          if (o.show_pid) pr += fmt::format("/{}", p.pid);
          std::optional<std::uint64_t> mem;
          if (p.gpu_memory_bytes) mem = *p.gpu_memory_bytes / (1024 * 1024);
          pr += fmt::format("({}{}M{})", c(Palette::yellow), mem ? std::to_string(*mem) : "?",
                            c(Palette::reset));
          r += " " + hooks.repr_process(g, p, pr);
          if (o.show_full_cmd) {
            std::string cmd;
            for (std::size_t i = 0; i < p.full_command.size(); ++i)
              cmd += (i ? " " : "") + (i == 0 ? fmt::format("{}{}{}", c(Palette::cyan),
                                                            p.full_command[i], c(Palette::reset))
                                              : p.full_command[i]);
            full.push_back(fmt::format(
                "{} ├─ {:>6} ({}{:>4}%{}, {}{:>6}{}): {}", c(Palette::reset), p.pid,
                c(Palette::green),
                p.cpu_percent ? fmt::format("{:.0f}", *p.cpu_percent) : std::string("--"),
                c(Palette::reset), c(Palette::yellow), bytes2human(p.rss_bytes.value_or(0)),
                c(Palette::reset), cmd));
          }
        }
      }
    }
    if (!full.empty()) {
      auto& last = full.back();
      if (auto pos = last.find("├"); pos != std::string::npos) last.replace(pos, 3, "└");
      for (const auto& f : full) r += "\n" + f;
    }
    out += hooks.repr_gpu(row, r) + "\n";
  }
  if (data.gpus.empty())
    out += fmt::format("{}(No GPUs are available){}\n", c(Palette::yellow), c(Palette::reset));
  out += hooks.print_footer();
  return out;
}

}  // namespace sonde::status
