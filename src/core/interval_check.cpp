#include "core/interval_check.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace sonde {

std::optional<std::string> IntervalCheck::observe(double tick_cost_s, std::uint64_t missed_total) {
  if (warned_) return std::nullopt;  // the manifest keeps the figures the warning was based on
  ++ticks_;
  cost_sum_s_ += std::max(0.0, tick_cost_s);
  missed_ = missed_total;
  if (ticks_ < judge_after_) return std::nullopt;
  const double mean = cost_sum_s_ / static_cast<double>(ticks_);
  const bool too_slow = mean >= interval_s_;
  const bool missing = missed_ * 4 >= ticks_ + missed_;  // a quarter of the slots or more
  if (!too_slow && !missing) return std::nullopt;
  warned_ = true;
  why_ = too_slow ? fmt::format("a tick takes {:.3g} ms on average here", mean * 1e3)
                  : fmt::format("{} of {} slots were missed", missed_, ticks_ + missed_);
  return fmt::format(
      "the interval {:g} s is below what this node sustains ({}); rows come about every {:.3g} "
      "s (use --interval {:.3g} or more for rows on schedule)",
      interval_s_, why_,
      interval_s_ * static_cast<double>(ticks_ + missed_) / static_cast<double>(ticks_),
      std::max(interval_s_, 2 * mean));
}

nlohmann::json IntervalCheck::manifest_entry() const {
  if (!warned_) return nullptr;
  const double mean = cost_sum_s_ / static_cast<double>(std::max<std::uint64_t>(ticks_, 1));
  return {{"interval_s", interval_s_},
          {"mean_tick_cost_s", mean},
          {"ticks", ticks_},
          {"missed", missed_},
          {"sustainable_interval_s", std::max(interval_s_, 2 * mean)},
          {"why", why_}};
}

}  // namespace sonde
