#pragma once
// Levels (scopes) of a sample: the target's process tree, its user, its Slurm job, the node.
#include <array>
#include <optional>
#include <string_view>

namespace sonde {

enum class Level { process = 0, user = 1, slurm = 2, system = 3 };

inline constexpr std::array<Level, 4> kAllLevels = {Level::process, Level::user, Level::slurm,
                                                    Level::system};
inline constexpr std::size_t kNumLevels = kAllLevels.size();

constexpr std::string_view level_name(Level l) {
  switch (l) {
    case Level::process: return "process";
    case Level::user: return "user";
    case Level::slurm: return "slurm";
    case Level::system: return "system";
  }
  return "?";
}

constexpr std::optional<Level> parse_level(std::string_view s) {
  for (Level l : kAllLevels)
    if (level_name(l) == s) return l;
  return std::nullopt;
}

constexpr std::size_t level_index(Level l) {
  return static_cast<std::size_t>(l);
}

}  // namespace sonde
