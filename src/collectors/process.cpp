// process: context only. The engine's /proc scan already gives every collector the per-pid
// snapshot and the pid set of each level; this collector makes that explicit in the config, the
// way JUmPER's process collector does, and has no columns.
#include "collectors/builtin.hpp"

namespace sonde::collectors {
namespace {
class ProcessCollector final : public Collector {
 public:
  Result<RawValue> collect(Level, const TickContext&) override { return RawValue(NoValue{}); }
};
}  // namespace

CollectorInfo process_info() {
  return {"sonde.collectors.process",
          "per-pid snapshot and level membership (context only, no columns)",
          {},
          false,
          [](const CollectorArgs&) { return std::make_unique<ProcessCollector>(); }};
}

}  // namespace sonde::collectors
