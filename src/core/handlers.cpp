#include "core/handlers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "core/nan.hpp"

namespace sonde {
namespace {

Error wrong_kind(std::string_view expected, const RawValue& got) {
  return make_error(Errc::failed, fmt::format("expected {}, got {}", expected, raw_kind_name(got)));
}

class NoOpHandler final : public Handler {
 public:
  std::vector<std::string> columns(std::size_t) const override { return {}; }
  Result<void> handle(Level, const RawValue&, double, std::span<double>) override { return {}; }
  std::string_view accepts() const override { return "none"; }
};

class ScalarHandler final : public Handler {
 public:
  explicit ScalarHandler(std::string column) : column_(std::move(column)) {}
  std::vector<std::string> columns(std::size_t) const override { return {column_}; }
  Result<void> handle(Level, const RawValue& raw, double, std::span<double> out) override {
    const auto* s = std::get_if<Scalar>(&raw);
    if (s == nullptr) return wrong_kind("a scalar", raw);
    out[0] = s->value;
    return {};
  }
  std::string_view accepts() const override { return "scalar"; }

 private:
  std::string column_;
};

// Writes v0..vN-1, avg, min, max. NaN entries are left out of min/max/avg.
void write_aggregate(const std::vector<double>& values, std::optional<double> mean,
                     std::span<double> out) {
  const std::size_t n = values.size();
  double sum = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::size_t valid = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = values[i];
    out[i] = v;
    if (std::isnan(v)) continue;
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    ++valid;
  }
  out[n] = mean ? *mean : (valid ? sum / static_cast<double>(valid) : kNaN);
  out[n + 1] = valid ? lo : kNaN;
  out[n + 2] = valid ? hi : kNaN;
}

std::vector<std::string> aggregate_columns(const std::string& prefix, std::size_t devices) {
  std::vector<std::string> cols;
  cols.reserve(devices + 3);
  for (std::size_t i = 0; i < devices; ++i) cols.push_back(fmt::format("{}{}", prefix, i));
  for (const char* agg : {"avg", "min", "max"}) cols.push_back(prefix + agg);
  return cols;
}

class PerDeviceAggregateHandler final : public Handler {
 public:
  explicit PerDeviceAggregateHandler(std::string prefix) : prefix_(std::move(prefix)) {}
  std::vector<std::string> columns(std::size_t devices) const override {
    return aggregate_columns(prefix_, devices);
  }
  Result<void> handle(Level, const RawValue& raw, double, std::span<double> out) override {
    const auto* v = std::get_if<PerDevice>(&raw);
    if (v == nullptr) return wrong_kind("a per-device vector", raw);
    if (v->values.size() + 3 != out.size())
      return make_error(Errc::failed, fmt::format("expected {} devices, got {}", out.size() - 3,
                                                  v->values.size()));
    write_aggregate(v->values, v->mean, out);
    return {};
  }
  std::string_view accepts() const override { return "per-device vector"; }

 private:
  std::string prefix_;
};

class PerDeviceMultiAggregateHandler final : public Handler {
 public:
  PerDeviceMultiAggregateHandler(std::string prefix, std::vector<std::string> metrics)
      : prefix_(std::move(prefix)), metrics_(std::move(metrics)) {}
  std::vector<std::string> columns(std::size_t devices) const override {
    std::vector<std::string> cols;
    for (const auto& m : metrics_) {
      auto part = aggregate_columns(prefix_ + m + "_", devices);
      cols.insert(cols.end(), part.begin(), part.end());
    }
    return cols;
  }
  Result<void> handle(Level, const RawValue& raw, double, std::span<double> out) override {
    const auto* v = std::get_if<MultiPerDevice>(&raw);
    if (v == nullptr) return wrong_kind("per-device vectors", raw);
    if (v->metrics.size() != metrics_.size())
      return make_error(Errc::failed, fmt::format("expected {} metrics, got {}", metrics_.size(),
                                                  v->metrics.size()));
    const std::size_t width = out.size() / metrics_.size();
    for (std::size_t m = 0; m < metrics_.size(); ++m) {
      if (v->metrics[m].size() + 3 != width)
        return make_error(Errc::failed, fmt::format("metric {}: expected {} devices, got {}",
                                                    metrics_[m], width - 3, v->metrics[m].size()));
      write_aggregate(v->metrics[m], std::nullopt, out.subspan(m * width, width));
    }
    return {};
  }
  std::string_view accepts() const override { return "per-device vectors"; }

