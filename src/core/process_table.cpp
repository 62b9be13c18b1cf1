#include "core/process_table.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/units.hpp"

namespace sonde {
namespace {

constexpr std::size_t kMaxUntrackedRemembered = 65536;
constexpr std::size_t kMaxCommandBytes = 512;

// /proc/<pid>/cmdline as one line: arguments joined by spaces, cut at kMaxCommandBytes; "" when
// it cannot be read (gone, a kernel thread).
std::string command_line(const std::string& proc_root, int pid) {
  auto text = read_file(fmt::format("{}/{}/cmdline", proc_root, pid));
  if (!text) return {};
  std::string out = *text;
  while (!out.empty() && out.back() == '\0') out.pop_back();
  std::replace(out.begin(), out.end(), '\0', ' ');
  if (out.size() > kMaxCommandBytes) out.resize(kMaxCommandBytes);
  return out;
}

double io_growth(const PidSample& p, std::uint64_t procfs::PidIo::*field) {
  const double grown = static_cast<double>(p.io_delta.*field);
  const double known = static_cast<double>(p.io_reaped_known.*field);
  return std::max(0.0, grown - known);
}

}  // namespace

ProcessTable::ProcessTable(std::string proc_root, std::size_t max_tracked)
    : proc_root_(std::move(proc_root)), max_tracked_(max_tracked) {}

void ProcessTable::add(const ProcSnapshot& snap, Level level, double time_s) {
  ++ticks_;
  for (std::uint32_t i : snap.members[level_index(level)]) {
    const PidSample& p = snap.pids[i];
    const auto key = std::make_pair(p.pid, p.starttime_ticks);
    const double cpu = p.cpu_delta_s + p.reaped_cpu_s;
    const double read = p.io_valid ? io_growth(p, &procfs::PidIo::read_bytes) : 0;
    const double written = p.io_valid ? io_growth(p, &procfs::PidIo::write_bytes) : 0;
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (entries_.size() >= max_tracked_) {
        if (untracked_seen_.size() < kMaxUntrackedRemembered && untracked_seen_.insert(key).second)
          ++untracked_.count;
        untracked_.cpu_s += cpu;
        untracked_.read_bytes += read;
        untracked_.written_bytes += written;
        continue;
      }
      Entry e;
      e.pid = p.pid;
      e.ppid = p.ppid;
      e.comm = std::string(p.comm());
      e.command = command_line(proc_root_, p.pid);
      e.first_s = time_s;
      it = entries_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    // An exec (a shell's child becoming the program, a launcher's shim): the name changes, and
    // the command line is read again, so that the table names what the process became.
    if (e.comm != p.comm()) {
      e.comm = std::string(p.comm());
      if (std::string cmd = command_line(proc_root_, p.pid); !cmd.empty()) e.command = cmd;
    }
    e.cpu_s += cpu;
    e.pss_peak = std::max(e.pss_peak, p.pss_bytes);
    e.rss_peak = std::max(e.rss_peak, p.rss_bytes);
    if (p.io_valid) {
      e.io_valid = true;
      e.read_bytes += read;
      e.written_bytes += written;
    }
    e.last_s = time_s;
    e.last_tick = ticks_;
  }
}

nlohmann::json ProcessTable::row(const Entry& e, bool alive) {
  return {{"pid", e.pid},
          {"ppid", e.ppid},
          {"comm", e.comm},
          {"command", e.command.empty() ? "[" + e.comm + "]" : e.command},
          {"cpu_s", e.cpu_s},
          {"memory_peak_gib", static_cast<double>(e.pss_peak) / kGiB},
          {"rss_peak_gib", static_cast<double>(e.rss_peak) / kGiB},
          {"read_bytes", e.io_valid ? nlohmann::json(e.read_bytes) : nlohmann::json()},
          {"written_bytes", e.io_valid ? nlohmann::json(e.written_bytes) : nlohmann::json()},
          {"first_s", e.first_s},
          {"last_s", e.last_s},
          {"alive", alive}};
}

nlohmann::json ProcessTable::json(std::size_t top) const {
  std::vector<const Entry*> order;
  order.reserve(entries_.size());
  for (const auto& [key, e] : entries_) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    if (a->cpu_s != b->cpu_s) return a->cpu_s > b->cpu_s;
    return a->pss_peak > b->pss_peak;
  });
  nlohmann::json rows = nlohmann::json::array();
  Folded rest = untracked_;
  double rest_pss = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Entry& e = *order[k];
    if (k < top) {
      rows.push_back(row(e, e.last_tick == ticks_));
      continue;
    }
    ++rest.count;
    rest.cpu_s += e.cpu_s;
    rest.read_bytes += e.read_bytes;
    rest.written_bytes += e.written_bytes;
    rest_pss = std::max(rest_pss, static_cast<double>(e.pss_peak));
  }
  nlohmann::json others;
  if (rest.count)
    others = {{"count", rest.count},
              {"cpu_s", rest.cpu_s},
              {"memory_peak_gib", rest_pss / kGiB},
              {"read_bytes", rest.read_bytes},
              {"written_bytes", rest.written_bytes}};
  double sum = untracked_.cpu_s;
  for (const auto& [key, e] : entries_) sum += e.cpu_s;
  return {{"count", entries_.size() + untracked_.count},
          {"cpu_s_sum", sum},
          {"shown", rows.size()},
          {"processes", rows},
          {"others", others}};
}

}  // namespace sonde
