// Host lines of `sonde status`: CPU utilisation per core (two /proc/stat reads around the query,
// at least --cpu-interval apart; in watch mode the previous refresh is the baseline), load
// average, memory and swap, and the node's power draw: the CPU packages' RAPL counters over the
// same window (powercap sysfs, src/core/rapl.cpp) and the GPUs' power. Its fields are the "host"
// object of --json.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <sonde/sdk.hpp>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "core/rapl.hpp"
#include "core/trust.hpp"
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
    if (!zones_) {
      // The sysfs root as `sonde status` sees it ($SONDE_SYS_ROOT in the tests, as for /proc;
      // ignored under AT_SECURE, where the environment is not sonde's to trust).
      const char* sys = program_env("SONDE_SYS_ROOT");
      zones_ = rapl::discover(sys ? sys : "/sys");
      std::erase_if(*zones_, [](const rapl::Zone& z) { return z.kind != "package"; });
      rapl_baseline_ = read_rapl();
    }
    gpu_power_w_ = 0;
    gpu_power_known_ = 0;
  }

  void query_device(sdk::Status&, sdk::Gpu& g) override {
    if (auto w = g.number("power_w")) {
      gpu_power_w_ += *w;
      ++gpu_power_known_;
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
    package_w_.assign(zones_ ? zones_->size() : 0, std::nullopt);
    rapl_denied_ = false;
    if (zones_ && !zones_->empty()) {
      const auto now = read_rapl();
      const double dt = std::chrono::duration<double>(now.time - rapl_baseline_.time).count();
      for (std::size_t i = 0; i < zones_->size(); ++i) {
        rapl_denied_ = rapl_denied_ || now.denied;
        // Less than 10 ms (--cpu-interval 0): too short for the counters' ~1 ms updates.
        if (dt >= 0.01 && now.uj[i] && rapl_baseline_.uj[i])
          package_w_[i] = rapl::delta_joules((*zones_)[i], *rapl_baseline_.uj[i], *now.uj[i]) / dt;
      }
      rapl_baseline_ = now;
      double total = 0;
      bool all = true;
      for (const auto& w : package_w_) {
        if (w) total += *w;
        all = all && w.has_value();
      }
      if (all) s.set("cpu_package_power_w", total);
    }
    if (gpu_power_known_ > 0) s.set("gpu_power_w", gpu_power_w_);
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
    // Power: CPU packages (RAPL) and GPUs, when the node has either.
    if ((zones_ && !zones_->empty()) || gpu_power_known_ > 0) {
      std::string power = fmt::format("{}power{}", col(Palette::bold), col(Palette::reset));
      if (zones_ && !zones_->empty()) {
        std::string parts;
        double total = 0;
        bool all = true;
        for (std::size_t i = 0; i < zones_->size(); ++i) {
          const auto& w = package_w_.size() > i ? package_w_[i] : std::nullopt;
          parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", (*zones_)[i].label,
                               w ? fmt::format("{:.0f} W", *w) : std::string("??"));
          if (w) total += *w;
          all = all && w.has_value();
        }
        power += all ? fmt::format("  CPU packages {}{:.0f} W{} ({})", col(Palette::bold_yellow),
                                   total, col(Palette::reset), parts)
                     : fmt::format("  CPU packages ?? ({}{})", parts,
                                   rapl_denied_ ? "; energy_uj is readable only by root, see "
                                                  "docs/energy.md"
                                                : "");
      }
      if (gpu_power_known_ > 0)
        power += fmt::format("  GPUs {}{:.0f} W{}", col(Palette::bold_yellow), gpu_power_w_,
                             col(Palette::reset));
      text.append(power + "\n");
    }
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

  struct RaplReading {
    std::vector<std::optional<double>> uj;
    Clock::time_point time;
    bool denied = false;
  };
  RaplReading read_rapl() const {
    RaplReading r;
    r.time = Clock::now();
    for (const auto& z : *zones_) {
      const rapl::Reading one = rapl::read_energy(z);
      r.uj.push_back(one.uj);
      r.denied = r.denied || one.denied;
    }
    return r;
  }

  std::optional<std::vector<rapl::Zone>> zones_;  ///< the CPU packages' RAPL zones
  RaplReading rapl_baseline_;
  std::vector<std::optional<double>> package_w_;
  bool rapl_denied_ = false;
  double gpu_power_w_ = 0;
  int gpu_power_known_ = 0;
  std::optional<procfs::ProcStat> baseline_;
  Clock::time_point baseline_time_;
  std::vector<std::optional<double>> per_core_;
  std::optional<double> total_;
  std::vector<double> load_;
  procfs::MemInfo mem_;
};

}  // namespace

StatusPluginRef host_status_plugin() {
  return {"host", "host CPU, load, memory, swap and power (CPU packages, GPUs)", 0, "builtin",
          sdk::detail::StatusAdapter<HostPlugin>::table()};
}

}  // namespace sonde::status
