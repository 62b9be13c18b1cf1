#include "sinks/prometheus_sink.hpp"

namespace sonde::prom {

PrometheusSink::PrometheusSink(const Engine& engine, ExporterOptions options,
                               std::unique_ptr<OwnerScanner> owners)
    : engine_(engine), exporter_(engine, options), owners_(std::move(owners)) {}

SinkStatus PrometheusSink::write(const Engine::Tick& tick) {
  const OwnerUsage* usage = owners_ ? &owners_->scan() : nullptr;
  // The tick's own cost (sonde_tick_seconds): from its start to now, the owners' scan included.
  std::vector<MigSeries> mig;
  if (mig_source_) mig = mig_source_();
  exporter_.update(engine_, tick, monotonic_now() - tick.ctx.time_s, usage,
                   mig_source_ ? &mig : nullptr);
  auto next = std::make_shared<Page>();
  render(exporter_.families(), Format::prometheus, next->prometheus);
  render(exporter_.families(), Format::openmetrics, next->openmetrics);
  std::lock_guard lock(mutex_);
  page_ = std::move(next);
  return SinkStatus::ok;
}

std::shared_ptr<const Page> PrometheusSink::page() const {
  std::lock_guard lock(mutex_);
  return page_;
}

}  // namespace sonde::prom
