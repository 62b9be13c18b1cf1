// io: read/write operations and bytes as cumulative counters (CumulativeRateHandler makes rates).
// Pid levels: /proc/<pid>/io (syscr, syscw, read_bytes, write_bytes) summed as the growth of each
// member since the previous tick, so a process leaving the level never makes the sum go back.
// System level: /proc/diskstats of whole physical disks (partitions and virtual devices would
// count the same bytes twice).
#include <algorithm>
#include <array>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {
constexpr double kSectorBytes = 512.0;

class IoCollector final : public Collector {
 public:
  explicit IoCollector(const Roots& roots) : roots_(roots) {}

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
    auto& acc = acc_[level_index(level)];
    for (auto i : members(ctx, level)) {
      const PidSample& p = ctx.procs->pids[i];
      if (!p.io_valid) continue;
      acc[0] += static_cast<double>(p.io_delta.syscr);
      acc[1] += static_cast<double>(p.io_delta.syscw);
      acc[2] += static_cast<double>(p.io_delta.read_bytes);
      acc[3] += static_cast<double>(p.io_delta.write_bytes);
    }
    return RawValue(Counters{{acc.begin(), acc.end()}});
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
  std::array<std::array<double, 4>, kNumLevels> acc_{};
};
}  // namespace

CollectorInfo io_info() {
  return {"sonde.collectors.io",
          "read/write operations and bytes per second (pid levels: /proc/<pid>/io; node: disks)",
          {},
          false,
          [](const CollectorArgs& a) { return std::make_unique<IoCollector>(*a.roots); }};
}

}  // namespace sonde::collectors
