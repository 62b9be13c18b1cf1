// memory (GiB), shared pages counted once: the Pss sum of the level's processes
// (/proc/<pid>/smaps_rollup; a process whose smaps_rollup is unreadable counts its RSS); at the
// system level the node's used memory, MemTotal − MemAvailable, or the memory processes map,
// AnonPages + Mapped, when that is larger (MemAvailable counts mapped file pages as reclaimable,
// so that a large file mapping could otherwise read more at the user level than at the node's).
#include <algorithm>
#include <array>
#include <functional>

#include <fmt/format.h>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"
#include "core/units.hpp"

namespace sonde::collectors {
namespace {

class MemoryCollector final : public Collector {
 public:
  MemoryCollector(const Roots& roots, std::function<void(const std::string&)> warn,
                  std::function<void(const std::string&)> note)
      : path_(roots.proc + "/meminfo"), warn_(std::move(warn)), note_(std::move(note)) {}

  Result<void> setup() override {
    auto info = read_meminfo();
    if (!info) return info.error();
    if (!info->total_bytes || !info->available_bytes)
      return make_error(Errc::unavailable, path_ + ": no MemTotal/MemAvailable");
    return {};
  }

  ScanNeeds needs() const override { return {.io = false, .threads = false, .pss = true}; }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level != Level::system) {
      std::uint64_t pss = 0;
      std::size_t denied = 0;
      int denied_pid = 0;
      for (auto i : members(ctx, level)) {
        const PidSample& p = ctx.procs->pids[i];
        pss += p.pss_bytes;
        if (p.pss_denied && p.rss_bytes > 0) {
          ++denied;
          denied_pid = p.pid;
        }
      }
      auto& warned = warned_[level_index(level)];
      // Beyond the process level (the summary's), a fact for the manifest, not a warning.
      const auto& say = level != Level::process && note_ ? note_ : warn_;
      if (denied > 0 && !warned && say) {
        warned = true;
        say(fmt::format(
            "/proc/<pid>/smaps_rollup of {} process(es) of the {} level (e.g. {}) is not readable "
            "(permission denied): `memory` counts their RSS, their shared pages once per process",
            denied, level_name(level), denied_pid));
      }
      return RawValue(Scalar{static_cast<double>(pss) / kGiB});
    }
    auto info = read_meminfo();
    if (!info) return info.error();
    if (!info->total_bytes || !info->available_bytes)
      return make_error(Errc::parse, path_ + ": expected MemTotal and MemAvailable");
    auto used = *info->total_bytes - std::min(*info->total_bytes, *info->available_bytes);
    if (info->anon_pages_bytes && info->mapped_bytes)
      used = std::max(used, *info->anon_pages_bytes + *info->mapped_bytes);
    return RawValue(Scalar{static_cast<double>(used) / kGiB});
  }

 private:
  Result<procfs::MemInfo> read_meminfo() const {
    auto text = read_file(path_);
    if (!text) return text.error();
    return procfs::parse_meminfo(*text);
  }

  std::string path_;
  std::function<void(const std::string&)> warn_, note_;
  std::array<bool, kNumLevels> warned_{};
};

// memory_rss (GiB): the RSS sum of the level's processes (statm), shared pages counted once per
// process as `ps` and `top` show them; not at the system level (the node's figure is `memory`).
class MemoryRssCollector final : public Collector {
 public:
  bool supports(Level level) const override { return level != Level::system; }
  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    std::uint64_t rss = 0;
    for (auto i : members(ctx, level)) rss += ctx.procs->pids[i].rss_bytes;
    return RawValue(Scalar{static_cast<double>(rss) / kGiB});
  }
};
}  // namespace

CollectorInfo memory_info() {
  return {"sonde.collectors.memory",
          "memory in GiB, shared pages once: Pss sum per level (RSS where smaps_rollup is "
          "unreadable); for the node MemTotal - MemAvailable, or AnonPages + Mapped if larger",
          {},
          false,
          [](const CollectorArgs& a) {
            return std::make_unique<MemoryCollector>(*a.roots, a.warn, a.note);
          }};
}

CollectorInfo memory_rss_info() {
  return {"sonde.collectors.memory_rss",
          "RSS sum per level in GiB, shared pages once per process (as ps shows them); no "
          "system-level value",
          {},
          false,
          [](const CollectorArgs&) { return std::make_unique<MemoryRssCollector>(); }};
}

}  // namespace sonde::collectors