 private:
  std::string prefix_;
  std::vector<std::string> metrics_;
};

// Δ/Δt per column with state per level. The first tick of a level gives 0; a counter that goes
// backwards (a process left the level, a device was reset) gives 0 for that tick and becomes the
// new baseline, so a rate is never negative.
class CumulativeRateHandler final : public Handler {
 public:
  explicit CumulativeRateHandler(std::vector<std::string> columns) : columns_(std::move(columns)) {}
  std::vector<std::string> columns(std::size_t) const override { return columns_; }
  Result<void> handle(Level level, const RawValue& raw, double time_s,
                      std::span<double> out) override {
    const auto* c = std::get_if<Counters>(&raw);
    if (c == nullptr) return wrong_kind("counters", raw);
    if (c->values.size() != columns_.size())
      return make_error(Errc::failed, fmt::format("expected {} counters, got {}", columns_.size(),
                                                  c->values.size()));
    State& st = state_[level_index(level)];
    if (!c->measured) {  // not measured: empty, and the next measured value is a new baseline
      std::fill(out.begin(), out.end(), kNaN);
      st.valid = false;
      return {};
    }
    const bool first = !st.valid;
    if (first) {
      st.prev.assign(columns_.size(), kNaN);
      st.prev_time_s.assign(columns_.size(), time_s);
    }
    std::optional<std::size_t> bad;
    for (std::size_t i = 0; i < columns_.size(); ++i) {
      const double cur = c->values[i];
      const double prev = st.prev[i];
      const double dt = time_s - st.prev_time_s[i];  // since this counter's last good value
      if (!std::isfinite(cur)) {
        out[i] = kNaN;
        if (!bad) bad = i;
        continue;  // keep the previous baseline
      }
      if (first || std::isnan(prev))
        out[i] = kNaN;  // no interval yet: not measured (never a made-up 0)
      else if (cur < prev || dt <= 0)
        out[i] = 0.0;
      else
        out[i] = (cur - prev) / dt;
      st.prev[i] = cur;
      st.prev_time_s[i] = time_s;
    }
    st.valid = true;
    if (bad)
      return make_error(Errc::failed,
                        fmt::format("counter {} is not a finite number", columns_[*bad]));
    return {};
  }
  std::string_view accepts() const override { return "counters"; }

 private:
  struct State {
    bool valid = false;
    std::vector<double> prev;         // last finite value per counter
    std::vector<double> prev_time_s;  // and when it was read
  };
  std::vector<std::string> columns_;
  std::array<State, kNumLevels> state_{};
};

}  // namespace

Result<std::unique_ptr<Handler>> make_handler(const HandlerSpec& spec) {
  const std::string& t = spec.target;
  if (t == "NoOpHandler") return std::unique_ptr<Handler>(new NoOpHandler());
  if (t == "ScalarHandler" && spec.column)
    return std::unique_ptr<Handler>(new ScalarHandler(*spec.column));
  if (t == "PerDeviceAggregateHandler" && spec.prefix)
    return std::unique_ptr<Handler>(new PerDeviceAggregateHandler(*spec.prefix));
  if (t == "PerDeviceMultiAggregateHandler" && spec.prefix && !spec.metrics.empty())
    return std::unique_ptr<Handler>(new PerDeviceMultiAggregateHandler(*spec.prefix, spec.metrics));
  if (t == "CumulativeRateHandler" && !spec.columns.empty())
    return std::unique_ptr<Handler>(new CumulativeRateHandler(spec.columns));
  return make_error(Errc::config,
                    fmt::format("{}: handler '{}' is unknown or lacks its arguments (expected one "
                                "of ScalarHandler(column), PerDeviceAggregateHandler(prefix), "
                                "PerDeviceMultiAggregateHandler(prefix, metrics), "
                                "CumulativeRateHandler(columns), NoOpHandler)",
                                spec.origin.str(), t));
}

}  // namespace sonde
