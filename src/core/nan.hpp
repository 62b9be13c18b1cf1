#pragma once
// The one "not measured" value: a column, a summary or a series without a number holds NaN, and
// every output writes it as its own "none" (an empty CSV field, JSON null, no Prometheus sample).
#include <limits>

namespace sonde {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace sonde
