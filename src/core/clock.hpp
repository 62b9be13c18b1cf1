#pragma once
// The clocks sonde reads, in seconds, and the conversion to a ppoll timeout. Nothing else: the
// engine, the sinks and the plugin hosts include this without the engine.
#include <time.h>

namespace sonde {

/// CLOCK_MONOTONIC, CLOCK_REALTIME and CLOCK_BOOTTIME in seconds.
double monotonic_now();
double wallclock_now();
double boottime_now();
/// A relative timeout for ppoll; negative durations become 0.
timespec to_timespec(double seconds);

}  // namespace sonde
