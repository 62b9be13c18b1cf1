#pragma once
// `sonde serve`'s Sink: each tick renders both exposition formats once (with the per-user and
// per-job families when asked for); a scrape on the HTTP thread only copies a shared pointer.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "sinks/prometheus.hpp"
#include "sinks/prometheus_owners.hpp"
#include "sinks/sink.hpp"

namespace sonde::prom {

/// The two renderings of one tick.
struct Page {
  std::string prometheus;
  std::string openmetrics;  ///< without "# EOF"
};

class PrometheusSink final : public Sink {
 public:
  /// `owners`: null unless --per-user or --per-job.
  PrometheusSink(const Engine& engine, ExporterOptions options,
                 std::unique_ptr<OwnerScanner> owners);
  std::string name() const override { return "the Prometheus exporter"; }
  SinkStatus write(const Engine::Tick& tick) override;
  /// The last tick's page (any thread); null before the first tick.
  std::shared_ptr<const Page> page() const;
  /// Where the MIG devices' series come from, asked once per tick (`sonde serve` sets it when a
  /// GPU is in MIG mode).
  void set_mig_source(std::function<std::vector<MigSeries>()> source) {
    mig_source_ = std::move(source);
  }

 private:
  const Engine& engine_;
  Exporter exporter_;
  std::unique_ptr<OwnerScanner> owners_;
  std::function<std::vector<MigSeries>()> mig_source_;
  mutable std::mutex mutex_;
  std::shared_ptr<const Page> page_;
};

}  // namespace sonde::prom
