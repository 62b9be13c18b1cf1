#pragma once
// Scenario files of the fake GPU libraries (see README.md in this directory): loading, pid
// placeholders, "not supported" lists. Header-only, compiled into each fake library.
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

// LeakSanitizer's, present only where the process runs under ASan (weak: null elsewhere).
extern "C" void __lsan_ignore_object(const void* p) __attribute__((weak));

namespace fake {

using nlohmann::json;

/// `*p`, never destroyed. sonde may exit while a watchdog worker it abandoned is still inside a
/// call (by design: the worker's collector is leaked, not torn down), so the fakes' state must
/// outlive the exit handlers, as a driver's does. Once the library is dlclose()d, the only
/// pointer to it is unmapped: the object is told to LeakSanitizer as intended, not a leak (the
/// unit tests open and close the fakes many times in one process).
template <class T>
T& immortal(T* p) {
  if (__lsan_ignore_object != nullptr) __lsan_ignore_object(p);
  return *p;
}

/// CLOCK_MONOTONIC seconds.
inline double monotonic_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

/// A device's energy counter in millijoules at `now_s`: `energy_mj`, plus `energy_rate_mw`
/// (mW = mJ/s) for every second since `loaded_s` (the initialisation that read the scenario).
inline double energy_mj(const json& dev, double loaded_s, double now_s) {
  return dev.value("energy_mj", 0.0) + dev.value("energy_rate_mw", 0.0) * (now_s - loaded_s);
}

/// The scenario named by `specific_env` (e.g. SONDE_FAKE_NVML_SCENARIO), else
/// SONDE_FAKE_GPU_SCENARIO. Returns false with `error` set when there is none or it is not JSON.
inline bool load_scenario(const char* specific_env, json& out, std::string& error) {
  const char* path = std::getenv(specific_env);
  if (path == nullptr || *path == '\0') path = std::getenv("SONDE_FAKE_GPU_SCENARIO");
  if (path == nullptr || *path == '\0') {
    error = std::string("no scenario: set ") + specific_env + " or SONDE_FAKE_GPU_SCENARIO";
    return false;
  }
  std::ifstream in(path);
  if (!in) {
    error = std::string("cannot read scenario ") + path;
    return false;
  }
  try {
    out = json::parse(in);
  } catch (const std::exception& e) {
    error = std::string("bad scenario ") + path + ": " + e.what();
    return false;
  }
  return true;
}

/// Numeric pids in /proc, ascending.
inline std::vector<int> proc_pids() {
  std::vector<int> pids;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long v = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0') pids.push_back(static_cast<int>(v));
    }
    closedir(d);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

inline std::string comm_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

inline int ppid_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

inline bool descends_from_self(int pid) {
  const int self = static_cast<int>(getpid());
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    pid = ppid_of(pid);
    if (pid == self) return true;
  }
  return false;
}

/// Resolves pid placeholders. Cached where stable; "comm:" is looked up again when its process
/// is gone.
class Pids {
 public:
  /// 0 when the placeholder resolves to no process now. Thread-safe, as the real libraries are:
  /// sonde's GPU and energy collectors call in from different watchdog workers (a data race on
  /// the caches under TSan, python_monitor).
  int resolve(const json& spec) {
    static std::mutex& mu = immortal(new std::mutex);
    std::lock_guard<std::mutex> lock(mu);
    if (spec.is_number_integer()) return spec.get<int>();
    if (!spec.is_string()) return 0;
    const std::string s = spec.get<std::string>();
    if (s == "self") return static_cast<int>(getpid());
    if (s == "parent") return static_cast<int>(getppid());
    if (s.rfind("env:", 0) == 0) {
      const std::size_t n = std::stoul(s.substr(4));
      const std::vector<int> env = env_pids();
      return n < env.size() ? env[n] : static_cast<int>(getpid());
    }
    if (s.rfind("proc:", 0) == 0) {
      if (all_.empty()) all_ = proc_pids();
      const std::size_t n = std::stoul(s.substr(5));
      return all_.empty() ? 0 : all_[n % all_.size()];
    }
    if (s.rfind("comm:", 0) == 0) {
      const std::string comm = s.substr(5, 15);  // the kernel keeps 15 characters of comm
      auto it = comm_cache_.find(comm);
      if (it != comm_cache_.end() && comm_of(it->second) == comm) return it->second;
      // Descendants of this process first: tests run in parallel, each sonde with its own
      // workload of the same name.
      int other = 0;
      for (int pid : proc_pids())
        if (comm_of(pid) == comm) {
          if (descends_from_self(pid)) {
            comm_cache_[comm] = pid;
            return pid;
          }
          if (other == 0) other = pid;
        }
      comm_cache_.erase(comm);
      return other;
    }
    return 0;
  }

 private:
  static std::vector<int> env_pids() {
    std::vector<int> out;
    const char* e = std::getenv("SONDE_FAKE_GPU_PIDS");
    if (e == nullptr) return out;
    std::stringstream ss(e);
    std::string item;
    while (std::getline(ss, item, ','))
      if (!item.empty()) out.push_back(std::atoi(item.c_str()));
    return out;
  }
  std::vector<int> all_;
  std::map<std::string, int> comm_cache_;
};

/// The device's "not_supported" list.
inline bool unsupported(const json& dev, const char* what) {
  auto it = dev.find("not_supported");
  if (it == dev.end() || !it->is_array()) return false;
  return std::find(it->begin(), it->end(), what) != it->end();
}

}  // namespace fake
