// A realtime clock reading as text (core/time_text.hpp).
#include "core/time_text.hpp"

#include <ctime>

namespace sonde {

std::string calendar_time(double wallclock, bool utc) {
  const auto t = static_cast<std::time_t>(wallclock);
  std::tm tm{};
  if (utc)
    ::gmtime_r(&t, &tm);
  else
    ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

}  // namespace sonde
