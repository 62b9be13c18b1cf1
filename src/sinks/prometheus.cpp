#include "sinks/prometheus.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/nan.hpp"
#include "core/units.hpp"
#include "core/utf8.hpp"

namespace sonde::prom {

Format negotiate(std::string_view accept) {
  // Prometheus asks "application/openmetrics-text;version=1.0.0,application/openmetrics-text;
  // version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"; a client that does not
  // name OpenMetrics gets the classic format.
  return accept.find("application/openmetrics-text") != std::string_view::npos ? Format::openmetrics
                                                                               : Format::prometheus;
}

std::string escape_label_value(std::string_view v) {
  // Bytes that are not UTF-8 become U+FFFD first; the bytes of a multi-byte character are all
  // >= 0x80, so only ASCII needs escaping.
  const std::string valid = valid_utf8(v);
  std::string out;
  out.reserve(valid.size());
  for (const char c : valid) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string escape_help(std::string_view v, Format f) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && f == Format::openmetrics)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

std::string sanitize_name(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 1);
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    char m = std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_';
    if (m == '_' && (out.empty() || out.back() == '_')) continue;
    out += m;
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out.front()))) out = "x_" + out;
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return "0";  // also -0
  return fmt::format("{}", v);
}

namespace {

std::string_view type_name(Type t, Format f) {
  switch (t) {
    case Type::counter: return "counter";
    case Type::info: return f == Format::openmetrics ? "info" : "gauge";
    case Type::gauge: break;
  }
  return "gauge";
}

void render_labels(const std::vector<Label>& labels, std::string& out) {
  if (labels.empty()) return;
  out += '{';
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ',';
    out += labels[i].name;
    out += "=\"";
    out += escape_label_value(labels[i].value);
    out += '"';
  }
  out += '}';
}

}  // namespace

void render(const std::vector<Family>& families, Format f, std::string& out) {
  for (const Family& fam : families) {
    if (fam.samples.empty()) continue;
    // Prometheus 0.0.4 names the counter by its sample name (with _total); OpenMetrics names the
    // family without the suffix.
    std::string meta_name = fam.name;
    std::string sample_name = fam.name;
    if (fam.type == Type::counter) {
      sample_name += "_total";
      if (f == Format::prometheus) meta_name = sample_name;
    } else if (fam.type == Type::info) {
      sample_name += "_info";
      if (f == Format::prometheus) meta_name = sample_name;
    }
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", meta_name,
                   escape_help(fam.help, f), meta_name, type_name(fam.type, f));
    if (f == Format::openmetrics && !fam.unit.empty())
      fmt::format_to(std::back_inserter(out), "# UNIT {} {}\n", meta_name, fam.unit);
    for (const Sample& s : fam.samples) {
      out += sample_name;
      render_labels(s.labels, out);
      out += ' ';
      out += format_value(s.value);
      out += '\n';
    }
  }
}

// ---- Exporter -------------------------------------------------------------------------------

