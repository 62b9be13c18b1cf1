// procs: the number of processes in each level (system: every pid on the node).
#include "collectors/builtin.hpp"

namespace sonde::collectors {
namespace {
class ProcsCollector final : public Collector {
 public:
  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    if (level == Level::system) return RawValue(Scalar{static_cast<double>(ctx.procs->total_pids)});
    return RawValue(Scalar{static_cast<double>(members(ctx, level).size())});
  }
};
}  // namespace

CollectorInfo procs_info() {
  return {"sonde.collectors.procs",
          "number of processes in the level",
          {},
          false,
          [](const CollectorArgs&) { return std::make_unique<ProcsCollector>(); }};
}

}  // namespace sonde::collectors
