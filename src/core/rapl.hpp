#pragma once
// RAPL energy counters through the powercap sysfs interface (<sys>/class/powercap/intel-rapl:*,
// Intel and AMD): discovery of the zones and reads of their energy_uj counters. Used by the
// energy collector (src/collectors/energy.cpp) and the host line of `sonde status`.
#include <optional>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace sonde::rapl {

/// One powercap zone (a RAPL domain).
struct Zone {
  std::string dir;          ///< <sys>/class/powercap/intel-rapl:0:1
  std::string zone;         ///< "intel-rapl:0:1"
  std::string kind;         ///< the zone's `name` file: package, core, uncore, dram, psys
  std::string label;        ///< sonde's domain name: package-0, core-0, dram-0, uncore-0, psys
  int package = -1;         ///< the CPU package it belongs to (package-N); -1: the whole platform
  double max_range_uj = 0;  ///< max_energy_range_uj: energy_uj wraps to 0 above it (0: unknown)
};

/// The zones under `sys_root`/class/powercap, in zone order (intel-rapl:0, intel-rapl:0:0, …,
/// intel-rapl:1, …). No powercap directory or no RAPL zone: an empty list. A zone whose `name`
/// cannot be read is left out; `notes` says why.
std::vector<Zone> discover(const std::string& sys_root, std::vector<std::string>* notes = nullptr);

/// Outcome of one read of a zone's energy_uj.
struct Reading {
  std::optional<double> uj;  ///< microjoules, when read
  bool denied = false;       ///< EACCES/EPERM: readable only by root (the kernel's default)
  bool gone = false;         ///< the zone disappeared (ENOENT/ENODEV)
  std::string error;         ///< what went wrong, naming the file
};
Reading read_energy(const Zone& zone);

/// Energy between two readings in joules, with one wrap-around at max_range_uj.
double delta_joules(const Zone& zone, double prev_uj, double cur_uj);

/// The hint printed once when energy_uj is unreadable.
std::string permission_hint(const std::string& file);

}  // namespace sonde::rapl