namespace {

/// What a known column becomes.
struct KnownMetric {
  const char* name;  ///< family name (counters without _total)
  Type type;
  const char* unit;
  double scale;
  bool integrate;  ///< a rate column summed back into a counter (rounded to whole units)
  const char* help;
};

/// Scalar and counter columns of the built-in collectors (system level).
struct KnownColumn {
  const char* column;
  KnownMetric metric;
};
const KnownColumn kKnownColumns[] = {
    {"memory",
     {"sonde_memory_used_bytes", Type::gauge, "bytes", kGiB, false,
      "Memory in use on the node (MemTotal - MemAvailable, or AnonPages + Mapped when "
      "larger)."}},
    {"cpu_util_avg",
     {"sonde_cpu_utilization_average_ratio", Type::gauge, "ratio", 0.01, false,
      "Mean busy fraction over all CPUs of the node during the last interval (0-1)."}},
    {"io_read_count",
     {"sonde_disk_reads_completed", Type::counter, "", 1, true,
      "Reads completed by the node's physical disks since sonde started."}},
    {"io_write_count",
     {"sonde_disk_writes_completed", Type::counter, "", 1, true,
      "Writes completed by the node's physical disks since sonde started."}},
    {"io_read",
     {"sonde_disk_read_bytes", Type::counter, "bytes", 1, true,
      "Bytes read from the node's physical disks since sonde started."}},
    {"io_write",
     {"sonde_disk_written_bytes", Type::counter, "bytes", 1, true,
      "Bytes written to the node's physical disks since sonde started."}},
    {"net_bytes_sent",
     {"sonde_network_transmit_bytes", Type::counter, "bytes", 1, true,
      "Bytes sent by the node's network interfaces since sonde started."}},
    {"net_bytes_recv",
     {"sonde_network_receive_bytes", Type::counter, "bytes", 1, true,
      "Bytes received by the node's network interfaces since sonde started."}},
    {"net_packets_sent",
     {"sonde_network_transmit_packets", Type::counter, "", 1, true,
      "Packets sent by the node's network interfaces since sonde started."}},
    {"net_packets_recv",
     {"sonde_network_receive_packets", Type::counter, "", 1, true,
      "Packets received by the node's network interfaces since sonde started."}},
    {"num_procs", {"sonde_processes", Type::gauge, "", 1, false, "Processes on the node."}},
};

/// Per-device columns "<prefix><N>" (the prefix's avg/min/max columns are left out: PromQL
/// computes them from the per-device series).
struct KnownPrefix {
  const char* prefix;
  const char* label;
  KnownMetric metric;
};
const KnownPrefix kKnownPrefixes[] = {
    {"cpu_util_",
     "cpu",
     {"sonde_cpu_utilization_ratio", Type::gauge, "ratio", 0.01, false,
      "Busy fraction of one CPU during the last interval (0-1)."}},
    {"gpu_util_",
     "gpu",
     {"sonde_gpu_utilization_ratio", Type::gauge, "ratio", 0.01, false,
      "Fraction of the last interval in which a kernel ran on the GPU (0-1)."}},
    {"gpu_band_",
     "gpu",
     {"sonde_gpu_memory_bandwidth_utilization_ratio", Type::gauge, "ratio", 0.01, false,
      "Fraction of the last interval in which GPU memory was read or written (0-1)."}},
    {"gpu_mem_",
     "gpu",
     {"sonde_gpu_memory_used_bytes", Type::gauge, "bytes", kGiB, false, "GPU memory in use."}},
    {"gpu_power_",
     "gpu",
     {"sonde_gpu_power_watts", Type::gauge, "watts", 1, false, "GPU power draw."}},
    // The energy collector: entry N is the domain NodeInfo::energy.domains[N] (package-0, dram-0,
    // gpu-0, ...; docs/energy.md).
    {"energy_power_",
     "domain",
     {"sonde_energy_power_watts", Type::gauge, "watts", 1, false,
      "Power of an energy domain (RAPL package, core, uncore, dram, psys; a GPU) over the last "
      "interval."}},
    {"energy_joules_",
     "domain",
     {"sonde_energy_joules", Type::counter, "joules", 1, false,
      "Energy used by an energy domain since sonde started (RAPL, NVML, ROCm SMI counters)."}},
};

std::optional<std::size_t> device_index(std::string_view column, std::string_view prefix) {
  if (column.size() <= prefix.size() || column.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  const std::string_view rest = column.substr(prefix.size());
  std::size_t n = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  if (ec != std::errc() || p != rest.data() + rest.size()) return std::nullopt;
  return n;
}

bool is_aggregate(std::string_view column, std::string_view prefix) {
  if (column.size() <= prefix.size() || column.substr(0, prefix.size()) != prefix) return false;
  const std::string_view rest = column.substr(prefix.size());
  return rest == "avg" || rest == "min" || rest == "max";
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

double RateIntegrator::add(double rate, double time_s, double scale) {
  if (!std::isfinite(rate)) return total;
  if (started) {
    const double dt = time_s - last_good_s;
    if (rate > 0 && dt > 0) total += std::round(rate * dt * scale);
  }
  started = true;
  last_good_s = time_s;
  return total;
}

struct Exporter::ColumnMap {
  std::size_t column = 0;  ///< index in the system row
  std::size_t family = 0;
  std::size_t sample = 0;
  double scale = 1;
  bool integrate = false;
  RateIntegrator counter;
};

Exporter::~Exporter() = default;

namespace {
// Indices of the self-metric families, in the order they are created after the column families.
enum SelfFamily : std::size_t {
  kCollectorDuration,
  kCollectorCalls,
  kCollectorErrors,
  kCollectorDisabled,
  kCollectorAvailable,
  kTickDuration,
  kTicks,
  kTickTimestamp,
  kInterval,
  kScanDuration,
  kMemoryTotal,
  kBuildInfo,
  kNodeInfo,
  kSelfCount
};
}  // namespace

Exporter::Exporter(const Engine& engine, ExporterOptions options) : options_(options) {
  std::map<std::string, std::size_t> by_name;
  auto family = [&](const std::string& name, Type type, const std::string& unit,
                    const std::string& help) -> std::size_t {
    auto it = by_name.find(name);
    if (it != by_name.end()) return it->second;
    families_.push_back(Family{name, type, help, unit, {}});
    by_name.emplace(name, families_.size() - 1);
    return families_.size() - 1;
  };
  std::set<std::string> taken;  // names of the generic (plugin) families

  const auto& columns = engine.columns(Level::system);
  const NodeInfo& node = engine.node_info();
  for (const CollectorSlot& slot : engine.collectors()) {
    const std::size_t li = level_index(Level::system);
    if (!slot.at_level[li]) continue;
    for (std::size_t i = 0; i < slot.width[li]; ++i) {
      const std::size_t col = slot.offset[li] + i;
      const std::string& name = columns[col];
      ColumnMap m;
      m.column = col;
      const KnownMetric* known = nullptr;
      std::vector<Label> labels;
      for (const KnownColumn& k : kKnownColumns)
        if (name == k.column) known = &k.metric;
      bool skip = false;
      if (!known) {
        for (const KnownPrefix& k : kKnownPrefixes) {
          if (auto n = device_index(name, k.prefix)) {
            known = &k.metric;
            int id = static_cast<int>(*n);
            if (std::string_view(k.label) == "cpu" && *n < node.system_cpu_ids.size())
              id = node.system_cpu_ids[*n];
            if (std::string_view(k.label) == "domain" && *n < node.energy.domains.size())
              labels.push_back({k.label, node.energy.domains[*n]});
            else
              labels.push_back({k.label, std::to_string(id)});
            break;
          }
          if (is_aggregate(name, k.prefix) && name != "cpu_util_avg") {
            skip = true;
            break;
          }
        }
      }
      if (skip) continue;
      if (known) {
        m.family = family(known->name, known->type, known->unit, known->help);
        m.scale = known->scale;
        m.integrate = known->integrate;
      } else {
        // Any other column (plugins, collectors this table does not know): a gauge in the
        // column's own unit, named after its collector and column.
        const bool builtin = slot.info != nullptr;
        std::string fname =
            sanitize_name(std::string(builtin ? "sonde_builtin_" : "sonde_plugin_") +
                          slot.spec.name + "_" + name);
        if (ends_with(fname, "_total") || ends_with(fname, "_info") || ends_with(fname, "_created"))
          fname += "_value";
        std::string unique = fname;
        for (int k = 2; taken.count(unique) || by_name.count(unique); ++k)
          unique = fmt::format("{}_{}", fname, k);
        taken.insert(unique);
        m.family = family(unique, Type::gauge, "",
                          fmt::format("Column {} of collector {} ({}), as sonde records it.", name,
                                      slot.spec.name, slot.spec.target));
      }
      m.sample = families_[m.family].samples.size();
      families_[m.family].samples.push_back(Sample{std::move(labels), kNaN});
      maps_.push_back(m);
    }
  }

  // Self-metrics: one sample per collector for the per-collector families.
  const std::size_t first_self = families_.size();
  families_.push_back({"sonde_collector_duration_seconds", Type::counter,
                       "Time spent in each collector (snapshot, collect, handle).", "seconds"});
  families_.push_back(
      {"sonde_collector_calls", Type::counter, "Ticks in which each collector was called.", ""});
  families_.push_back({"sonde_collector_errors", Type::counter,
                       "Failed or late collect calls of each collector.", ""});
  families_.push_back({"sonde_collector_disabled", Type::gauge,
                       "1 when the collector was disabled after repeated failures.", ""});
  families_.push_back({"sonde_collector_available", Type::gauge,
                       "1 when the collector can work on this node (0: absent, e.g. no GPU).", ""});
  families_.push_back({"sonde_tick_duration_seconds", Type::gauge,
                       "Wall time of the last sampling tick.", "seconds"});
  families_.push_back({"sonde_ticks", Type::counter, "Sampling ticks since sonde started.", ""});
  families_.push_back({"sonde_tick_timestamp_seconds", Type::gauge,
                       "Wall-clock time (Unix epoch) of the last sampling tick.", "seconds"});
  families_.push_back({"sonde_sampling_interval_seconds", Type::gauge,
                       "Interval between two sampling ticks.", "seconds"});
  families_.push_back(
      {"sonde_proc_scan_duration_seconds", Type::counter, "Time spent scanning /proc.", "seconds"});
  families_.push_back(
      {"sonde_memory_total_bytes", Type::gauge, "Memory of the node (MemTotal).", "bytes"});
  families_.push_back({"sonde_build", Type::info, "Version of the sonde exporter.", ""});
  families_.push_back(
      {"sonde_node", Type::info, "The node's host name (to name a scrape target's instance).", ""});
  for (const CollectorSlot& slot : engine.collectors())
    for (std::size_t k = kCollectorDuration; k <= kCollectorAvailable; ++k)
      families_[first_self + k].samples.push_back({{{"collector", slot.spec.name}}, 0});
  for (std::size_t k = kTickDuration; k < kBuildInfo; ++k)
    families_[first_self + k].samples.push_back({{}, kNaN});
  families_[first_self + kBuildInfo].samples.push_back({{{"version", SONDE_VERSION}}, 1});
  families_[first_self + kNodeInfo].samples.push_back({{{"nodename", node.hostname}}, 1});
  families_[first_self + kMemoryTotal].samples[0].value = static_cast<double>(node.mem_total_bytes);
  families_[first_self + kInterval].samples[0].value = engine.interval_s();
  fixed_families_ = families_.size();
}

void Exporter::update(const Engine& engine, const Engine::Tick& tick, double tick_s,
                      const OwnerUsage* owners, const std::vector<MigSeries>* mig) {
  ++ticks_;
  const auto& row = tick.rows[level_index(Level::system)];
  for (ColumnMap& m : maps_) {
    const double v = m.column < row.size() ? row[m.column] : kNaN;
    double& out = families_[m.family].samples[m.sample].value;
    if (!m.integrate) {
      // A counter keeps its last value while its source is not measured (a domain gone).
      if (std::isnan(v) && families_[m.family].type == Type::counter) continue;
      out = v * m.scale;
      continue;
    }
    // A counter not measured yet starts at 0.
    out = m.counter.add(v, tick.ctx.time_s, m.scale);
  }

  const std::size_t first_self = fixed_families_ - kSelfCount;
  const auto& slots = engine.collectors();
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const CollectorSlot& s = slots[i];
    families_[first_self + kCollectorDuration].samples[i].value = s.total_s;
    families_[first_self + kCollectorCalls].samples[i].value = static_cast<double>(s.calls);
    families_[first_self + kCollectorErrors].samples[i].value = static_cast<double>(s.errors);
    families_[first_self + kCollectorDisabled].samples[i].value =
        s.state == CollectorState::disabled || s.state == CollectorState::failed ? 1 : 0;
    families_[first_self + kCollectorAvailable].samples[i].value =
        s.state == CollectorState::unavailable ? 0 : 1;
  }
  families_[first_self + kTickDuration].samples[0].value = tick_s;
  families_[first_self + kTicks].samples[0].value = static_cast<double>(engine.ticks());
  families_[first_self + kTickTimestamp].samples[0].value = tick.ctx.wallclock_s;
  families_[first_self + kScanDuration].samples[0].value = engine.scan_s();

  families_.resize(fixed_families_);
  if (mig && !mig->empty()) add_mig_families(*mig);
  if (!owners) return;
  Family folded{"sonde_series_folded",
                Type::gauge,
                "Label values that exist now but are summed into the \"other\" series "
                "(over --max-series).",
                "",
                {}};
  if (options_.per_user) {
    Family cpu{"sonde_user_cpu_seconds",
               Type::counter,
               "CPU time (user + system) of the processes of each user since sonde first saw "
               "them; users beyond --max-series are summed in user=\"other\".",
               "seconds",
               {}};
    Family rss{"sonde_user_memory_rss_bytes",
               Type::gauge,
               "Resident memory of the processes of each user.",
               "bytes",
               {}};
    Family procs{"sonde_user_processes", Type::gauge, "Processes of each user.", "", {}};
    for (const OwnerSeries& s : owners->users) {
      cpu.samples.push_back({{{"user", s.key}}, s.cpu_seconds_total});
      rss.samples.push_back({{{"user", s.key}}, s.rss_bytes});
      procs.samples.push_back({{{"user", s.key}}, s.processes});
    }
    families_.push_back(std::move(cpu));
    families_.push_back(std::move(rss));
    families_.push_back(std::move(procs));
    folded.samples.push_back({{{"label", "user"}}, static_cast<double>(owners->users_folded)});
  }
  if (options_.per_job) {
    add_job_families(owners->jobs);
    folded.samples.push_back({{{"label", "jobid"}}, static_cast<double>(owners->jobs_folded)});
  }
  families_.push_back(std::move(folded));
}

void Exporter::add_job_families(const std::vector<OwnerSeries>& jobs) {
  enum {
    kCpu,
    kCore,
    kCpus,
    kMemUsed,
    kMemLimit,
    kIoRead,
    kIoWritten,
    kProcs,
    kGpuUtil,
    kGpuMem,
    kGpuPower,
    kGpuEnergy,
    kCount
  };
  const char* const other = " Jobs beyond --max-series are summed in jobid=\"other\".";
  std::vector<Family> f(kCount);
  f[kCpu] = {"sonde_job_cpu_seconds",
             Type::counter,
             fmt::format("CPU time (user + system) of the Slurm job's processes on this node "
                         "since sonde first saw them.{}",
                         other),
             "seconds",
             {}};
  f[kCore] = {"sonde_job_cpu_core_seconds",
              Type::counter,
              "CPU time of the job's cgroup on one CPU (cgroup v1 cpuacct.usage_percpu), since "
              "sonde first saw the job.",
              "seconds",
              {}};
  f[kCpus] = {"sonde_job_cpus",
              Type::gauge,
              "CPUs allocated to the job on this node (its cgroup's cpuset.cpus.effective, else "
              "SLURM_CPUS_ON_NODE).",
              "",
              {}};
  f[kMemUsed] = {"sonde_job_memory_used_bytes",
                 Type::gauge,
                 "Resident memory (RSS) of the job's processes on this node.",
                 "bytes",
                 {}};
  f[kMemLimit] = {"sonde_job_memory_limit_bytes",
                  Type::gauge,
                  "Memory limit of the job on this node (cgroup memory.max or "
                  "memory.limit_in_bytes, else SLURM_MEM_PER_NODE); absent when unlimited.",
                  "bytes",
                  {}};
  f[kIoRead] = {"sonde_job_io_read_bytes",
                Type::counter,
                "Bytes the job's processes read from storage (/proc/<pid>/io read_bytes) since "
                "sonde first saw them.",
                "bytes",
                {}};
  f[kIoWritten] = {"sonde_job_io_written_bytes",
                   Type::counter,
                   "Bytes the job's processes sent to storage (/proc/<pid>/io write_bytes) since "
                   "sonde first saw them.",
                   "bytes",
                   {}};
  f[kProcs] = {"sonde_job_processes", Type::gauge, "Processes of the job on this node.", "", {}};
  f[kGpuUtil] = {"sonde_job_gpu_utilization_ratio",
                 Type::gauge,
                 "Utilisation of a GPU by the job's processes over the last interval (their SM "
                 "use where the driver gives it per process, else the device's) (0-1).",
                 "ratio",
                 {}};
  f[kGpuMem] = {"sonde_job_gpu_memory_used_bytes",
                Type::gauge,
                "GPU memory held by the job's processes.",
                "bytes",
                {}};
  f[kGpuPower] = {"sonde_job_gpu_power_watts",
                  Type::gauge,
                  "The job's share of a GPU's power draw (by its share of the utilisation, else "
                  "of the memory).",
                  "watts",
                  {}};
  f[kGpuEnergy] = {"sonde_job_gpu_energy_joules",
                   Type::counter,
                   "The job's share of a GPU's energy since sonde first saw it on the GPU.",
                   "joules",
                   {}};
  for (const OwnerSeries& s : jobs) {
    std::vector<Label> id{{"jobid", s.key}};
    if (!s.user.empty()) id.push_back({"user", s.user});
    auto with = [&](const char* name, int n) {
      std::vector<Label> l = id;
      l.push_back({name, std::to_string(n)});
      return l;
    };
    f[kCpu].samples.push_back({id, s.cpu_seconds_total});
    for (const auto& [cpu, sec] : s.core_seconds_total)
      f[kCore].samples.push_back({with("cpu", cpu), sec});
    if (s.cpus) f[kCpus].samples.push_back({id, *s.cpus});
    f[kMemUsed].samples.push_back({id, s.rss_bytes});
    if (s.memory_limit_bytes) f[kMemLimit].samples.push_back({id, *s.memory_limit_bytes});
    f[kIoRead].samples.push_back({id, s.io_read_bytes_total});
    f[kIoWritten].samples.push_back({id, s.io_written_bytes_total});
    f[kProcs].samples.push_back({id, s.processes});
    for (const GpuSeries& g : s.gpus) {
      f[kGpuUtil].samples.push_back({with("gpu", g.gpu), g.utilization_ratio});
      f[kGpuMem].samples.push_back({with("gpu", g.gpu), g.memory_bytes});
      f[kGpuPower].samples.push_back({with("gpu", g.gpu), g.power_watts});
      f[kGpuEnergy].samples.push_back({with("gpu", g.gpu), g.energy_joules_total});
    }
  }
  for (Family& fam : f) families_.push_back(std::move(fam));
}

void Exporter::add_mig_families(const std::vector<MigSeries>& mig) {
  Family used{"sonde_gpu_mig_memory_used_bytes",
              Type::gauge,
              "Memory in use on a MIG device (a GPU instance's compute instance) of a GPU in MIG "
              "mode; labels as dcgm-exporter's: gpu, GPU_I_ID, GPU_I_PROFILE.",
              "bytes",
              {}};
  Family total{"sonde_gpu_mig_memory_total_bytes",
               Type::gauge,
               "Memory of a MIG device (its GPU instance's slice).",
               "bytes",
               {}};
  Family procs{
      "sonde_gpu_mig_processes", Type::gauge, "Compute processes running on a MIG device.", "", {}};
  Family util{"sonde_gpu_mig_utilization_ratio",
              Type::gauge,
              "Utilisation of a MIG device where the driver gives it (NVML does not: then no "
              "sample) (0-1).",
              "ratio",
              {}};
  for (const MigSeries& m : mig) {
    std::vector<Label> l{
        {"gpu", std::to_string(m.gpu)},
        {"GPU_I_ID", m.gpu_instance_id >= 0 ? std::to_string(m.gpu_instance_id) : std::string()},
        {"GPU_I_PROFILE", m.profile},
        {"CI_ID",
         m.compute_instance_id >= 0 ? std::to_string(m.compute_instance_id) : std::string()},
        {"UUID", m.uuid}};
    used.samples.push_back({l, m.memory_used_bytes});
    total.samples.push_back({l, m.memory_total_bytes});
    if (!std::isnan(m.processes)) procs.samples.push_back({l, m.processes});
    if (!std::isnan(m.utilization_ratio)) util.samples.push_back({l, m.utilization_ratio});
  }
  families_.push_back(std::move(used));
  families_.push_back(std::move(total));
  if (!procs.samples.empty()) families_.push_back(std::move(procs));
  if (!util.samples.empty()) families_.push_back(std::move(util));
}

}  // namespace sonde::prom
