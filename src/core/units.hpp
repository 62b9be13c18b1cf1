#pragma once
// Byte units: every figure sonde shows in GiB or MiB divides by these (binary units, as the
// column names say: memory in GiB, rates in MiB/s).

namespace sonde {

inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * kMiB;

}  // namespace sonde
