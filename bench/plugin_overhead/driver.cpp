// The engine alone, tick after tick: the wall and CPU time of Engine::tick() with a given
// configuration (defaults, then CONFIG), for bench/plugin_overhead. Built by that script against
// a build's libsonde_core.a (before and after a change), not part of the CMake build.
//
//   driver CONFIG TICKS SLEEP_MS
// prints one JSON line (levels process and system): tick_wall_us (median), collect_wall_us (median
// of the tick less its /proc scan), tick_cpu_us (mean, all threads), per collector cost_us (mean)
// and errors.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "core/collector.hpp"
#include "core/config.hpp"
#include "core/engine.hpp"
#include "core/node_info.hpp"
#include "plugins/plugins.hpp"

namespace {
double clock_us(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace sonde;
  if (argc != 4) {
    std::cerr << "usage: driver CONFIG TICKS SLEEP_MS\n";
    return 2;
  }
  const int ticks = std::atoi(argv[2]);
  const int sleep_ms = std::atoi(argv[3]);
  Config cfg;
  if (auto r = merge_config_text(cfg, default_config_yaml(), "<defaults>"); !r) {
    std::cerr << r.error().message << "\n";
    return 2;
  }
  std::stringstream text;
  text << std::ifstream(argv[1]).rdbuf();
  if (auto r = merge_config_text(cfg, text.str(), argv[1]); !r) {
    std::cerr << r.error().message << "\n";
    return 2;
  }
  Registry registry;
  register_builtin_collectors(registry);
  plugins::register_plugin_factories(registry);
  EngineOptions eo;
  auto target = discover_target(eo.roots, ::getpid());
  if (!target) {
    std::cerr << target.error().message << "\n";
    return 1;
  }
  target->pid = ::getpid();
  eo.target = *target;
  eo.levels = {Level::process, Level::system};  // the user level of root is every process
  auto engine = Engine::create(cfg, eo, registry);
  if (!engine) {
    std::cerr << engine.error().message << "\n";
    return 1;
  }
  Engine& e = **engine;
  for (int i = 0; i < 20; ++i) e.tick();  // warm-up: processes started, caches filled
  std::vector<double> wall, collect;      // the whole tick; the tick less its /proc scan
  double cpu = 0;
  for (int i = 0; i < ticks; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    const double w0 = clock_us(CLOCK_MONOTONIC);
    const double c0 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    const double s0 = e.scan_s();
    e.tick();
    cpu += clock_us(CLOCK_PROCESS_CPUTIME_ID) - c0;
    wall.push_back(clock_us(CLOCK_MONOTONIC) - w0);
    collect.push_back(wall.back() - (e.scan_s() - s0) * 1e6);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(collect.begin(), collect.end());
  std::printf(
      "{\"tick_wall_us\": %.3f, \"collect_wall_us\": %.3f, \"tick_cpu_us\": %.3f, "
      "\"collectors\": {",
      wall[wall.size() / 2], collect[collect.size() / 2], cpu / ticks);
  bool first = true;
  for (const CollectorSlot& s : e.collectors()) {
    if (s.calls == 0) continue;
    std::printf("%s\"%s\": {\"cost_us\": %.3f, \"errors\": %llu}", first ? "" : ", ",
                s.spec.name.c_str(), s.total_s / static_cast<double>(s.calls) * 1e6,
                static_cast<unsigned long long>(s.errors));
    first = false;
  }
  std::printf("}}\n");
  return 0;
}
