// `sonde top`'s snapshot of the node (top_collect.hpp).
#include "views/top_collect.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "core/clock.hpp"
#include "core/fs.hpp"
#include "core/pid_reads.hpp"
#include "core/slurm_job.hpp"
#include "views/status_plugins/builtin.hpp"

namespace sonde::top {
namespace {

std::optional<double> node_number(const status::StatusData& d, const std::string& plugin,
                                  const std::string& key) {
  for (const auto& pf : d.node_fields)
    if (pf.plugin == plugin)
      if (const auto* f = status::find_field(pf.fields, key); f && f->number) return *f->number;
  return std::nullopt;
}

void split_lines(const std::string& text, std::vector<std::string>& out) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

// A file of a live process that cannot be opened: not ours to read (EACCES/EPERM); a process
// that is gone reads as Errc::vanished.
bool denied(const Error& e) {
  return e.code == Errc::io;
}

// What `sonde status` calls a process's command: the base name of argv[0]; the kernel's name
// for a process without a command line (a kernel thread, a zombie).
std::string argv0_name(const ProcRow& r) {
  if (r.command.empty() || r.command.front() == '[') return r.comm;
  std::string first = r.command.substr(0, r.command.find(' '));
  if (auto slash = first.rfind('/'); slash != std::string::npos) first.erase(0, slash + 1);
  return first.empty() ? r.comm : first;
}

}  // namespace

Collector::Collector(gpu::Gpus& gpus, status::StatusHooks& hooks, CollectOptions options)
    : gpus_(gpus), hooks_(hooks), options_(std::move(options)) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
  // Whole physical disks, as the io collector counts them (partitions would count twice).
  if (auto names = list_dir(options_.sys_root + "/block")) {
    for (const auto& n : *names) {
      auto link = read_link(options_.sys_root + "/block/" + n);
      if (link && procfs::is_physical_block_link(*link)) disks_.push_back(n);
    }
  }
  slurm_cgroups_ = node_has_slurm_cgroups(Roots{options_.proc_root, options_.sys_root});
}

// What is read once per process (and again after an exec): user, namespace pid, command line,
// Slurm job and container.
void Collector::learn(int pid, const std::string& dir, Known& k) {
  if (auto text = read_file(dir + "/status")) {
    if (auto st = procfs::parse_pid_status(*text)) {
      k.uid = st->uid_real;
      k.ns_pid = st->ns_pids.size() > 1 ? st->ns_pids.back() : 0;
    }
  }
  k.user = status::user_name(k.uid);
  k.command.clear();
  if (auto cmd = read_file(dir + "/cmdline")) {
    for (const auto& a : split_nul(*cmd)) k.command += (k.command.empty() ? "" : " ") + a;
  }
  if (k.command.empty()) k.command = "[" + k.comm + "]";  // a kernel thread or a zombie
  std::string cgroup_text;
  const JobAttribution job = slurm_job_of_process(dir, slurm_cgroups_, nullptr, &cgroup_text);
  k.job = job.job.value_or("");
  k.container.clear();
  if (auto entries = procfs::parse_pid_cgroup(cgroup_text)) {
    for (const auto& e : *entries)
      if (auto c = status::container_of_cgroup(e.path)) {
        k.container = c->label();
        break;
      }
  }
  (void)pid;
}

void Collector::add_plugin_fields(status::StatusData& data, std::vector<ProcRow>& procs) {
  // Every process to the status plugins that add to all of them (host_processes, ABI 1.2); a
  // plugin without that hook costs nothing here.
  if (!hooks_.has_host_processes()) return;
  std::vector<status::ProcessRow> rows(procs.size());
  for (std::size_t i = 0; i < procs.size(); ++i) {
    const ProcRow& r = procs[i];
    status::ProcessRow& p = rows[i];
    p.pid = r.pid;
    p.user = r.user;
    p.command = argv0_name(r);
    p.gpu_memory_bytes = r.gpu_mem_bytes;
    p.cpu_percent = r.cpu_percent;
    p.rss_bytes = r.rss_bytes;
    p.fields = r.fields;
  }
  hooks_.host_processes(data, rows);
  for (std::size_t i = 0; i < procs.size(); ++i) procs[i].fields = std::move(rows[i].fields);
}

