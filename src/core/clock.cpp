#include "core/clock.hpp"

namespace sonde {
namespace {
double clock_s(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
}  // namespace

double monotonic_now() {
  return clock_s(CLOCK_MONOTONIC);
}
double wallclock_now() {
  return clock_s(CLOCK_REALTIME);
}
double boottime_now() {
  return clock_s(CLOCK_BOOTTIME);
}

timespec to_timespec(double seconds) {
  if (seconds < 0) seconds = 0;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  return ts;
}

}  // namespace sonde
