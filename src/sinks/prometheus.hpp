#pragma once
// Prometheus exposition: maps engine ticks (system level) to metric families and renders them in
// the Prometheus text format 0.0.4 or OpenMetrics 1.0. Pure: no sockets, no clocks; `sonde serve`
// (src/cli/cmd_serve.cpp) drives it. The metric names are listed in docs/prometheus.md.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine.hpp"
#include "core/utf8.hpp"
#include "sinks/prometheus_owners.hpp"

namespace sonde::prom {

enum class Format { prometheus, openmetrics };
enum class Type { gauge, counter, info };

/// Content-Type header values of the two formats.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr const char* kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Picks the format from an HTTP Accept header (OpenMetrics only when asked for).
Format negotiate(std::string_view accept_header);

struct Label {
  std::string name;
  std::string value;  ///< raw; escaped when rendered
};

struct Sample {
  std::vector<Label> labels;
  double value = 0;  ///< NaN and ±Inf are rendered as NaN, +Inf, -Inf
};

struct Family {
  /// Without the `_total` suffix for counters (it is added to the sample name) and without
  /// `_info` for info families.
  std::string name;
  Type type = Type::gauge;
  std::string help;
  std::string unit;  ///< OpenMetrics UNIT; must be the last part of `name`; empty for none
  std::vector<Sample> samples;
};

/// Escapes a label value: backslash, double quote and newline; each byte that is not part of
/// valid UTF-8 becomes U+FFFD (the formats are UTF-8: one such byte makes a scraper or promtool
/// reject the whole page).
std::string escape_label_value(std::string_view v);
using sonde::is_utf8;  // core/utf8.hpp
/// Escapes HELP text (backslash and newline; OpenMetrics also double quote).
std::string escape_help(std::string_view v, Format f);
/// A valid metric-name part: lower case, [a-z0-9_], no leading digit, no repeated '_'.
std::string sanitize_name(std::string_view s);
/// Shortest text that reads back as the same double; NaN, +Inf, -Inf.
std::string format_value(double v);

/// Appends the families in `f`; OpenMetrics without the final "# EOF" (see kOpenMetricsEof).
void render(const std::vector<Family>& families, Format f, std::string& out);
inline constexpr std::string_view kOpenMetricsEof = "# EOF\n";

/// Sums a rate column (per second, from CumulativeRateHandler) back into its counter: each finite
/// rate is multiplied by the time since the previous finite one (the span the handler divided
/// by) and rounded to whole units. The first finite value is the baseline (its rate is 0); a
/// NaN rate leaves the counter as it is.
struct RateIntegrator {
  double total = 0;
  bool started = false;
  double last_good_s = 0;
  /// Adds one tick's rate (`scale` converts its unit); returns the counter.
  double add(double rate, double time_s, double scale = 1);
};

/// One MIG device of a GPU in MIG mode (`sonde serve`, src/cli/serve_gpus.cpp), as the
/// sonde_gpu_mig_* series show it: labelled as dcgm-exporter labels MIG series (`gpu`, `GPU_I_ID`,
/// `GPU_I_PROFILE`), with the compute instance (`CI_ID`) and the MIG device's `UUID`.
struct MigSeries {
  int gpu = 0;  ///< its GPU, as the `gpu` label of sonde_gpu_*
  std::string uuid;
  std::string profile;                 ///< "3g.20gb"
  long long gpu_instance_id = -1;      ///< -1: unknown
  long long compute_instance_id = -1;  ///< -1: unknown
  double memory_used_bytes = 0;        ///< NaN when unknown
  double memory_total_bytes = 0;       ///< NaN when unknown
  double processes = 0;                ///< NaN when the driver cannot list them
  double utilization_ratio = 0;        ///< NaN where the driver gives none (always, today)
};

struct ExporterOptions {
  bool per_user = false;
  bool per_job = false;
};

/// Turns engine ticks into families. Keeps state across ticks: rate columns of the built-in I/O
/// and network collectors are integrated back into `_total` counters (exact: rate × its own Δt,
/// rounded to whole bytes/operations), since Prometheus wants counters and computes rates itself.
class Exporter {
 public:
  Exporter(const Engine& engine, ExporterOptions options);

  /// Builds the families of this tick. `tick_s` is the wall time the tick took; `owners` the
  /// per-user/per-job aggregation (nullptr when neither is asked for).
  /// `mig`: the MIG devices of the node's GPUs in MIG mode (nullptr: none looked for).
  void update(const Engine& engine, const Engine::Tick& tick, double tick_s,
              const OwnerUsage* owners, const std::vector<MigSeries>* mig = nullptr);
  const std::vector<Family>& families() const { return families_; }

 private:
  struct ColumnMap;  // how one system-level column becomes a sample
  void add_job_families(const std::vector<OwnerSeries>& jobs);
  void add_mig_families(const std::vector<MigSeries>& mig);
  std::vector<ColumnMap> maps_;
  std::vector<Family> families_;
  std::size_t fixed_families_ = 0;
  ExporterOptions options_;
  std::uint64_t ticks_ = 0;

 public:
  ~Exporter();
};

}  // namespace sonde::prom
