// io: read/write operations and bytes as cumulative counters (CumulativeRateHandler makes rates).
// Pid levels: /proc/<pid>/io (syscr, syscw, read_bytes, write_bytes) of the level's members,
// summed as the growth of each member since the previous tick, so a process leaving the level
// never makes the sum go back. A parent's counters also grow by a child's whole life when it
// reaps the child: what sonde already counted of the child (its last-read counters) is taken off
// that growth, so each byte counts once (see PidSample::io_reaped_known). A level with a member
// whose counters sonde may not read (another user's process) is not measured: empty columns.
// System level: /proc/diskstats of whole physical disks (partitions and virtual devices would
// count the same bytes twice).
#include <algorithm>
#include <array>
#include <functional>

#include <fmt/format.h>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {
constexpr double kSectorBytes = 512.0;

class IoCollector final : public Collector {
 public:
  IoCollector(const Roots& roots, std::function<void(const std::string&)> warn,
              std::function<void(const std::string&)> note)
      : roots_(roots), warn_(std::move(warn)), note_(std::move(note)) {}

  Result<void> setup() override {
    auto names = list_dir(roots_.sys + "/block");
    if (names) {
      for (const auto& n : *names) {
        auto link = read_link(roots_.sys + "/block/" + n);
        if (link && procfs::is_physical_block_link(*link)) disks_.push_back(n);
      }
    }
    return {};
  }

  ScanNeeds needs() const override { return {.io = true, .threads = false}; }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level == Level::system) return collect_disks();
    auto& raw = raw_[level_index(level)];
    auto& shown = shown_[level_index(level)];
    std::size_t denied = 0, readable = 0;
    int denied_pid = 0;
    for (auto i : members(ctx, level)) {
      const PidSample& p = ctx.procs->pids[i];
      if (p.io_denied) {
        ++denied;
        denied_pid = p.pid;
      } else if (p.io_valid) {
        ++readable;
      }
      if (!p.io_valid) continue;
      const procfs::PidIo& d = p.io_delta;
      const procfs::PidIo& k = p.io_reaped_known;
      raw[0] += static_cast<double>(d.syscr) - static_cast<double>(k.syscr);
      raw[1] += static_cast<double>(d.syscw) - static_cast<double>(k.syscw);
      raw[2] += static_cast<double>(d.read_bytes) - static_cast<double>(k.read_bytes);
      raw[3] += static_cast<double>(d.write_bytes) - static_cast<double>(k.write_bytes);
    }
    // A reap can show in stat (where it is matched) a read before it shows in io: the sum may
    // dip for a tick, and the counters shown never go back.
    for (std::size_t c = 0; c < 4; ++c) shown[c] = std::max(shown[c], raw[c]);
    Counters out{{shown.begin(), shown.end()}};
    // The process tree is measured whole or not at all; a user or job level with some unreadable
    // members (other users' processes in the job, a container's init) counts the readable ones.
    const bool whole = level == Level::process;
    if (denied > 0 && (whole || readable == 0)) out.measured = false;
    auto& warned = warned_[level_index(level)];
    // A level measured without some members (a container's init at the user level) changes no
    // figure the summary shows: the manifest says so; the process level's gap is a warning.
    const auto& say = out.measured && !whole && note_ ? note_ : warn_;
    if (denied > 0 && !warned && say) {
      warned = true;
      say(out.measured
              ? fmt::format("/proc/<pid>/io of {} process(es) of the {} level (e.g. {}) is not "
                            "readable (permission denied): the level's I/O leaves them out",
                            denied, level_name(level), denied_pid)
              : fmt::format("/proc/{}/io is not readable (permission denied): the I/O columns "
                            "of the {} level are left empty (run sonde as the process's user or "
                            "as root to measure them)",
                            denied_pid, level_name(level)));
    }
    return RawValue(std::move(out));
  }

 private:
  Result<RawValue> collect_disks() {
    auto text = read_file(roots_.proc + "/diskstats");
    if (!text) return text.error();
    auto stats = procfs::parse_diskstats(*text);
    if (!stats) return stats.error();
    Counters c{{0, 0, 0, 0}};
    for (const auto& d : *stats) {
      if (std::find(disks_.begin(), disks_.end(), d.name) == disks_.end()) continue;
      c.values[0] += static_cast<double>(d.reads_completed);
      c.values[1] += static_cast<double>(d.writes_completed);
      c.values[2] += static_cast<double>(d.sectors_read) * kSectorBytes;
      c.values[3] += static_cast<double>(d.sectors_written) * kSectorBytes;
    }
    return RawValue(std::move(c));
  }

  Roots roots_;
  std::vector<std::string> disks_;
  std::array<std::array<double, 4>, kNumLevels> raw_{};
  std::array<std::array<double, 4>, kNumLevels> shown_{};
  std::function<void(const std::string&)> warn_, note_;
  std::array<bool, kNumLevels> warned_{};
};
}  // namespace

CollectorInfo io_info() {
  return {"sonde.collectors.io",
          "read/write operations and bytes per second (pid levels: /proc/<pid>/io; node: disks)",
          {},
          false,
          [](const CollectorArgs& a) {
            return std::make_unique<IoCollector>(*a.roots, a.warn, a.note);
          }};
}

}  // namespace sonde::collectors
