#pragma once
// The raw value a collector returns for one level and one tick; a handler turns it into columns.
#include <optional>
#include <string_view>
#include <variant>
#include <vector>

namespace sonde {

/// No value (context-only collectors).
struct NoValue {};
/// One number.
struct Scalar {
  double value = 0;
};
/// One number per device (CPU core, GPU, …). `mean` overrides the average the handler would
/// compute, for groups whose right average is not the mean of the entries (a CPU quota of 1.5
/// CPUs over 2 cores, or time that could not be placed on a core).
struct PerDevice {
  std::vector<double> values;
  std::optional<double> mean;
};
/// Several per-device vectors, one per metric, in the handler's metric order.
struct MultiPerDevice {
  std::vector<std::vector<double>> metrics;
};
/// Cumulative counters (bytes, packets, operations). Never decreasing in a healthy source.
/// `measured = false`: the source cannot be read this tick (not an error; the columns are empty).
struct Counters {
  std::vector<double> values;
  bool measured = true;
};

using RawValue = std::variant<NoValue, Scalar, PerDevice, MultiPerDevice, Counters>;

constexpr std::string_view raw_kind_name(const RawValue& v) {
  constexpr std::string_view names[] = {"none", "scalar", "per-device vector", "per-device vectors",
                                        "counters"};
  return names[v.index()];
}

}  // namespace sonde
