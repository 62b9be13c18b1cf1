#include "core/phases.hpp"

#include <algorithm>
#include <cmath>

namespace sonde {

namespace {

nlohmann::json number_or_null(double v, bool measured) {
  return measured && std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}

}  // namespace

void Phases::add_marks(std::vector<Mark> marks) {
  if (marks.empty()) return;
  std::stable_sort(marks.begin(), marks.end(),
                   [](const Mark& a, const Mark& b) { return a.wall_s < b.wall_s; });
  if (phases_.empty()) phases_.push_back({"(start)", origin_s_.value_or(marks.front().wall_s)});
  for (Mark& m : marks) {
    Acc a;
    a.name = std::move(m.name);
    a.start_s = std::max({m.wall_s, phases_.front().start_s, placed_until_s_});
    // After every phase that starts no later (marks of one time keep their order).
    auto at = std::upper_bound(phases_.begin(), phases_.end(), a.start_s,
                               [](double t, const Acc& p) { return t < p.start_s; });
    phases_.insert(at, std::move(a));
    ++marks_;
  }
}

void Phases::place(std::vector<Acc>& phases, const Row& row) {
  if (!(row.dt_s > 0)) return;
  const double begin = row.end_s - row.dt_s;
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const double from = std::max(begin, phases[i].start_s);
    const double to =
        std::min(row.end_s, i + 1 < phases.size() ? phases[i + 1].start_s : row.end_s);
    // A phase that begins at the row's end takes nothing of it; the row still counts for the
    // phase before (its whole interval was before the mark).
    if (to - from <= 0) continue;
    const double dt = to - from;
    Acc& a = phases[i];
    if (std::isfinite(row.cpu_cores)) {
      a.cpu_s += row.cpu_cores * dt;
      a.cpu_dt += dt;
    }
    if (std::isfinite(row.read_bps) || std::isfinite(row.write_bps)) {
      if (std::isfinite(row.read_bps)) a.read_b += row.read_bps * dt;
      if (std::isfinite(row.write_bps)) a.write_b += row.write_bps * dt;
      a.io_dt += dt;
    }
    if (std::isfinite(row.gpu_util_pct)) {
      a.gpu_int += row.gpu_util_pct * dt;
      a.gpu_dt += dt;
    }
    if (std::isfinite(row.memory_gib))
      a.memory_peak = std::max(a.memory_peak.value_or(row.memory_gib), row.memory_gib);
  }
}

void Phases::add_row(const Row& row) {
  if (!origin_s_) origin_s_ = row.end_s - row.dt_s;
  pending_.push_back(row);
  if (phases_.empty()) {
    // No mark yet: rows older than the lateness window can only belong to "(start)".
    phases_.push_back({"(start)", *origin_s_});
  }
  std::size_t n = 0;
  while (n < pending_.size() && pending_[n].end_s < row.end_s - kLateS) {
    place(phases_, pending_[n]);
    placed_until_s_ = std::max(placed_until_s_, pending_[n].end_s);
    ++n;
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
}

nlohmann::json Phases::json() const {
  if (marks_ == 0) return nullptr;
  std::vector<Acc> phases = phases_;
  for (const Row& r : pending_) place(phases, r);
  const double origin = origin_s_.value_or(phases.front().start_s);
  double end = end_s_.value_or(pending_.empty() ? placed_until_s_ : pending_.back().end_s);
  end = std::max(end, phases.back().start_s);
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < phases.size(); ++i) {
    const Acc& a = phases[i];
    const double stop = i + 1 < phases.size() ? phases[i + 1].start_s : end;
    // "(start)" only when something happened before the first mark.
    if (i == 0 && a.name == "(start)" && stop - a.start_s <= 0) continue;
    nlohmann::json p;
    p["name"] = a.name;
    p["start_s"] = a.start_s - origin;
    p["end_s"] = stop - origin;
    p["duration_s"] = stop - a.start_s;
    p["start_wallclock"] = a.start_s;
    p["end_wallclock"] = stop;
    p["cpu_s"] = number_or_null(a.cpu_s, a.cpu_dt > 0);
    p["cpu_mean_cores"] = number_or_null(a.cpu_dt > 0 ? a.cpu_s / a.cpu_dt : 0, a.cpu_dt > 0);
    p["memory_peak_gib"] = a.memory_peak ? nlohmann::json(*a.memory_peak) : nlohmann::json();
    p["io_read_bytes"] = number_or_null(a.read_b, a.io_dt > 0);
    p["io_write_bytes"] = number_or_null(a.write_b, a.io_dt > 0);
    p["gpu_util_mean"] = number_or_null(a.gpu_dt > 0 ? a.gpu_int / a.gpu_dt : 0, a.gpu_dt > 0);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace sonde
