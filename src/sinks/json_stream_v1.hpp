#pragma once
// JUmPER's older collector protocol ("v1": branches feature/multinode-monitor and
// refactor/node-layer-monitor of ScaDS/jumper_jupyter_performance, native_c/collector.c), made
// from the lines of sonde's stream (the current protocol, src/sinks/json_stream.cpp):
//
//   {"status":"ready","pid":…,"num_cpus":…,"num_system_cpus":…,"num_gpus":…,"gpu_memory":…,
//    "gpu_name":"…","memory_limits":{…},"cpu_handles":[…],"levels":[…]}
//   {"time":t,"wallclock":w,"level":"process","sample":{"cpu_util":[…],"memory":GiB,
//    "gpu_util":[…],"gpu_band":[…],"gpu_mem":[…],"io_counters":[reads,writes,rbytes,wbytes]}}
//
// Per-core and per-GPU lists in column order (cpu_util_0, cpu_util_1, …); a value sonde did not
// measure is 0.0 there (v1 has no null, as JUmPER's C collector writes NaN as 0.0); io_counters
// are cumulative, as v1 readers take differences: sonde's rates times the time between samples,
// summed per level from the first sample. Error lines pass unchanged.
#include <map>
#include <string>
#include <string_view>

namespace sonde {

class JsonStreamV1 {
 public:
  /// The v1 line (with its "\n") for one line of sonde's stream (without or with its "\n").
  /// A line that is not a JSON object of the stream throws std::invalid_argument naming it.
  std::string convert(std::string_view line);

 private:
  struct Io {
    double last_time = 0;
    bool have_time = false;
    double totals[4] = {0, 0, 0, 0};
  };
  double interval_s_ = 0;
  std::map<std::string, Io> io_;  // per level
};

}  // namespace sonde
