#pragma once
// Whether the node sustains the sampling interval: a tick (the /proc scan and the collectors)
// that takes about as long as the interval, or slots missed because ticks ran late, mean rows
// come less often than asked (JUmPER's collector accepts intervals such as 0.005 s; so does
// sonde, with this warning on stderr and in the run's manifest).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace sonde {

class IntervalCheck {
 public:
  explicit IntervalCheck(double interval_s, std::uint64_t ticks_to_judge = 5)
      : interval_s_(interval_s), judge_after_(ticks_to_judge) {}

  /// One tick: how long it took and the slots missed so far. Returns the warning (once), when
  /// after the first ticks the mean tick cost reaches the interval or a quarter of the slots
  /// were missed.
  std::optional<std::string> observe(double tick_cost_s, std::uint64_t missed_total);

  /// {"interval_s", "mean_tick_cost_s", "ticks", "missed", "sustainable_interval_s", "why"} once
  /// warned, with the figures of when it warned (ticks and missed slots up to then); null
  /// otherwise.
  nlohmann::json manifest_entry() const;
  bool warned() const { return warned_; }

 private:
  double interval_s_;
  std::uint64_t judge_after_;
  std::uint64_t ticks_ = 0, missed_ = 0;
  double cost_sum_s_ = 0;
  bool warned_ = false;
  std::string why_;
};

}  // namespace sonde