Snapshot Collector::collect() {
  Snapshot s;
  const double now = monotonic_now();
  const double dt = prev_time_ >= 0 ? now - prev_time_ : 0;
  s.interval_s = dt;

  // GPUs, their processes and the status plugins (host memory, load, power; their lines).
  status::QueryOptions qo;
  qo.proc_root = options_.proc_root;
  qo.cpu_interval_s = 0;  // top's CPU figures are over the refresh interval, below
  status::StatusData data = status::query_status(gpus_, hooks_, qo);
  s.hostname = data.hostname;
  s.time = data.query_time;
  s.nvidia_driver = data.nvidia_driver;
  s.amd_driver = data.amd_driver;
  s.notes = data.notes;
  s.mem_total_bytes = node_number(data, "host", "mem_total_bytes");
  s.mem_used_bytes = node_number(data, "host", "mem_used_bytes");
  s.swap_total_bytes = node_number(data, "host", "swap_total_bytes");
  s.swap_used_bytes = node_number(data, "host", "swap_used_bytes");
  s.load1 = node_number(data, "host", "load1");
  s.load5 = node_number(data, "host", "load5");
  s.load15 = node_number(data, "host", "load15");
  s.cpu_package_power_w = node_number(data, "host", "cpu_package_power_w");
  s.gpu_power_w = node_number(data, "host", "gpu_power_w");
  split_lines(hooks_.print_header(), s.plugin_lines);
  split_lines(hooks_.print_footer(), s.plugin_lines);

  // GPU history (utilisation), per device.
  for (const auto& g : data.gpus) {
    const std::string key =
        g.device.uuid.empty() ? g.device.vendor + std::to_string(g.device.index) : g.device.uuid;
    auto& h = history_[key];
    // No sample where the driver gives none (a GPU in MIG mode): never drawn as 0.
    if (!g.device.error && g.device.util_gpu) h.push_back(*g.device.util_gpu);
    while (h.size() > options_.history) h.pop_front();
    s.gpu_history.emplace_back(h.begin(), h.end());
  }

  // Host CPUs.
  if (auto text = read_file(options_.proc_root + "/stat")) {
    if (auto cur = procfs::parse_proc_stat(*text)) {
      s.cpu_ids = cur->cpu_ids;
      s.core_percent.assign(cur->cpu_ids.size(), std::nullopt);
      if (prev_stat_) {
        if (auto shares = procfs::busy_shares(*prev_stat_, *cur, cur->cpu_ids)) {
          for (std::size_t i = 0; i < shares->size(); ++i)
            if ((*shares)[i]) s.core_percent[i] = 100.0 * *(*shares)[i];
        }
        const double total = static_cast<double>(cur->total.total()) -
                             static_cast<double>(prev_stat_->total.total());
        const double busy =
            static_cast<double>(cur->total.busy()) - static_cast<double>(prev_stat_->total.busy());
        if (total > 0) s.cpu_percent = std::clamp(100.0 * busy / total, 0.0, 100.0);
      }
      prev_stat_ = std::move(cur).value();
    }
  }
  // Network (not loopback) and whole disks.
  if (auto text = read_file(options_.proc_root + "/net/dev")) {
    if (auto devs = procfs::parse_net_dev(*text)) {
      double rx = 0, tx = 0;
      for (const auto& d : *devs)
        if (d.iface != "lo") {
          rx += static_cast<double>(d.rx_bytes);
          tx += static_cast<double>(d.tx_bytes);
        }
      if (prev_net_ && dt > 0) {
        s.net_rx_bps = std::max(0.0, rx - prev_net_->first) / dt;
        s.net_tx_bps = std::max(0.0, tx - prev_net_->second) / dt;
      }
      prev_net_ = {rx, tx};
    }
  }
  if (auto text = read_file(options_.proc_root + "/diskstats")) {
    if (auto stats = procfs::parse_diskstats(*text)) {
      double rd = 0, wr = 0;
      for (const auto& d : *stats)
        if (std::find(disks_.begin(), disks_.end(), d.name) != disks_.end()) {
          rd += static_cast<double>(d.sectors_read) * 512.0;
          wr += static_cast<double>(d.sectors_written) * 512.0;
        }
      if (prev_disk_ && dt > 0) {
        s.disk_read_bps = std::max(0.0, rd - prev_disk_->first) / dt;
        s.disk_write_bps = std::max(0.0, wr - prev_disk_->second) / dt;
      }
      prev_disk_ = {rd, wr};
    }
  }

  // Every process.
  list_pids(options_.proc_root, listing_);
  std::unordered_map<int, Known> seen;
  seen.reserve(listing_.size());
  s.procs.reserve(listing_.size());
  for (const int pid : listing_) {
    auto st = read_pid(options_.proc_root, pid);
    if (!st) continue;  // gone
    const std::string dir = options_.proc_root + "/" + std::to_string(pid);
    Known k;
    auto it = known_.find(pid);
    const bool same = it != known_.end() && it->second.starttime_ticks == st->starttime_ticks;
    if (same) k = std::move(it->second);
    const bool zombie = st->state == 'Z' || st->start_stack == 0;
    if (!same || (!zombie && (st->comm != k.comm || st->start_stack != k.exec_mark))) {
      k.starttime_ticks = st->starttime_ticks;
      k.exec_mark = st->start_stack;
      k.comm = st->comm;
      learn(pid, dir, k);
    }
    ProcRow r;
    r.pid = pid;
    r.ppid = st->ppid;
    r.uid = k.uid;
    r.user = k.user;
    r.job = k.job;
    r.container = k.container;
    r.ns_pid = k.ns_pid;
    r.comm = st->comm;
    r.command = k.command;
    r.starttime_ticks = st->starttime_ticks;
    r.rss_bytes = st->rss_bytes;
    if (same && dt > 0 && st->cpu_ticks >= k.cpu_ticks)
      r.cpu_percent = static_cast<double>(st->cpu_ticks - k.cpu_ticks) / clk_tck_ / dt * 100.0;
    // What costs most per process is read only where it can have changed, and at least every
    // kRereadEvery refreshes (staggered by pid): Pss when the RSS changed, the I/O counters when
    // the process ran (its CPU ticks grew) or waits on I/O (state D).
    const bool turn = (refresh_ + static_cast<std::uint64_t>(pid)) % kRereadEvery == 0;
    const bool ran = !same || st->cpu_ticks != k.cpu_ticks || st->state == 'D';
    k.cpu_ticks = st->cpu_ticks;
    // Pss: shared pages counted once (not for kernel threads, which map nothing).
    if (st->rss_bytes == 0) r.pss_bytes = 0;  // nothing mapped: 0, not unknown
    if (st->rss_bytes > 0 && !k.pss_denied) {
      if (!k.pss || k.pss_rss != st->rss_bytes || turn) {
        auto text = read_file(dir + "/smaps_rollup");
        if (text) {
          if (auto p = procfs::parse_pid_smaps_rollup(*text)) {
            k.pss = p->pss_bytes;
            k.pss_rss = st->rss_bytes;
          }
        } else if (denied(text.error())) {
          k.pss_denied = true;
          k.pss.reset();
        }
      }
      r.pss_bytes = k.pss;
    }
    if (!k.io_denied) {
      if (!k.io || ran || turn) {
        auto text = read_file(dir + "/io");
        if (text) {
          if (auto io = procfs::parse_pid_io(*text)) {
            // Over the time since the counters were last read (one refresh, or a few for a
            // process that did not run meanwhile).
            const double span = now - k.io_time;
            if (same && k.io && span > 0) {
              r.read_bps = static_cast<double>(io->read_bytes >= k.io->read_bytes
                                                   ? io->read_bytes - k.io->read_bytes
                                                   : 0) /
                           span;
              r.write_bps = static_cast<double>(io->write_bytes >= k.io->write_bytes
                                                    ? io->write_bytes - k.io->write_bytes
                                                    : 0) /
                            span;
            }
            k.io = *io;
            k.io_time = now;
          }
        } else if (denied(text.error())) {
          k.io_denied = true;
        }
      } else if (same && dt > 0) {
        r.read_bps = r.write_bps = 0.0;  // it did not run since the last refresh
      }
    }
    s.threads += static_cast<std::size_t>(std::max(0L, st->num_threads));
    if (st->state == 'R') ++s.running;
    s.procs.push_back(std::move(r));
    seen.emplace(pid, std::move(k));
  }
  known_ = std::move(seen);
  ++refresh_;

  // GPU figures and the plugins' fields of the GPU processes.
  std::unordered_map<int, std::size_t> at;
  for (std::size_t i = 0; i < s.procs.size(); ++i) at.emplace(s.procs[i].pid, i);
  for (const auto& g : data.gpus) {
    if (!g.processes) continue;
    for (const auto& p : *g.processes) {
      auto found = at.find(p.pid);
      if (found == at.end()) continue;
      ProcRow& r = s.procs[found->second];
      if (p.gpu_memory_bytes) r.gpu_mem_bytes = r.gpu_mem_bytes.value_or(0) + *p.gpu_memory_bytes;
      if (p.sm_util) r.gpu_sm_percent = r.gpu_sm_percent.value_or(0) + *p.sm_util;
      if (std::find(r.gpus.begin(), r.gpus.end(), g.device.index) == r.gpus.end())
        r.gpus.push_back(g.device.index);
      for (const auto& f : p.fields) status::set_field(r.fields, f);
    }
  }
  add_plugin_fields(data, s.procs);
  s.gpus = std::move(data.gpus);
  prev_time_ = now;
  return s;
}

}  // namespace sonde::top
