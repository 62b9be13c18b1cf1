#pragma once
// The phases of a run, from its marks (core/marks.hpp): each mark begins a phase that lasts until
// the next mark or the end of the run; what came before the first mark is the phase "(start)".
// Each row of the level (the interval before its time) is split between the phases it overlaps,
// in proportion to the overlap: CPU seconds, I/O bytes and GPU utilisation are integrated over
// the phase's share of each row, memory is the peak of the rows it overlaps.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/marks.hpp"

namespace sonde {

class Phases {
 public:
  /// What one row of the level says about its interval [end_s - dt_s, end_s] (wall clock); NaN:
  /// not measured.
  struct Row {
    double end_s = 0, dt_s = 0;
    double cpu_cores = 0;     ///< cores busy on average (cpu_util_avg × CPUs / 100)
    double memory_gib = 0;    ///< memory at the row
    double read_bps = 0;      ///< io_read, bytes/s
    double write_bps = 0;     ///< io_write, bytes/s
    double gpu_util_pct = 0;  ///< the level's GPU utilisation
  };

  /// The run's origin (wall clock of its baseline or first row): the "(start)" phase begins there.
  void set_origin(double wall_s) { origin_s_ = wall_s; }
  /// Marks in the order they were read (sorted here by time; a mark before the origin begins at
  /// the origin).
  void add_marks(std::vector<Mark> marks);
  void add_row(const Row& row);
  /// The run ended at `wall_s`: the last phase ends there.
  void finish(double wall_s) { end_s_ = wall_s; }
  std::size_t marks() const { return marks_; }

  /// [{name, start_s, end_s (since the origin), duration_s, start_wallclock, end_wallclock, cpu_s,
  /// cpu_mean_cores,
  /// memory_peak_gib, io_read_bytes, io_write_bytes, gpu_util_mean}]; null when there was no
  /// mark. A figure no row measured is null.
  nlohmann::json json() const;

 private:
  struct Acc {
    std::string name;
    double start_s = 0;
    double cpu_s = 0, cpu_dt = 0;
    double read_b = 0, write_b = 0, io_dt = 0;
    double gpu_int = 0, gpu_dt = 0;
    std::optional<double> memory_peak;
  };
  /// Splits `row` between the phases it overlaps.
  static void place(std::vector<Acc>& phases, const Row& row);
  /// Rows are placed once they are kLateS older than the newest: a mark read a little after the
  /// time it names (it is read at the next tick) still splits the rows it falls in. A mark older
  /// than what is placed begins where the placed rows end.
  static constexpr double kLateS = 5.0;
  std::vector<Acc> phases_;  ///< "(start)" and one per mark, by start
  std::vector<Row> pending_;
  double placed_until_s_ = 0;
  std::size_t marks_ = 0;
  std::optional<double> origin_s_;
  std::optional<double> end_s_;
};

}  // namespace sonde
