// memory (GiB): RSS sum of the level's processes; at the system level MemTotal − MemAvailable.
#include <algorithm>

#include "collectors/builtin.hpp"
#include "core/procfs.hpp"

namespace sonde::collectors {
namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

class MemoryCollector final : public Collector {
 public:
  explicit MemoryCollector(const Roots& roots) : path_(roots.proc + "/meminfo") {}

  Result<void> setup() override {
    auto text = read_file(path_);
    if (!text) return text.error();
    auto info = procfs::parse_meminfo(*text);
    if (!info) return info.error();
    if (!info->total_bytes || !info->available_bytes)
      return make_error(Errc::unavailable, path_ + ": no MemTotal/MemAvailable");
    return {};
  }

  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level != Level::system) {
      std::uint64_t rss = 0;
      for (auto i : members(ctx, level)) rss += ctx.procs->pids[i].rss_bytes;
      return RawValue(Scalar{static_cast<double>(rss) / kGiB});
    }
    auto text = read_file(path_);
    if (!text) return text.error();
    auto info = procfs::parse_meminfo(*text);
    if (!info) return info.error();
    if (!info->total_bytes || !info->available_bytes)
      return make_error(Errc::parse, path_ + ": expected MemTotal and MemAvailable");
    const auto used = *info->total_bytes - std::min(*info->total_bytes, *info->available_bytes);
    return RawValue(Scalar{static_cast<double>(used) / kGiB});
  }

 private:
  std::string path_;
};
}  // namespace

CollectorInfo memory_info() {
  return {"sonde.collectors.memory",
          "memory in GiB: RSS sum per level, MemTotal - MemAvailable for the node",
          {},
          false,
          [](const CollectorArgs& a) { return std::make_unique<MemoryCollector>(*a.roots); }};
}

}  // namespace sonde::collectors
