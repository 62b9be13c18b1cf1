#pragma once
// Handlers turn a collector's raw value into named columns (the table in
// docs/writing-collectors.md, "Handlers: raw value → columns").
#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/level.hpp"
#include "core/raw_value.hpp"
#include "core/result.hpp"

namespace sonde {

class Handler {
 public:
  virtual ~Handler() = default;
  /// Column names for a collector with `devices` entries at a level.
  virtual std::vector<std::string> columns(std::size_t devices) const = 0;
  /// Writes one value per column into `out` (already sized; NaN = not measured). `time_s` is the
  /// tick's monotonic time. A raw value of the wrong kind or size is an error; `out` is then NaN.
  virtual Result<void> handle(Level level, const RawValue& raw, double time_s,
                              std::span<double> out) = 0;
  /// The raw kind this handler accepts (for messages and `sonde collectors`).
  virtual std::string_view accepts() const = 0;
};

/// Builds a handler from its validated spec; errors name the spec's origin.
Result<std::unique_ptr<Handler>> make_handler(const HandlerSpec& spec);

}  // namespace sonde
