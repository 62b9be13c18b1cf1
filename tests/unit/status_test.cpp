// The renderings of src/views/status.cpp on hand-made data: gpustat's line format and JSON keys,
// sonde's JSON, unknown values as ?? / null, and the hooks' text calls without plugins.
#include "views/status.hpp"

#include <regex>

#include <gtest/gtest.h>

#include "views/status_hooks.hpp"

namespace sonde::status {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

StatusData sample() {
  StatusData d;
  d.hostname = "node01";
  d.query_time = std::chrono::system_clock::from_time_t(1'700'000'000);
  d.nvidia_driver = "550.54.15";
  d.nvml_loaded = true;
  GpuRow a;
  a.device.index = 0;
  a.device.vendor = "nvidia";
  a.device.name = "NVIDIA A100-SXM4-40GB";
  a.device.uuid = "GPU-0";
  a.device.temperature_c = 34;
  a.device.fan_percent = 7;
  a.device.util_gpu = 12.6;
  a.device.enc_util = 0;
  a.device.dec_util = 3;
  a.device.power_w = 71.9;
  a.device.power_limit_w = 400;
  a.device.mem_used_bytes = 1234 * kMiB;
  a.device.mem_total_bytes = 40960 * kMiB;
  a.processes.emplace();
  ProcessRow alice;
  alice.pid = 1200;
  alice.user = "alice";
  alice.command = "python";
  alice.full_command = {"/usr/bin/python", "train.py"};
  alice.gpu_memory_bytes = 1200 * kMiB;
  alice.cpu_percent = 99.6;
  alice.rss_bytes = 123456789;
  ProcessRow bob;
  bob.pid = 1300;
  bob.user = "bob";
  bob.command = "julia";
  bob.full_command = {"julia"};
  bob.gpu_memory_bytes = 34 * kMiB;
  bob.fields.push_back(Field{"slurm_job_id", "77", std::nullopt});
  a.processes->push_back(alice);
  a.processes->push_back(bob);
  GpuRow k;
  k.device.index = 1;
  k.device.vendor = "nvidia";
  k.device.name = "Tesla K80";
  k.device.uuid = "GPU-1";
  k.device.temperature_c = 30;
  k.device.mem_used_bytes = 0;
  k.device.mem_total_bytes = 11441 * kMiB;
  d.gpus = {a, k};
  return d;
}

StatusHooks no_plugins(const std::string& command) {
  StatusSettings s;
  s.command = command;
  return StatusHooks({}, s);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

TEST(GpustatText, DefaultLine) {
  auto hooks = no_plugins("gpustat");
  GpustatOptions o;
  const auto l = lines(gpustat_text(sample(), hooks, o, false));
  ASSERT_EQ(l.size(), 3u);
  EXPECT_TRUE(std::regex_match(
      l[0], std::regex(R"(node01 {18}  \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d 2023  550\.54\.15)")))
      << l[0];
  EXPECT_EQ(l[1],
            "[0] NVIDIA A100-SXM4-40GB | 34°C,  12 % |  1234 / 40960 MB | alice(1200M) bob(34M)");
  EXPECT_EQ(l[2], "[1] Tesla K80             | 30°C,  ?? % |     0 / 11441 MB | (Not Supported)");
}

TEST(GpustatText, Flags) {
  auto hooks = no_plugins("gpustat");
  GpustatOptions o;
  o.show_header = false;
  o.show_cmd = o.show_user = o.show_pid = o.show_fan = true;
  o.show_codec = "enc,dec";
  o.show_power = "draw,limit";
  const auto l = lines(gpustat_text(sample(), hooks, o, false));
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0],
            "[0] NVIDIA A100-SXM4-40GB | 34°C,   7 %,  12 % (E:   0 %  D:   3 %),   71 / 400 W |  "
            "1234 / 40960 MB | alice:python/1200(1200M) bob:julia/1300(34M)");
  o = {};
  o.show_header = false;
  o.show_codec = "dec";
  o.show_power = "draw";
  o.gpuname_width = 10;
  o.show_full_cmd = true;
  o.no_processes = false;
  const auto f = lines(gpustat_text(sample(), hooks, o, false));
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(
      f[0],
      "[0] …SXM4-40GB | 34°C,  12 % (D:   3 %),   71 |  1234 / 40960 MB | alice(1200M) bob(34M)");
  EXPECT_EQ(f[1], " ├─   1200 ( 100%,  117MB): /usr/bin/python train.py");
  EXPECT_EQ(f[2], " └─   1300 (  --%,     0B): julia");
  EXPECT_EQ(f[3],
            "[1] Tesla K80  | 30°C,  ?? % (D:  ?? %),   ?? |     0 / 11441 MB | (Not Supported)");
  o = {};
  o.no_processes = true;
  o.show_header = false;
  EXPECT_EQ(lines(gpustat_text(sample(), hooks, o, false))[0],
            "[0] NVIDIA A100-SXM4-40GB | 34°C,  12 % |  1234 / 40960 MB");
  // Colours only when asked.
  EXPECT_NE(gpustat_text(sample(), hooks, o, true).find("\x1b["), std::string::npos);
}

TEST(GpustatJson, KeysAndValues) {
  const auto j = gpustat_json(sample(), {});
  std::vector<std::string> top;
  for (auto it = j.begin(); it != j.end(); ++it) top.push_back(it.key());
  EXPECT_EQ(top, (std::vector<std::string>{"hostname", "driver_version", "query_time", "gpus"}));
  const auto& g = j["gpus"][0];
  std::vector<std::string> keys;
  for (auto it = g.begin(); it != g.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"index", "uuid", "name", "temperature.gpu", "fan.speed",
                                            "utilization.gpu", "utilization.enc", "utilization.dec",
                                            "power.draw", "enforced.power.limit", "memory.used",
                                            "memory.total", "processes"}));
  EXPECT_EQ(g["utilization.gpu"], 12);  // gpustat's integers
  EXPECT_EQ(g["power.draw"], 71);
  EXPECT_EQ(g["memory.used"], 1234);
  const auto& p = g["processes"][0];
  std::vector<std::string> pk;
  for (auto it = p.begin(); it != p.end(); ++it) pk.push_back(it.key());
  EXPECT_EQ(pk, (std::vector<std::string>{"username", "command", "full_command", "gpu_memory_usage",
                                          "cpu_percent", "cpu_memory_usage", "pid"}));
  EXPECT_EQ(p["gpu_memory_usage"], 1200);
  EXPECT_EQ(p["cpu_memory_usage"], 123456789);
  EXPECT_EQ(g["processes"][1]["slurm_job_id"], "77");
  EXPECT_TRUE(g["processes"][1]["cpu_percent"].is_null());
  const auto& k = j["gpus"][1];
  for (const char* key : {"fan.speed", "utilization.gpu", "power.draw", "processes"})
    EXPECT_TRUE(k[key].is_null()) << key;
}

