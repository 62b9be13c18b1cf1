// cpp_ctxswitch: voluntary and involuntary context switches per second of each level's processes,
// as a sonde collector written with the C++ SDK (<sonde/sdk.hpp>).
//
// Raw value: Counters{voluntary, involuntary}, cumulative; the default handler,
// CumulativeRateHandler with columns [ctx_voluntary, ctx_involuntary], turns them into switches
// per second. A voluntary switch is a thread giving up the CPU (waiting for I/O, a lock, a child,
// a sleep); an involuntary one is the scheduler taking the CPU away (time slice over, preempted).
//
// For every process of a level the collector reads voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches of each of its threads (/proc/<pid>/task/<tid>/status;
// /proc/<pid>/status alone counts the main thread only). It remembers each thread's last counts
// per level and adds each thread's growth to a per-level total, so a thread or process that ends
// never makes the total go back (the way sonde's own io collector sums /proc/<pid>/io). A thread
// seen for the first time adds all of its switches: it started after the previous tick.
//
// The system level has no value (devices() is -1 there, so perf_system.csv has no ctx_ columns):
// the node-wide counter, `ctxt` in /proc/stat, does not tell voluntary from involuntary switches,
// and the tick's context lists the processes of the process, user and slurm levels only.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <sonde/sdk.hpp>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

using sonde::sdk::Counters;
using sonde::sdk::Level;
using sonde::sdk::Tick;
using sonde::sdk::Value;

struct Switches {
  std::uint64_t voluntary = 0;
  std::uint64_t involuntary = 0;
};

/// The number after `key` at the start of a line of /proc/<pid>/status text, if any.
std::optional<std::uint64_t> status_field(std::string_view text, std::string_view key) {
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, key.size()) != key) continue;
    line.remove_prefix(key.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
    if (ec != std::errc() || ptr == line.data()) return std::nullopt;
    return value;
  }
  return std::nullopt;
}

/// Both counts from /proc/<pid>/status text; nullopt when either is missing.
std::optional<Switches> parse_switches(std::string_view status) {
  const auto vol = status_field(status, "voluntary_ctxt_switches:");
  const auto invol = status_field(status, "nonvoluntary_ctxt_switches:");
  if (!vol || !invol) return std::nullopt;
  return Switches{*vol, *invol};
}

/// Reads a whole small file into `buf`; false when it cannot be opened or read (the process has
/// ended since the tick's scan, which is normal).
bool read_small_file(const std::string& path, std::string& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  buf.clear();
  std::array<char, 4096> chunk;
  for (;;) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return n == 0;
    }
    buf.append(chunk.data(), static_cast<std::size_t>(n));
  }
}

class ContextSwitches : public sonde::sdk::Collector {
 public:
  using Collector::Collector;

  long devices(Level level) override { return level == Level::system ? -1 : 1; }

  // Threads are read once per tick, however many levels a process belongs to.
  void snapshot(const Tick&) override { threads_.clear(); }

  Value collect(Level level, const Tick& tick) override {
    LevelState& state = levels_[static_cast<std::size_t>(level)];
    std::unordered_map<int, Switches> now;
    tick.for_each_pid(level, [&](const sonde_pid_info& p) {
      for (const auto& [tid, cur] : threads_of(p)) {
        Switches prev;  // a new thread counts from zero
        const auto it = state.last.find(tid);
        // Lower counts than last time: the id was reused by a new thread.
        if (it != state.last.end() && cur.voluntary >= it->second.voluntary &&
            cur.involuntary >= it->second.involuntary)
          prev = it->second;
        state.total_voluntary += static_cast<double>(cur.voluntary - prev.voluntary);
        state.total_involuntary += static_cast<double>(cur.involuntary - prev.involuntary);
        now[tid] = cur;
      }
    });
    state.last = std::move(now);  // threads that ended keep their share in the totals
    return Counters{{state.total_voluntary, state.total_involuntary}};
  }

 private:
  struct LevelState {
    std::unordered_map<int, Switches> last;  ///< by thread id
    double total_voluntary = 0;
    double total_involuntary = 0;
  };

  /// (tid, switches) of every thread of a process that could be read this tick.
  const std::vector<std::pair<int, Switches>>& threads_of(const sonde_pid_info& p) {
    auto [it, fresh] = threads_.try_emplace(p.pid);
    if (!fresh) return it->second;
    auto& out = it->second;
    const std::string dir = "/proc/" + std::to_string(p.pid);
    auto add = [&](int tid, const std::string& status_path) {
      if (!read_small_file(status_path, buf_)) return;
      if (const auto s = parse_switches(buf_)) out.emplace_back(tid, *s);
    };
    if (p.num_threads <= 1) {  // the common case: no directory listing
      add(p.pid, dir + "/status");
      return out;
    }
    DIR* tasks = ::opendir((dir + "/task").c_str());
    if (tasks == nullptr) return out;
    while (const dirent* e = ::readdir(tasks)) {
      int tid = 0;
      const std::string_view name(e->d_name);
      const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), tid);
      if (ec != std::errc() || ptr != name.data() + name.size()) continue;  // "." and ".."
      add(tid, dir + "/task/" + std::string(name) + "/status");
    }
    ::closedir(tasks);
    return out;
  }

  std::array<LevelState, 4> levels_;  ///< by sonde::sdk::Level
  std::unordered_map<int, std::vector<std::pair<int, Switches>>> threads_;  ///< this tick, by pid
  std::string buf_;
};

}  // namespace

SONDE_COLLECTOR_PLUGIN(
    ContextSwitches, "ctxswitch",
    "voluntary and involuntary context switches per second of each level's threads", 10,
    "{inject: [], handler: {_target_: CumulativeRateHandler, "
    "columns: [ctx_voluntary, ctx_involuntary]}}")
