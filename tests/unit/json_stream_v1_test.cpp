// sonde stream --protocol v1: sonde's stream lines as JUmPER's older protocol (the lines of
// native_c/collector.c on the feature/multinode-monitor and refactor/node-layer-monitor branches).
#include "sinks/json_stream_v1.hpp"

#include <stdexcept>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace sonde {
namespace {

using nlohmann::json;

const char* kReady =
    R"({"status":"ready","pid":42,"num_cpus":2,"num_system_cpus":4,"num_gpus":1,)"
    R"("gpu_memory":40.0,"gpu_name":"A100","memory_limits":{"process":23.5,"system":23.5},)"
    R"("cpu_handles":[0,1],"levels":["process","system"],"columns_by_level":{"process":["time"]},)"
    R"("interval":0.5,"node_info":{"x":1}})";

TEST(JsonStreamV1, ReadyKeepsTheV1KeysInOrder) {
  JsonStreamV1 c;
  const std::string out = c.convert(kReady);
  EXPECT_EQ(out,
            R"({"status":"ready","pid":42,"num_cpus":2,"num_system_cpus":4,"num_gpus":1,)"
            R"("gpu_memory":40.0,"gpu_name":"A100","memory_limits":{"process":23.5,"system":23.5},)"
            R"("cpu_handles":[0,1],"levels":["process","system"]})"
            "\n");
}

TEST(JsonStreamV1, SampleAsTheCCollectorWritesIt) {
  JsonStreamV1 c;
  (void)c.convert(kReady);
  const std::string s1 =
      R"({"level":"process","wallclock":1700000000.25,"sample":{"time":100.5,"cpu_util_1":50,)"
      R"("cpu_util_0":null,"cpu_util_avg":25,"cpu_util_min":0,"cpu_util_max":50,"memory":1.5,)"
      R"("gpu_util_0":80,"gpu_band_0":40,"gpu_mem_0":2.25,"io_read_count":10,)"
      R"("io_write_count":4,"io_read":2048,"io_write":1000,"num_procs":3}})";
  // The first sample covers one interval (0.5 s): io_counters are rate x 0.5.
  EXPECT_EQ(c.convert(s1),
            R"({"time":100.500000,"wallclock":1700000000.250000,"level":"process","sample":)"
            R"({"cpu_util":[0.0000,50.0000],"memory":1.500000,"gpu_util":[80.0000],)"
            R"("gpu_band":[40.0000],"gpu_mem":[2.2500],"io_counters":[5,2,1024,500]}})"
            "\n");
  // Cumulative from then on: + rate x (time since the level's previous sample).
  const std::string s2 =
      R"({"level":"process","wallclock":1700000001.25,"sample":{"time":101.5,"cpu_util_0":1,)"
      R"("cpu_util_1":2,"memory":1.5,"io_read_count":1,"io_write_count":1,"io_read":100,)"
      R"("io_write":null}})";
  const json j = json::parse(c.convert(s2));
  EXPECT_EQ(j["sample"]["io_counters"], json::parse("[6,3,1124,500]"));
  EXPECT_EQ(j["sample"]["cpu_util"], json::parse("[1.0,2.0]"));
  EXPECT_TRUE(j["sample"]["gpu_util"].empty());  // no GPU columns: empty lists, as v1 without NVML
  EXPECT_EQ(j["level"], "process");
  EXPECT_DOUBLE_EQ(j["time"].get<double>(), 101.5);
  // Another level keeps its own totals.
  const std::string sys =
      R"({"level":"system","wallclock":1700000001.25,"sample":{"time":101.5,"cpu_util_0":1,)"
      R"("io_read":10}})";
  EXPECT_EQ(json::parse(c.convert(sys))["sample"]["io_counters"], json::parse("[0,0,5,0]"));
}

TEST(JsonStreamV1, ErrorLinesPassAndBadLinesAreErrors) {
  JsonStreamV1 c;
  const std::string err = R"({"status":"error","error":"no such pid","message":"no such pid"})";
  EXPECT_EQ(c.convert(err), err + "\n");
  EXPECT_THROW((void)c.convert("not json"), std::invalid_argument);
  EXPECT_THROW((void)c.convert(R"({"level":"process"})"), std::invalid_argument);
  EXPECT_THROW((void)c.convert("[1,2]"), std::invalid_argument);
}

}  // namespace
}  // namespace sonde