TEST(StatusJson, UnknownIsNull) {
  const auto j = status_json(sample());
  EXPECT_EQ(j["driver_version"]["nvidia"], "550.54.15");
  EXPECT_TRUE(j["driver_version"]["amd"].is_null());
  EXPECT_DOUBLE_EQ(j["gpus"][0]["util_gpu_percent"].get<double>(), 12.6);
  EXPECT_TRUE(j["gpus"][1]["util_gpu_percent"].is_null());
  EXPECT_TRUE(j["gpus"][1]["processes"].is_null());
  EXPECT_EQ(j["gpus"][0]["processes"][1]["slurm_job_id"], "77");
}

TEST(StatusText, Lines) {
  auto hooks = no_plugins("status");
  const auto l = lines(status_text(sample(), hooks, false));
  ASSERT_EQ(l.size(), 5u);
  EXPECT_NE(l[0].find("NVIDIA driver 550.54.15"), std::string::npos);
  EXPECT_EQ(
      l[1].rfind("[0] NVIDIA A100-SXM4-40GB |  34°C,  13 % util,  ?? % mem bw |   1.2 GiB /  40.0 "
                 "GiB |  72 / 400 W",
                 0),
      0u)
      << l[1];
  EXPECT_NE(l[2].find("alice"), std::string::npos);
  EXPECT_NE(l[3].find("slurm_job_id=77"), std::string::npos) << l[3];
  EXPECT_NE(l[4].find("processes: not supported"), std::string::npos) << l[4];
}

TEST(StatusFormat, Helpers) {
  EXPECT_EQ(human_bytes(std::nullopt), "??");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(3 * kMiB), "3 MiB");
  EXPECT_EQ(human_bytes(1536 * kMiB), "1.5 GiB");
  EXPECT_EQ(int_or_unknown(std::nullopt), "??");
  EXPECT_EQ(int_or_unknown(41.6), "42");
  EXPECT_TRUE(std::regex_match(iso_time(std::chrono::system_clock::from_time_t(0)),
                               std::regex(R"(19(69|70)-\d\d-\d\dT\d\d:\d\d:\d\d\.000000)")));
}

}  // namespace
}  // namespace sonde::status
