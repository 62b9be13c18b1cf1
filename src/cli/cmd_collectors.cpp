// sonde collectors [--timing]: what is configured, its columns per level, its state and cost.
#include <unistd.h>

#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "core/engine.hpp"

namespace sonde::cli {

int cmd_collectors(const CommonOptions& common, bool timing) {
  auto cfg = load(common);
  if (!cfg) return kExitUsage;
  // Describe the collectors as they would run for a program started from this shell: every level
  // that applies, with sonde standing in for the target.
  const Registry registry = make_registry();
  int status = kExitOk;
  auto engine_ptr = engine_for_shell(*cfg, registry, status);
  if (!engine_ptr) return status;
  Engine& engine = *engine_ptr;
  constexpr int kTimingTicks = 20;
  if (timing) {
    for (int i = 0; i < kTimingTicks; ++i) {
      engine.tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::cout << fmt::format("levels: {}   interval: {} s\n",
                           fmt::join(
                               [&] {
                                 std::vector<std::string> names;
                                 for (Level l : engine.levels()) names.emplace_back(level_name(l));
                                 return names;
                               }(),
                               ","),
                           engine.interval_s());
  if (timing)
    std::cout << fmt::format("/proc scan: {:.1f} us per tick over {} ticks ({} pids)\n",
                             engine.scan_s() / static_cast<double>(engine.ticks()) * 1e6,
                             engine.ticks(), engine.procs().total_pids);
  for (const CollectorSlot& s : engine.collectors()) {
    std::string state(state_name(s.state));
    if (!s.why.empty()) state += ": " + s.why;
    std::cout << fmt::format("\n{}\n", s.spec.name);
    std::cout << fmt::format("  target   {}\n", s.spec.target);
    if (s.collector) {
      std::cout << fmt::format(
          "  source   {}{}\n", s.collector->source(),
          s.collector->file().empty() ? std::string() : " (" + s.collector->file() + ")");
      std::cout << fmt::format("  priority {}\n", s.collector->priority());
    } else if (s.factory) {
      std::cout << fmt::format("  source   {}\n", s.factory->prefix);
    } else {
      std::cout << "  source   builtin\n";
    }
    std::cout << fmt::format("  handler  {}\n", s.spec.handler.target);
    std::cout << fmt::format("  inject   [{}]\n", fmt::join(s.spec.inject, ", "));
    std::cout << fmt::format("  state    {}\n", state);
    if (s.state == CollectorState::ok) {
      for (Level l : engine.levels()) {
        const std::size_t li = level_index(l);
        if (!s.at_level[li]) continue;
        const auto& cols = engine.columns(l);
        std::vector<std::string> mine(cols.begin() + static_cast<long>(s.offset[li]),
                                      cols.begin() + static_cast<long>(s.offset[li] + s.width[li]));
        std::cout << fmt::format("  {:<8} {}\n", level_name(l),
                                 mine.empty() ? std::string("(no columns: context only)")
                                              : fmt::format("{}", fmt::join(mine, " ")));
      }
    }
    if (timing && s.calls)
      std::cout << fmt::format("  cost     {:.1f} us per tick (all levels), {} errors\n",
                               s.total_s / static_cast<double>(s.calls) * 1e6, s.errors);
  }
  return kExitOk;
}

}  // namespace sonde::cli
