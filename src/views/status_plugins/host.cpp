// Host lines of `sonde status`: CPU utilisation per core (two /proc/stat reads around the query,
// at least --cpu-interval apart; in watch mode the previous refresh is the baseline), load
// average, memory and swap. Its fields are the "host" object of --json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <sonde/sdk.hpp>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "views/status.hpp"
#include "views/status_plugins/builtin.hpp"

namespace sonde::status {
namespace {

using Clock = std::chrono::steady_clock;

class HostPlugin : public sdk::StatusPlugin {
 public:
  using StatusPlugin::StatusPlugin;

  void before_query(sdk::Status& s) override {
    if (!baseline_) {
      baseline_ = read_stat(s);
      baseline_time_ = Clock::now();
    }
  }

  void after_query(sdk::Status& s) override {
    per_core_.clear();
    const double window = s.cpu_interval_s();
    if (baseline_ && window > 0) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - baseline_time_).count();
      if (elapsed < window)
        std::this_thread::sleep_for(std::chrono::duration<double>(window - elapsed));
      auto now = read_stat(s);
      if (now && now->per_cpu.size() == baseline_->per_cpu.size()) {
        for (std::size_t i = 0; i < now->per_cpu.size(); ++i)
          per_core_.push_back(util(baseline_->per_cpu[i], now->per_cpu[i]));
        total_ = util(baseline_->total, now->total);
      }
      baseline_ = now;  // the next refresh (watch mode) measures from here
      baseline_time_ = Clock::now();
    }
    s.set("cpus", static_cast<double>(baseline_ ? baseline_->per_cpu.size() : 0));
    std::vector<double> known;
    for (const auto& v : per_core_)
      if (v) known.push_back(*v);
    if (total_ && !known.empty()) {
      s.set("cpu_util_percent", *total_);
      s.set("cpu_util_min_percent", *std::min_element(known.begin(), known.end()));
      s.set("cpu_util_max_percent", *std::max_element(known.begin(), known.end()));
      s.set("cpu_window_s", window);
    }
    load_.clear();
    if (auto la = read_file(s.proc_root() + "/loadavg")) {
      std::istringstream in(*la);
      double v = 0;
      for (int i = 0; i < 3 && (in >> v); ++i) load_.push_back(v);
      if (load_.size() == 3) {
        s.set("load1", load_[0]);
        s.set("load5", load_[1]);
        s.set("load15", load_[2]);
      }
    }
    mem_ = {};
    if (auto mi = read_file(s.proc_root() + "/meminfo")) {
      if (auto parsed = procfs::parse_meminfo(*mi)) mem_ = *parsed;
    }
    if (mem_.total_bytes) s.set("mem_total_bytes", static_cast<double>(*mem_.total_bytes));
    if (mem_.total_bytes && mem_.available_bytes) {
      s.set("mem_used_bytes", static_cast<double>(*mem_.total_bytes - *mem_.available_bytes));
      s.set("mem_available_bytes", static_cast<double>(*mem_.available_bytes));
    }
    if (mem_.swap_total_bytes)
      s.set("swap_total_bytes", static_cast<double>(*mem_.swap_total_bytes));
    if (mem_.swap_total_bytes && mem_.swap_free_bytes)
      s.set("swap_used_bytes", static_cast<double>(*mem_.swap_total_bytes - *mem_.swap_free_bytes));
  }

  void print_footer(sdk::Status& s, sdk::Text& text) override {
    if (s.command() != "status") return;  // gpustat's output stays gpustat's
    const bool c = s.color();
    auto col = [&](const char* sgr) { return c ? sgr : ""; };
    std::string cpu = fmt::format("{}cpu{}  {:>3} cores", col(Palette::bold), col(Palette::reset),
                                  baseline_ ? baseline_->per_cpu.size() : 0);
    std::vector<double> known;
    for (const auto& v : per_core_)
      if (v) known.push_back(*v);
    if (total_ && !known.empty()) {
      cpu +=
          fmt::format("  avg {}{:>3.0f} %{}  min {:>3.0f} %  max {:>3.0f} %", col(Palette::green),
                      *total_, col(Palette::reset), *std::min_element(known.begin(), known.end()),
                      *std::max_element(known.begin(), known.end()));
      if (per_core_.size() <= 128) {
        static const char* blocks[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
        std::string strip;
        for (const auto& v : per_core_)
          strip += v ? blocks[std::clamp(static_cast<int>(std::lround(*v / 12.5)), 0, 8)] : "?";
        cpu += "  [" + strip + "]";
      }
    } else {
      cpu += "  utilisation not measured (--cpu-interval 0)";
    }
    if (load_.size() == 3)
      cpu += fmt::format("  load {:.2f} {:.2f} {:.2f}", load_[0], load_[1], load_[2]);
    std::string mem = fmt::format("{}mem{}  ", col(Palette::bold), col(Palette::reset));
    if (mem_.total_bytes && mem_.available_bytes) {
      const auto used = *mem_.total_bytes - *mem_.available_bytes;
      mem +=
          fmt::format("{}{}{} / {} used ({:.0f} %)", col(Palette::bold_yellow), human_bytes(used),
                      col(Palette::reset), human_bytes(*mem_.total_bytes),
                      100.0 * static_cast<double>(used) / static_cast<double>(*mem_.total_bytes));
    } else {
      mem += "??";
    }
    if (mem_.swap_total_bytes && mem_.swap_free_bytes)
      mem +=
          fmt::format("  swap {} / {}", human_bytes(*mem_.swap_total_bytes - *mem_.swap_free_bytes),
                      human_bytes(*mem_.swap_total_bytes));
    text.append(cpu + "\n" + mem + "\n");
  }

 private:
  static std::optional<procfs::ProcStat> read_stat(sdk::Status& s) {
    auto text = read_file(s.proc_root() + "/stat");
    if (!text) return std::nullopt;
    auto parsed = procfs::parse_proc_stat(*text);
    if (!parsed) return std::nullopt;
    return *parsed;
  }
  static std::optional<double> util(const procfs::CpuTimes& a, const procfs::CpuTimes& b) {
    if (b.total() <= a.total() || b.busy() < a.busy()) return std::nullopt;
    return 100.0 * static_cast<double>(b.busy() - a.busy()) /
           static_cast<double>(b.total() - a.total());
  }

  std::optional<procfs::ProcStat> baseline_;
  Clock::time_point baseline_time_;
  std::vector<std::optional<double>> per_core_;
  std::optional<double> total_;
  std::vector<double> load_;
  procfs::MemInfo mem_;
};

}  // namespace

StatusPluginRef host_status_plugin() {
  return {"host", "host CPU, load, memory and swap", 0, "builtin",
          sdk::detail::StatusAdapter<HostPlugin>::table()};
}

}  // namespace sonde::status
