// `sonde top`'s snapshot of the node (top_collect.hpp).
#include "views/top_collect.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>

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

}  // namespace

bool periodic_turn(int pid, std::uint64_t refresh, std::uint64_t every) {
  return every <= 1 || (refresh + static_cast<std::uint64_t>(pid)) % every == 0;
}

bool stat_moved(const ReadMarks& m, const StatNow& st) {
  return st.cpu_ticks != m.cpu_ticks || st.faults != m.faults || st.rss_pages != m.rss_pages;
}

namespace {

std::uint64_t pss_every(const ReadMarks& m) {
  return pss::shares_much(m.rss_bytes, m.anon_bytes) ? kPssSharedEvery : pss::kFewSharedEvery;
}

}  // namespace

bool statm_due(const ReadMarks& m, const StatNow& st, int pid, std::uint64_t refresh) {
  return !m.statm_valid || stat_moved(m, st) || periodic_turn(pid, refresh, kStatmEvery) ||
         periodic_turn(pid, refresh, pss_every(m));
}

bool pss_due(const ReadMarks& m, std::uint64_t faults, int pid, std::uint64_t refresh) {
  if (pss::due_for_change(m.pss, refresh, faults, m.rss_bytes)) return true;
  const std::uint64_t gap = refresh - std::min(refresh, m.pss.at);
  return periodic_turn(pid, refresh, pss_every(m)) && gap >= 2 * pss::unit(m.rss_bytes);
}

std::uint64_t pss_estimate(const ReadMarks& m) {
  return pss::estimate(m.pss, m.rss_bytes, m.anon_bytes);
}

bool io_due(const ReadMarks& m, const StatNow& st, bool io_known, int pid, std::uint64_t refresh) {
  return !io_known || st.cpu_ticks != m.cpu_ticks || st.faults != m.faults || st.state == 'D' ||
         periodic_turn(pid, refresh, kIoEvery);
}

