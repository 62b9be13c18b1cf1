// The one symbol of the engine (src/core/engine.cpp) that the SQLite writer in sqlite.cpp needs:
// the fuzz targets link the readers' sources alone, not the engine with its collectors, so they
// get the same wall clock here. Built only into the fuzz targets (SONDE_FUZZ).
#include <time.h>

#include "core/engine.hpp"

namespace sonde {

double wallclock_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace sonde
