#pragma once
// A realtime clock reading as text for people: "YYYY-MM-DD HH:MM:SS".
#include <string>

namespace sonde {

/// `wallclock` (seconds since the epoch) as "YYYY-MM-DD HH:MM:SS", in UTC or in local time.
std::string calendar_time(double wallclock, bool utc);

}  // namespace sonde