Collector::Collector(gpu::Gpus& gpus, status::StatusHooks& hooks, CollectOptions options)
    : gpus_(gpus), hooks_(hooks), options_(std::move(options)) {
  clk_tck_ = static_cast<double>(::sysconf(_SC_CLK_TCK));
  page_size_ = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  proc_fd_.reset(::open(options_.proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  buf_.resize(4096);
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
  k.argv.clear();
  if (auto cmd = read_file(dir + "/cmdline")) k.argv = split_nul(*cmd);
  for (const auto& a : k.argv) k.command += (k.command.empty() ? "" : " ") + a;
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
    // As `sonde status` names it; the kernel's name without a command line (a kernel thread).
    const auto k = known_.find(r.pid);
    p.command = k != known_.end() && !k->second.argv.empty() ? status::command_name(k->second.argv)
                                                             : r.comm;
    p.gpu_memory_bytes = r.gpu_mem_bytes;
    p.cpu_percent = r.cpu_percent;
    p.rss_bytes = r.rss_bytes;
    p.fields = r.fields;
  }
  hooks_.host_processes(data, rows);
  for (std::size_t i = 0; i < procs.size(); ++i) procs[i].fields = std::move(rows[i].fields);
}

long Collector::read_pid_file(int pid, const char* file) {
  char rel[64];
  std::snprintf(rel, sizeof rel, "%d/%s", pid, file);
  UniqueFd fd(::openat(proc_fd_.get(), rel, O_RDONLY | O_CLOEXEC));
  if (!fd) return -errno;
  return pread_all(fd.get(), buf_);
}

void Collector::mark_pss_stale(int pid) {
  auto it = known_.find(pid);
  if (it != known_.end()) it->second.marks.pss.stale = true;
}

Snapshot Collector::collect() {
  Snapshot s;
  const double now = monotonic_now();
  const double dt = prev_time_ >= 0 ? now - prev_time_ : 0;
  s.interval_s = dt;

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

  // Every process: its stat at each refresh (through a file kept open), what else it has once
  // (learn), its costlier files when they can have changed (ReadMarks).
  list_pids(options_.proc_root, listing_);
  s.procs.reserve(listing_.size());
  const std::uint64_t refresh = refresh_;
  for (const int pid : listing_) {
    auto [it, fresh] = known_.try_emplace(pid);
    Known* kp = &it->second;
    long n = -1;
    if (kp->stat_fd) {
      n = pread_all(kp->stat_fd.get(), buf_);
      // The process the file was opened for is gone (ESRCH): the pid is another's now.
      if (n <= 0) {
        --fds_open_;
        const int gone_ppid = kp->ppid;
        known_.erase(it);
        mark_pss_stale(gone_ppid);
        it = known_.try_emplace(pid).first;
        kp = &it->second;
        fresh = true;
      }
    }
    Known& k = *kp;
    if (!k.stat_fd) {
      char rel[32];
      std::snprintf(rel, sizeof rel, "%d/stat", pid);
      UniqueFd fd(::openat(proc_fd_.get(), rel, O_RDONLY | O_CLOEXEC));
      n = fd ? pread_all(fd.get(), buf_) : -1;
      if (n > 0 && fds_open_ < options_.keep_open) {
        k.stat_fd = std::move(fd);
        ++fds_open_;
      }
    }
    auto st =
        n > 0 ? procfs::parse_pid_stat(std::string_view(buf_.data(), static_cast<std::size_t>(n)))
              : Result<procfs::PidStat>(make_error(Errc::vanished, "gone"));
    if (!st) {  // gone
      if (!fresh) mark_pss_stale(k.ppid);
      if (k.stat_fd) --fds_open_;
      known_.erase(it);
      continue;
    }
    // A pid seen before with another start time: reused by a new process.
    const bool same = !fresh && k.starttime_ticks == st->starttime_ticks;
    if (!fresh && !same) {
      UniqueFd fd = std::move(k.stat_fd);
      k = Known{};
      k.stat_fd = std::move(fd);
    }
    if (!same && refresh > 0) mark_pss_stale(st->ppid);  // a fork shares its parent's pages
    k.seen = refresh;
    k.ppid = st->ppid;
    const bool zombie = st->state == 'Z' || st->start_stack == 0;
    if (!same || (!zombie && (st->comm != k.comm || st->start_stack != k.exec_mark))) {
      k.starttime_ticks = st->starttime_ticks;
      k.exec_mark = st->start_stack;
      k.comm = st->comm;
      learn(pid, options_.proc_root + "/" + std::to_string(pid), k);
    }
    const std::uint64_t cpu_ticks = st->utime_ticks + st->stime_ticks;
    const StatNow now_stat{cpu_ticks, st->minflt + st->majflt, st->rss_pages, st->state};
    ReadMarks& m = k.marks;
    ProcRow r;
    r.pid = pid;
    r.ppid = st->ppid;
    r.uid = k.uid;
    r.user = k.user;
    r.job = k.job;
    r.container = k.container;
    r.ns_pid = k.ns_pid;
    r.comm = std::move(st->comm);
    r.command = k.command;
    r.starttime_ticks = st->starttime_ticks;
    if (same && dt > 0 && cpu_ticks >= m.cpu_ticks)
      r.cpu_percent = static_cast<double>(cpu_ticks - m.cpu_ticks) / clk_tck_ / dt * 100.0;
    // Memory: statm's resident size is exact (stat's is per-CPU batched); read again when the
    // process moved (CPU, faults, stat's rss) and periodically (what the kernel reclaims).
    if (!same || statm_due(m, now_stat, pid, refresh)) {
      const long sm = read_pid_file(pid, "statm");
      auto statm =
          sm > 0
              ? procfs::parse_pid_statm(std::string_view(buf_.data(), static_cast<std::size_t>(sm)))
              : Result<procfs::PidStatm>(make_error(Errc::io, "unreadable"));
      m.rss_bytes = (statm ? statm->resident_pages : st->rss_pages) * page_size_;
      m.anon_bytes = statm ? m.rss_bytes - std::min(m.rss_bytes, statm->shared_pages * page_size_)
                           : m.rss_bytes;
      m.statm_valid = statm.ok();
    }
    r.rss_bytes = m.rss_bytes;
    // Pss: shared pages counted once (not for kernel threads, which map nothing).
    if (m.rss_bytes == 0) {
      r.pss_bytes = 0;  // nothing mapped: 0, not unknown
    } else if (!k.pss_denied) {
      if (pss_due(m, now_stat.faults, pid, refresh)) {
        const long pm = read_pid_file(pid, "smaps_rollup");
        if (pm == -EACCES || pm == -EPERM) k.pss_denied = true;
        auto rollup = pm > 0 ? procfs::parse_pid_smaps_rollup(
                                   std::string_view(buf_.data(), static_cast<std::size_t>(pm)))
                             : Result<procfs::PidSmapsRollup>(make_error(Errc::io, "unreadable"));
        m.pss.valid = rollup.ok();
        if (rollup) m.pss.bytes = rollup->pss_bytes;
        m.pss.stale = false;
        m.pss.at = refresh;
        m.pss.faults = now_stat.faults;
        m.pss.rss_bytes = m.rss_bytes;
        m.pss.anon_bytes = m.anon_bytes;
      }
      if (m.pss.valid) r.pss_bytes = pss_estimate(m);
    }
    // I/O: read when the process ran or waits on I/O, and periodically.
    if (!k.io_denied) {
      if (!same || io_due(m, now_stat, k.io.has_value(), pid, refresh)) {
        const long im = read_pid_file(pid, "io");
        if (im == -EACCES || im == -EPERM) k.io_denied = true;
        if (im > 0) {
          if (auto io = procfs::parse_pid_io(
                  std::string_view(buf_.data(), static_cast<std::size_t>(im)))) {
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
        }
      } else if (same && dt > 0) {
        r.read_bps = r.write_bps = 0.0;  // it did not run since the last refresh
      }
    }
    m.cpu_ticks = now_stat.cpu_ticks;
    m.faults = now_stat.faults;
    m.rss_pages = now_stat.rss_pages;
    s.threads += static_cast<std::size_t>(std::max(0L, st->num_threads));
    if (st->state == 'R') ++s.running;
    s.procs.push_back(std::move(r));
  }
  // Those not listed any more are gone: their parents' Pss divides anew.
  for (auto it = known_.begin(); it != known_.end();) {
    if (it->second.seen == refresh) {
      ++it;
      continue;
    }
    if (it->second.stat_fd) --fds_open_;
    const int ppid = it->second.ppid;
    it = known_.erase(it);
    mark_pss_stale(ppid);
  }
  ++refresh_;

  // GPUs, their processes and the status plugins (host memory, load, power; their lines).
  status::QueryOptions qo;
  qo.proc_root = options_.proc_root;
  qo.cpu_interval_s = 0;  // top's CPU figures are over the refresh interval, above
  // The GPU processes as read above (not read again for the query).
  qo.known_process = [this](int pid) -> std::optional<status::ProcInfo> {
    auto it = known_.find(pid);
    if (it == known_.end() || it->second.seen != refresh_ - 1) return std::nullopt;
    const Known& k = it->second;
    status::ProcInfo info;
    info.user = k.user;
    if (!k.argv.empty()) {
      info.command = status::command_name(k.argv);
      info.full_command = k.argv;
    } else {
      info.full_command.push_back(k.comm);
    }
    info.rss_bytes = k.marks.rss_bytes;
    info.cpu_ticks = k.marks.cpu_ticks;
    return info;
  };
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
