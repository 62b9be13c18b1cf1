// `sonde status` and `sonde gpustat` through the real binary: every fake GPU scenario (text and
// JSON, checked key by key), the `gpustat` link name, gpustat's no-driver error, status plugins
// (an option and a field through the hooks, hook order by priority) and watch mode in a
// pseudo-terminal (tmux).
#include <sys/stat.h>

#include <unistd.h>
#include <csignal>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"
#include "support/tmux.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

std::string hostname() {
  char h[256] = {0};
  ::gethostname(h, sizeof h - 1);
  return h;
}

// env:0, env:1 and env:2 of the scenarios: this test process, pid 1, pid 1.
std::string fmt_pids() {
  return std::to_string(::getpid()) + ",1,1";
}

/// Environment without plugins of the user's, and with the given GPU libraries.
RunOptions env_for(const fs::path& scratch, const std::string& nvml, const std::string& scenario,
                   const std::string& rocm = "/nonexistent/librocm_smi64.so") {
  RunOptions o;
  fs::create_directories(scratch / "config");
  o.env = {{"SONDE_NVML_LIBRARY", nvml},
           {"SONDE_ROCM_SMI_LIBRARY", rocm},
           {"XDG_CONFIG_HOME", (scratch / "config").string()},
           {"SONDE_PLUGIN_PATH", ""},
           {"SONDE_FAKE_GPU_PIDS", fmt_pids()},
           {"SONDE_FAKE_NVML_SCENARIO", scenario},
           {"SONDE_FAKE_ROCM_SCENARIO", scenario},
           {"SONDE_FAKE_GPU_SCENARIO", scenario}};
  o.unset_env = {"NO_COLOR"};
  o.timeout_s = 30;
  return o;
}

json parse_json(const RunResult& r) {
  try {
    return json::parse(r.out);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("not JSON: ") + e.what() + "\n" + r.out);
  }
}

std::set<std::string> keys_of(const json& o) {
  std::set<std::string> k;
  for (auto it = o.begin(); it != o.end(); ++it) k.insert(it.key());
  return k;
}

const std::set<std::string> kGpustatGpuKeys = {"index",
                                               "uuid",
                                               "name",
                                               "temperature.gpu",
                                               "fan.speed",
                                               "utilization.gpu",
                                               "utilization.enc",
                                               "utilization.dec",
                                               "power.draw",
                                               "enforced.power.limit",
                                               "memory.used",
                                               "memory.total",
                                               "processes"};
const std::set<std::string> kGpustatProcessKeys = {
    "username",    "command",          "full_command", "gpu_memory_usage",
    "cpu_percent", "cpu_memory_usage", "pid"};
// Fields the built-in status plugins may add to a process on some machines.
const std::set<std::string> kPluginProcessKeys = {"slurm_job_id", "container", "k8s_pod"};

// gpustat's JSON: the top-level keys, and every GPU and process with gpustat's keys (processes
// may carry the built-in plugins' fields too).
void expect_gpustat_shape(const json& j) {
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(keys_of(j),
            (std::set<std::string>{"hostname", "driver_version", "query_time", "gpus", "host"}));
  EXPECT_EQ(j["hostname"], hostname());
  EXPECT_TRUE(std::regex_match(j["query_time"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})")))
      << j["query_time"];
  for (const auto& g : j["gpus"]) {
    auto k = keys_of(g);
    k.erase("error");
    EXPECT_EQ(k, kGpustatGpuKeys) << g.dump();
    if (!g["processes"].is_array()) continue;
    for (const auto& p : g["processes"]) {
      auto pk = keys_of(p);
      for (const auto& extra : kPluginProcessKeys) pk.erase(extra);
      EXPECT_EQ(pk, kGpustatProcessKeys) << p.dump();
      EXPECT_TRUE(p["pid"].is_number_integer());
      EXPECT_TRUE(p["full_command"].is_array());
    }
  }
}

bool has_ansi(const std::string& s) {
  return s.find("\x1b[") != std::string::npos;
}

// ---- a node without GPUs (this machine's usual case) ----

TEST(Status, NodeWithoutGpusSaysWhyAndExitsZero) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, "/nonexistent/libnvidia-ml.so.1", "");
  const auto r = sonde({"status", "--cpu-interval", "0.05"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0].rfind(hostname(), 0), 0u) << lines[0];
  EXPECT_NE(r.out.find("No GPU found: NVML: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\ncpu +\d+ cores +avg +\d+ %)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\nmem  .* used \(\d+ %\))"))) << r.out;
  EXPECT_FALSE(has_ansi(r.out)) << "colours in a pipe";

  const auto c = sonde({"status", "--force-color", "--cpu-interval", "0"}, o);
  ASSERT_EQ(c.status, 0) << c.describe();
  EXPECT_TRUE(has_ansi(c.out));
  EXPECT_NE(c.out.find("utilisation not measured"), std::string::npos) << c.out;

  const auto j = sonde({"status", "--json", "--cpu-interval", "0.05"}, o);
  ASSERT_EQ(j.status, 0) << j.describe();
  const json d = parse_json(j);
  EXPECT_EQ(d["hostname"], hostname());
  EXPECT_TRUE(d["gpus"].is_array() && d["gpus"].empty());
  ASSERT_FALSE(d["notes"].empty());
  EXPECT_TRUE(d["driver_version"]["nvidia"].is_null());
  const json& host = d["host"];
  EXPECT_GT(host["cpus"].get<double>(), 0);
  EXPECT_GE(host["cpu_util_percent"].get<double>(), 0);
  EXPECT_LE(host["cpu_util_percent"].get<double>(), 100);
  EXPECT_GT(host["mem_total_bytes"].get<double>(), 0);
  EXPECT_GE(host["mem_used_bytes"].get<double>(), 0);
  EXPECT_EQ(host["load1"].is_number(), true);
}

TEST(Status, UsageErrorsExitTwo) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, "/nonexistent/libnvidia-ml.so.1", "");
  const auto r = sonde({"status", "--cpu-interval", "-1"}, o);
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find("--cpu-interval"), std::string::npos) << r.err;
  EXPECT_EQ(sonde({"status", "--json", "-i", "1"}, o).status, 2);
  EXPECT_EQ(sonde({"status", "--color", "--no-color"}, o).status, 2);
  EXPECT_EQ(sonde({"gpustat", "--id", "0,x"}, o).status, 2);
  EXPECT_EQ(sonde({"gpustat", "-P", "watts"}, o).status, 2);
}

TEST(Gpustat, NoDriverGivesGpustatsErrorAndStatusOne) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, "/nonexistent/libnvidia-ml.so.1", "");
  const auto r = sonde({"gpustat"}, o);
  EXPECT_EQ(r.status, 1) << r.describe();
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(
      r.err.rfind("Error on querying NVIDIA devices. Use --debug flag to see more details.\n", 0),
      0u)
      << r.err;
  // The same binary through a link named gpustat.
  const fs::path link = dir / "gpustat";
  fs::create_symlink(sonde_binary(), link);
  const auto l = run_command({link.string(), "--json"}, o);
  EXPECT_EQ(l.status, 1) << l.describe();
  EXPECT_EQ(l.err.rfind("Error on querying NVIDIA devices.", 0), 0u) << l.err;
}

#ifdef SONDE_FAKE_NVML

std::string scenario(const std::string& name) {
  return std::string(SONDE_FAKE_SCENARIOS) + "/" + name + ".json";
}

// ---- (a) three GPUs and one that supports little ----

TEST(Status, ThreeGpusAndAnUnsupportedOneText) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus"));
  const auto r = sonde({"status", "--cpu-interval", "0.05"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(lines_of(r.out)[0].find("NVIDIA driver 550.54.15"), std::string::npos) << r.out;
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(std::regex_search(r.out, std::regex("\n\\[" + std::to_string(i) + "\\] ")))
        << "GPU " << i << "\n"
        << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(
          R"(\[0\] NVIDIA A100-SXM4-40GB \|  41°C,  87 % util,  45 % mem bw \| +20\.0 GiB / +40\.0 GiB \| 25\d / 400 W)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\[3\] Tesla K80 +\|  35°C,  \?\? % util)")))
      << r.out;
  EXPECT_NE(r.out.find("processes: not supported"), std::string::npos) << r.out;
  // pid 1 with 2 GiB on GPU 0, under its user (root here, or whoever it is).
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"([├└]─ \S+ +1 +2\.0 GiB gpu mem)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(sonde)"))) << r.out;
}

TEST(Status, ThreeGpusJson) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus"));
  const auto r = sonde({"status", "--json", "--cpu-interval", "0.05"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  EXPECT_EQ(d["driver_version"]["nvidia"], "550.54.15");
  ASSERT_EQ(d["gpus"].size(), 4u);
  const json& g0 = d["gpus"][0];
  EXPECT_EQ(g0["index"], 0);
  EXPECT_EQ(g0["vendor"], "nvidia");
  EXPECT_EQ(g0["name"], "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(g0["uuid"], "GPU-a1000000-0000-0000-0000-000000000000");
  EXPECT_DOUBLE_EQ(g0["temperature_c"].get<double>(), 41);
  EXPECT_DOUBLE_EQ(g0["fan_percent"].get<double>(), 30);
  EXPECT_DOUBLE_EQ(g0["util_gpu_percent"].get<double>(), 87);
  EXPECT_DOUBLE_EQ(g0["util_mem_percent"].get<double>(), 45);
  EXPECT_EQ(g0["mem_total_bytes"].get<std::uint64_t>(), 40960ull << 20);
  EXPECT_DOUBLE_EQ(g0["power_w"].get<double>(), 250.5);
  EXPECT_DOUBLE_EQ(g0["power_limit_w"].get<double>(), 400);
  EXPECT_TRUE(g0["error"].is_null());
  // self, env:0 (this test), pid 1; the graphics list repeats self and pid 1: merged by pid.
  std::map<int, json> procs;
  for (const auto& p : g0["processes"]) procs[p["pid"].get<int>()] = p;
  ASSERT_EQ(procs.size(), 3u) << g0.dump(2);
  ASSERT_EQ(procs.count(1), 1u);
  EXPECT_EQ(procs[1]["gpu_memory_bytes"].get<std::uint64_t>(), 2048ull << 20);
  ASSERT_EQ(procs.count(::getpid()), 1u);
  EXPECT_EQ(procs[::getpid()]["command"], "sonde_integration_tests");
  EXPECT_TRUE(procs[::getpid()]["rss_bytes"].get<std::uint64_t>() > 0);
  EXPECT_TRUE(procs[::getpid()]["cpu_percent"].is_number());
  bool saw_sonde = false;
  for (const auto& [pid, p] : procs) saw_sonde |= p["command"] == "sonde";
  EXPECT_TRUE(saw_sonde) << g0["processes"].dump(2);
  // The fourth: what is not supported is null, never 0.
  const json& g3 = d["gpus"][3];
  EXPECT_EQ(g3["name"], "Tesla K80");
  EXPECT_DOUBLE_EQ(g3["temperature_c"].get<double>(), 35);
  for (const char* k : {"util_gpu_percent", "power_w", "fan_percent", "enc_util_percent",
                        "dec_util_percent", "processes"})
    EXPECT_TRUE(g3[k].is_null()) << k << " = " << g3[k];
  EXPECT_GT(d["host"]["mem_total_bytes"].get<double>(), 0);
}

TEST(Gpustat, ThreeGpusTextInGpustatsFormat) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus"));
  const auto r = sonde({"gpustat"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_TRUE(std::regex_match(
      lines[0],
      std::regex(std::regex_replace(hostname(), std::regex(R"([.^$|()\[\]{}*+?\\-])"), R"(\$&)") +
                 R"( +\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}  550\.54\.15)")))
      << lines[0];
  EXPECT_EQ(lines[1].rfind("[0] NVIDIA A100-SXM4-40GB | 41°C,  87 % | 20480 / 40960 MB |", 0), 0u)
      << lines[1];
  EXPECT_TRUE(std::regex_search(lines[1], std::regex(R"(\| \S+\(2048M\) )"))) << lines[1];
  EXPECT_EQ(lines[3], "[2] NVIDIA A100-SXM4-40GB | 30°C,   0 % |     4 / 40960 MB |") << r.out;
  EXPECT_EQ(lines[4],
            "[3] Tesla K80             | 35°C,  ?? % |  1000 / 11441 MB | (Not Supported)")
      << r.out;
  EXPECT_FALSE(has_ansi(r.out));

  const auto a = sonde({"gpustat", "-a", "--no-header"}, o);
  ASSERT_EQ(a.status, 0) << a.describe();
  const auto al = lines_of(a.out);
  ASSERT_EQ(al.size(), 4u) << a.out;
  EXPECT_EQ(
      al[0].rfind("[0] NVIDIA A100-SXM4-40GB | 41°C,  30 %,  87 % (E:   0 %  D:   5 %),  250 / "
                  "400 W | 20480 / 40960 MB |",
                  0),
      0u)
      << al[0];
  EXPECT_TRUE(std::regex_search(al[0], std::regex(R"( \S+:\S+/1\(2048M\))"))) << al[0];
  EXPECT_NE(al[3].find("?? %,  ?? % (E:  ?? %  D:  ?? %),   ?? /  ?? W"), std::string::npos)
      << al[3];

  const auto ids = sonde({"gpustat", "--id", "1,2", "--no-header", "--no-processes"}, o);
  ASSERT_EQ(ids.status, 0) << ids.describe();
  const auto il = lines_of(ids.out);
  ASSERT_EQ(il.size(), 2u) << ids.out;
  EXPECT_EQ(il[0].rfind("[1] ", 0), 0u);
  EXPECT_EQ(il[1], "[2] NVIDIA A100-SXM4-40GB | 30°C,   0 % |     4 / 40960 MB");

  const auto w = sonde({"gpustat", "--gpuname-width", "8", "--no-header", "-P", "draw", "-c"}, o);
  ASSERT_EQ(w.status, 0) << w.describe();
  EXPECT_EQ(lines_of(w.out)[0].rfind("[0] …M4-40GB | 41°C,  87 %,  250 | 20480 / 40960 MB |", 0),
            0u)
      << w.out;
  EXPECT_NE(w.out.find(" sonde_integration_tests("), std::string::npos) << w.out;

  const auto f = sonde({"gpustat", "-f", "--no-header", "--id", "0"}, o);
  ASSERT_EQ(f.status, 0) << f.describe();
  const auto fl = lines_of(f.out);
  ASSERT_EQ(fl.size(), 4u) << f.out;
  EXPECT_EQ(fl[1].rfind(" ├─ ", 0), 0u) << f.out;
  EXPECT_EQ(fl[3].rfind(" └─ ", 0), 0u) << f.out;

  const auto c = sonde({"gpustat", "--color"}, o);
  EXPECT_TRUE(has_ansi(c.out));
}

TEST(Gpustat, ThreeGpusJsonKeyByKey) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus"));
  const auto r = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  expect_gpustat_shape(d);
  EXPECT_EQ(d["driver_version"], "550.54.15");
  ASSERT_EQ(d["gpus"].size(), 4u);
  const json& g = d["gpus"][0];
  EXPECT_EQ(g["index"], 0);
  EXPECT_EQ(g["uuid"], "GPU-a1000000-0000-0000-0000-000000000000");
  EXPECT_EQ(g["name"], "NVIDIA A100-SXM4-40GB");
  EXPECT_EQ(g["temperature.gpu"], 41);
  EXPECT_EQ(g["fan.speed"], 30);
  EXPECT_EQ(g["utilization.gpu"], 87);
  EXPECT_EQ(g["utilization.enc"], 0);
  EXPECT_EQ(g["utilization.dec"], 5);
  EXPECT_EQ(g["power.draw"], 250);
  EXPECT_EQ(g["enforced.power.limit"], 400);
  EXPECT_EQ(g["memory.used"], 20480);
  EXPECT_EQ(g["memory.total"], 40960);
  bool saw_init = false;
  for (const auto& p : g["processes"]) {
    if (p["pid"] != 1) continue;
    saw_init = true;
    EXPECT_EQ(p["gpu_memory_usage"], 2048);
    EXPECT_TRUE(p["username"].is_string());
    EXPECT_TRUE(p["cpu_memory_usage"].is_number_integer() || p["cpu_memory_usage"].is_null());
  }
  EXPECT_TRUE(saw_init) << g.dump(2);
  const json& k80 = d["gpus"][3];
  EXPECT_EQ(k80["temperature.gpu"], 35);
  EXPECT_EQ(k80["memory.used"], 1000);
  for (const char* k : {"fan.speed", "utilization.gpu", "utilization.enc", "utilization.dec",
                        "power.draw", "enforced.power.limit", "processes"})
    EXPECT_TRUE(k80[k].is_null()) << k << " = " << k80[k];
  // gpustat's own layout: four spaces of indent, "key": value.
  EXPECT_NE(r.out.find("{\n    \"hostname\": "), std::string::npos) << r.out.substr(0, 200);
}

// ---- (b) a driver without the _v3 process calls ----

TEST(Gpustat, DriverWithoutV3StillListsProcesses) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML_NO_V3, scenario("nvidia_no_v3"));
  const auto r = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  expect_gpustat_shape(d);
  ASSERT_FALSE(d["gpus"].empty());
  std::size_t n = 0;
  for (const auto& g : d["gpus"])
    if (g["processes"].is_array()) n += g["processes"].size();
  EXPECT_GT(n, 0u) << r.out;
  const auto s = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(s.status, 0) << s.describe();
  EXPECT_NE(s.out.find("├─"), std::string::npos) << s.out;
  const auto t = sonde({"gpustat"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(\(\d+M\))"))) << t.out;
}

// ---- (c) a lost GPU ----

TEST(Status, LostGpuKeepsItsSlotAndTheOthersShow) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_lost_gpu"));
  const auto r = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  ASSERT_EQ(d["gpus"].size(), 3u);
  EXPECT_TRUE(d["gpus"][0]["error"].is_null());
  EXPECT_TRUE(d["gpus"][1]["error"].is_string()) << d["gpus"][1];
  EXPECT_TRUE(d["gpus"][2]["error"].is_null());
  EXPECT_DOUBLE_EQ(d["gpus"][2]["util_gpu_percent"].get<double>(), 20);

  const auto t = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(\[1\] .*\| \S)"))) << t.out;
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(\[2\] NVIDIA H100 80GB HBM3 \|  40°C)")))
      << t.out;

  const auto g = sonde({"gpustat", "--no-header"}, o);
  ASSERT_EQ(g.status, 0) << g.describe();
  const auto gl = lines_of(g.out);
  ASSERT_EQ(gl.size(), 3u) << g.out;
  EXPECT_NE(gl[1].find("??°C,  ?? % |    ?? /    ?? MB | ("), std::string::npos) << gl[1];
  EXPECT_EQ(gl[2].rfind("[2] NVIDIA H100 80GB HBM3 | 40°C,  20 % |  2048 / 81559 MB |", 0), 0u)
      << gl[2];
  const auto gj = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(gj.status, 0) << gj.describe();
  const json gd = parse_json(gj);
  expect_gpustat_shape(gd);
  ASSERT_EQ(gd["gpus"].size(), 3u);
  EXPECT_TRUE(gd["gpus"][1]["memory.used"].is_null());
  EXPECT_EQ(gd["gpus"][2]["memory.used"], 2048);
}

// ---- (d) no devices, (e) initialisation failure ----

TEST(Status, DriverWithoutDevices) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_no_devices"));
  const auto r = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("No GPU found"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA driver 550.54.15"), std::string::npos) << r.out;
  const auto g = sonde({"gpustat"}, o);
  ASSERT_EQ(g.status, 0) << g.describe();  // gpustat: the header and its no-GPU line
  ASSERT_EQ(lines_of(g.out).size(), 2u) << g.out;
  EXPECT_EQ(lines_of(g.out)[1], "(No GPUs are available)");
  const auto j = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(j.status, 0) << j.describe();
  const json d = parse_json(j);
  expect_gpustat_shape(d);
  EXPECT_TRUE(d["gpus"].empty());
  EXPECT_EQ(d["driver_version"], "550.54.15");
}

TEST(Status, InitialisationFailure) {
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_init_failure"));
  const auto r = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.out.find("No GPU found: "), std::string::npos) << r.out;
  const auto j = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(j.status, 0) << j.describe();
  EXPECT_FALSE(parse_json(j)["notes"].empty());
  const auto g = sonde({"gpustat"}, o);
  EXPECT_EQ(g.status, 1) << g.describe();
  EXPECT_EQ(
      g.err.rfind("Error on querying NVIDIA devices. Use --debug flag to see more details.\n", 0),
      0u)
      << g.err;
}

// ---- AMD ----

TEST(Status, AmdScenario) {
  const auto dir = scratch_dir();
  const auto o =
      env_for(dir, "/nonexistent/libnvidia-ml.so.1", scenario("amd_two_gpus"), SONDE_FAKE_ROCM);
  const auto r = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  ASSERT_EQ(d["gpus"].size(), 2u) << r.out;
  for (const auto& g : d["gpus"]) {
    EXPECT_EQ(g["vendor"], "amd");
    EXPECT_EQ(g["name"], "AMD Instinct MI250X");
  }
  EXPECT_EQ(d["driver_version"]["amd"], "6.7.0");
  EXPECT_TRUE(d["driver_version"]["nvidia"].is_null());
  const json& g0 = d["gpus"][0];
  EXPECT_DOUBLE_EQ(g0["util_gpu_percent"].get<double>(), 93);
  EXPECT_DOUBLE_EQ(g0["temperature_c"].get<double>(), 52);
  EXPECT_EQ(g0["mem_used_bytes"].get<std::uint64_t>(), 49152ull << 20);
  EXPECT_DOUBLE_EQ(g0["power_w"].get<double>(), 350);
  ASSERT_TRUE(g0["processes"].is_array());
  EXPECT_EQ(g0["processes"].size(), 2u);
  EXPECT_TRUE(d["gpus"][1]["power_w"].is_null());
  EXPECT_TRUE(d["gpus"][1]["fan_percent"].is_null());

  const auto t = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  EXPECT_NE(t.out.find("AMD driver 6.7.0"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("[1] AMD Instinct MI250X"), std::string::npos) << t.out;
  // gpustat: the AMD GPUs in its format (as gpustat's ROCm support shows them).
  const auto g = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(g.status, 0) << g.describe();
  const json gd = parse_json(g);
  expect_gpustat_shape(gd);
  ASSERT_EQ(gd["gpus"].size(), 2u);
  EXPECT_EQ(gd["driver_version"], "6.7.0");
  EXPECT_EQ(gd["gpus"][0]["utilization.gpu"], 93);
  EXPECT_EQ(gd["gpus"][0]["memory.used"], 49152);
  EXPECT_TRUE(gd["gpus"][1]["power.draw"].is_null());
  const auto gt = sonde({"gpustat", "--no-header"}, o);
  ASSERT_EQ(gt.status, 0) << gt.describe();
  const auto gl = lines_of(gt.out);
  ASSERT_EQ(gl.size(), 2u) << gt.out;
  EXPECT_EQ(gl[0].rfind("[0] AMD Instinct MI250X | 52°C,  93 % | 49152 / 65536 MB |", 0), 0u)
      << gt.out;
}

// ---- status plugins ----

RunOptions with_status_plugins(const fs::path& dir, RunOptions o) {
  for (auto& [k, v] : o.env)
    if (k == "SONDE_PLUGIN_PATH") v = SONDE_TEST_STATUS_PLUGIN_DIR;
  o.env.emplace_back("SONDE_TEST_STATUS_TRACE", (dir / "trace.txt").string());
  return o;
}

// `sonde top` gives every process, GPU or not, to the plugins' host_processes hook (ABI 1.2) in
// one call per refresh, in priority order; their fields appear on the process's row. `status`
// never calls it.
TEST(StatusPlugins, TopGivesEveryProcessToHostProcesses) {
  const auto dir = scratch_dir();
  BackgroundProcess child({workload_binary(), "hold", "1", "58.25"});
  RunOptions o = with_status_plugins(dir, env_for(dir, "/nonexistent/libnvidia-ml.so.1", ""));
  o.env.emplace_back("SONDE_TEST_STATUS_PIDS", fmt::format("1,{}", child.pid()));
  sleep_for(0.3);
  const auto t = sonde({"top", "--once", "--interval", "0.2", "--filter", "hold 1 58.25"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  std::string row;
  for (const auto& l : lines_of(t.out))
    if (l.find("hold 1 58.25") != std::string::npos && l.find(" top ") == std::string::npos)
      row = l;
  ASSERT_FALSE(row.empty()) << t.out;
  EXPECT_NE(row.find(fmt::format("early_pid={}", child.pid())), std::string::npos) << row;
  EXPECT_NE(row.find(fmt::format("late_pid={}", child.pid())), std::string::npos) << row;
  // Once per refresh (--once: two refreshes, the first one the CPU baseline), early first.
  std::vector<std::string> calls;
  for (const auto& l : lines_of(read_file(dir / "trace.txt")))
    if (l.find("host_processes") != std::string::npos) calls.push_back(l);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front(), "early host_processes");
  EXPECT_LE(calls.size(), 4u) << "more than one call per plugin and refresh";
  // `sonde status` has no such hook call.
  fs::remove(dir / "trace.txt");
  const auto st = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(st.status, 0) << st.describe();
  EXPECT_EQ(read_file(dir / "trace.txt").find("host_processes"), std::string::npos);
}

TEST(StatusPlugins, OptionAndFieldsThroughTheHooks) {
  const auto dir = scratch_dir();
  const auto o =
      with_status_plugins(dir, env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus")));
  const auto j =
      sonde({"status", "--json", "--team", "ml", "--tag", "x7", "--cpu-interval", "0"}, o);
  ASSERT_EQ(j.status, 0) << j.describe();
  const json d = parse_json(j);
  ASSERT_EQ(d["gpus"].size(), 4u);
  EXPECT_EQ(d["gpus"][0]["seen_by_early"], 3);
  EXPECT_EQ(d["gpus"][0]["seen_by_late"], 3);
  EXPECT_EQ(d["gpus"][2]["seen_by_late"], 0);
  for (const auto& p : d["gpus"][0]["processes"]) {
    EXPECT_EQ(p["team"], "ml");
    EXPECT_EQ(p["tag"], "x7");
  }
  // In gpustat's JSON too, next to gpustat's keys.
  const auto g = sonde({"gpustat", "--json", "--team", "ops"}, o);
  ASSERT_EQ(g.status, 0) << g.describe();
  const json gd = parse_json(g);
  EXPECT_EQ(gd["gpus"][0]["processes"][0]["team"], "ops");
  EXPECT_EQ(gd["gpus"][0]["processes"][0]["tag"], "none");
  // Text: the field on each process line, the header and footer lines in priority order.
  const auto t = sonde({"status", "--team", "ml", "--cpu-interval", "0"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(  tag=none  .*team=ml)"))) << t.out;
  const auto early = t.out.find("[early] header"), late = t.out.find("[late] header");
  ASSERT_NE(early, std::string::npos) << t.out;
  ASSERT_NE(late, std::string::npos) << t.out;
  EXPECT_LT(early, late);
  EXPECT_LT(t.out.find("[early] footer"), t.out.find("[late] footer"));
  // gpustat's process entries, as repr_process left them: early first, then late.
  const auto gt = sonde({"gpustat", "--no-header", "--id", "0"}, o);
  ASSERT_EQ(gt.status, 0) << gt.describe();
  EXPECT_NE(gt.out.find("(2048M) early late"), std::string::npos) << gt.out;
  // A refused option value is a usage error from configure.
  const auto bad = sonde({"status", "--team", "bad"}, o);
  EXPECT_EQ(bad.status, 2) << bad.describe();
  EXPECT_NE(bad.err.find("'bad' is refused"), std::string::npos) << bad.err;
  // Plugin options are listed in --help.
  const auto help = sonde({"status", "--help"}, o);
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--team"), std::string::npos) << help.out;
}

// A plugin stuck in a hook (a driver call that never returns) costs its deadline once, then is
// left out with a warning naming it and the hook; the query, the other plugin and the output go
// on. Before the deadline existed, `sonde status` hung forever here.
TEST(StatusPlugins, HungHookIsLeftOutAfterItsDeadline) {
  const auto dir = scratch_dir();
  for (const char* hook : {"configure", "query_device", "get_process_info", "print_footer"}) {
    SCOPED_TRACE(hook);
    auto o = with_status_plugins(dir, env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus")));
    o.env.emplace_back("SONDE_TEST_STATUS_HANG", std::string("late:") + hook);
    o.env.emplace_back("SONDE_STATUS_HOOK_TIMEOUT", "0.3");
    o.timeout_s = 20;
    const bool json_out = std::string(hook) != "print_footer";
    std::vector<std::string> args{"status", "--team", "ml", "--cpu-interval", "0"};
    if (json_out) args.insert(args.begin() + 1, "--json");
    const auto r = sonde(args, o);
    ASSERT_FALSE(r.timed_out) << r.describe();
    ASSERT_EQ(r.status, 0) << r.describe();
    EXPECT_NE(r.err.find(fmt::format("status plugin 'late' ({}/libtest_status_late.so): its {} "
                                     "hook did not return within 0.3 s",
                                     SONDE_TEST_STATUS_PLUGIN_DIR, hook)),
              std::string::npos)
        << r.err;
    if (json_out) {
      const json d = parse_json(r);
      EXPECT_EQ(d["gpus"][0]["seen_by_early"], 3);  // the other plugin still runs
      // Left out from the hang on: GPU 0's query_device ran before its processes' hook hung.
      const json& after = std::string(hook) == "get_process_info" ? d["gpus"].back() : d["gpus"][0];
      EXPECT_TRUE(after.contains("seen_by_early")) << d.dump(1);
      EXPECT_FALSE(after.contains("seen_by_late")) << d.dump(1);
    } else {
      EXPECT_NE(r.out.find("[early] footer"), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("[late] header"), std::string::npos) << r.out;
    }
  }
}

TEST(StatusPlugins, HooksRunInOrderAndByPriority) {
  const auto dir = scratch_dir();
  const auto o =
      with_status_plugins(dir, env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus")));
  const auto r = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  std::vector<std::pair<std::string, std::string>> trace;  // (plugin, hook)
  for (const auto& l : lines_of(read_file(dir / "trace.txt"))) {
    const auto sp = l.find(' ');
    trace.emplace_back(l.substr(0, sp), l.substr(sp + 1));
  }
  ASSERT_FALSE(trace.empty());
  // Each hook: every call of "early" (priority -5) is followed by the same call of "late" (20).
  std::map<std::string, std::vector<std::string>> by_hook;
  for (const auto& [plugin, hook] : trace) by_hook[hook].push_back(plugin);
  for (const auto& [hook, plugins] : by_hook) {
    ASSERT_EQ(plugins.size() % 2, 0u) << hook;
    for (std::size_t i = 0; i < plugins.size(); i += 2) {
      EXPECT_EQ(plugins[i], "early") << hook << " #" << i;
      EXPECT_EQ(plugins[i + 1], "late") << hook << " #" << i;
    }
  }
  // Calls per query: 4 GPUs, 3 + 2 + 0 processes (the fourth cannot list them), one query.
  EXPECT_EQ(by_hook["before_query"].size(), 2u);
  EXPECT_EQ(by_hook["query_device"].size(), 8u);
  EXPECT_EQ(by_hook["get_process_info"].size(), 10u);
  EXPECT_EQ(by_hook["after_query"].size(), 2u);
  EXPECT_EQ(by_hook["repr_gpu"].size(), 8u);
  EXPECT_EQ(by_hook["repr_process"].size(), 10u);
  // The phases in the proposal's order.
  const std::vector<std::string> order = {
      "create",           "add_options", "configure",    "before_query", "query_device",
      "get_process_info", "after_query", "print_header", "repr_gpu",     "print_footer"};
  auto first = [&](const std::string& hook) {
    for (std::size_t i = 0; i < trace.size(); ++i)
      if (trace[i].second == hook) return i;
    return trace.size();
  };
  auto last = [&](const std::string& hook) {
    std::size_t at = trace.size();
    for (std::size_t i = 0; i < trace.size(); ++i)
      if (trace[i].second == hook) at = i;
    return at;
  };
  for (std::size_t k = 0; k + 1 < order.size(); ++k) {
    if (order[k] == "query_device") continue;  // interleaved with get_process_info per GPU
    EXPECT_LT(last(order[k]), first(order[k + 1])) << order[k] << " before " << order[k + 1];
  }
  EXPECT_LT(last("get_process_info"), first("after_query"));
  // With --json no text hook runs.
  fs::remove(dir / "trace.txt");
  ASSERT_EQ(sonde({"status", "--json", "--cpu-interval", "0"}, o).status, 0);
  const std::string json_trace = read_file(dir / "trace.txt");
  EXPECT_EQ(json_trace.find("repr_"), std::string::npos);
  EXPECT_EQ(json_trace.find("print_"), std::string::npos);
  EXPECT_NE(json_trace.find("after_query"), std::string::npos);
}

// ---- the built-in Slurm and container plugins, on a fixture /proc ----

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

void fake_pid(const fs::path& proc, int pid, const std::string& comm, const std::string& cgroup,
              const std::string& environ) {
  const fs::path d = proc / std::to_string(pid);
  write_text(d / "status", "Name:\t" + comm + "\nPPid:\t1\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\n");
  write_text(d / "cmdline",
             std::string("/opt/bin/") + comm + '\0' + "--epochs" + '\0' + "3" + '\0');
  write_text(d / "stat", std::to_string(pid) + " (" + comm +
                             ") S 1 1 1 0 -1 0 0 0 0 0 100 50 0 0 20 0 4 0 1000 1000000 2500 "
                             "18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n");
  write_text(d / "cgroup", cgroup);
  write_text(d / "environ", environ);
}

TEST(StatusPlugins, SlurmJobAndContainerOfEachProcess) {
  const auto dir = scratch_dir();
  const fs::path proc = dir / "proc";
  for (const char* f : {"stat", "meminfo", "loadavg"})
    write_text(proc / f, read_file(fs::path("/proc") / f));
  const std::string docker_id(64, 'a');
  const std::string pod_id = "0123456789abcdef" + std::string(48, 'b');
  fake_pid(proc, 4242, "train", "0::/system.slice/docker-" + docker_id + ".scope\n",
           std::string("HOME=/root") + '\0' + "SLURM_JOB_ID=90210" + '\0');
  fake_pid(proc, 4243, "serve",
           "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
           "pod12345678_1234_1234_1234_123456789abc.slice/cri-containerd-" +
               pod_id + ".scope\n",
           "");
  fake_pid(proc, 4244, "job",
           "12:memory:/slurm/uid_1000/job_77/step_0/task_0\n0::/slurm/uid_1000/job_77\n", "");
  const fs::path scen = dir / "scenario.json";
  write_text(scen, R"({"driver_version": "550.54.15", "devices": [{
      "name": "NVIDIA L4", "uuid": "GPU-1", "temperature": 40, "fan": 0, "util_gpu": 10,
      "util_mem": 1, "memory_total_mib": 23034, "memory_used_mib": 3000, "power_mw": 30000,
      "power_limit_mw": 72000, "energy_mj": 1, "encoder": 0, "decoder": 0,
      "compute_processes": [{"pid": 4242, "used_memory_mib": 1000},
                            {"pid": 4243, "used_memory_mib": 1000},
                            {"pid": 4244, "used_memory_mib": 1000}]}]})");
  auto o = env_for(dir, SONDE_FAKE_NVML, scen.string());
  o.env.emplace_back("SONDE_PROC_ROOT", proc.string());
  const auto r = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse_json(r);
  ASSERT_EQ(d["gpus"].size(), 1u);
  std::map<int, json> p;
  for (const auto& x : d["gpus"][0]["processes"]) p[x["pid"].get<int>()] = x;
  ASSERT_EQ(p.size(), 3u) << r.out;
  EXPECT_EQ(p[4242]["command"], "train");
  EXPECT_EQ(p[4242]["user"], "root");
  EXPECT_EQ(p[4242]["full_command"], json::array({"/opt/bin/train", "--epochs", "3"}));
  EXPECT_EQ(p[4242]["slurm_job_id"], "90210");
  EXPECT_EQ(p[4242]["container"], "docker:aaaaaaaaaaaa");
  EXPECT_FALSE(p[4243].contains("slurm_job_id"));
  EXPECT_EQ(p[4243]["container"], "containerd:0123456789ab");
  EXPECT_EQ(p[4243]["k8s_pod"], "12345678-1234-1234-1234-123456789abc");
  EXPECT_EQ(p[4244]["slurm_job_id"], "77");
  EXPECT_FALSE(p[4244].contains("container"));
  // Text: the fields on the process lines; gpustat's JSON carries them too.
  const auto t = sonde({"status", "--cpu-interval", "0"}, o);
  ASSERT_EQ(t.status, 0) << t.describe();
  EXPECT_TRUE(std::regex_search(
      t.out,
      std::regex(
          R"(4242 .*/opt/bin/train --epochs 3  container=docker:aaaaaaaaaaaa  slurm_job_id=90210)")))
      << t.out;
  const auto g = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(g.status, 0) << g.describe();
  const json gd = parse_json(g);
  expect_gpustat_shape(gd);
  EXPECT_EQ(gd["gpus"][0]["processes"][0]["slurm_job_id"], "90210");
  EXPECT_EQ(gd["gpus"][0]["processes"][0]["username"], "root");
  EXPECT_EQ(gd["gpus"][0]["processes"][0]["cpu_memory_usage"], 2500 * ::sysconf(_SC_PAGESIZE));
}

// ---- watch mode in a pseudo-terminal ----

TEST(StatusWatch, RedrawsInPlaceAndRestoresTheTerminal) {
  if (run_command({"tmux", "-V"}).status != 0) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  const auto o =
      with_status_plugins(dir, env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_three_gpus")));
  // The shell ignores SIGINT so that it lives on to say how sonde exited.
  std::string cmd = "trap '' INT; env";
  for (const auto& [k, v] : o.env) cmd += " " + shell_quote(k + "=" + v);
  cmd += " " + shell_quote(sonde_binary()) +
         " status -i 0.2 --cpu-interval 0.05; echo \"EXITED $?\"; sleep 30";
  Tmux tmux(dir);
  ASSERT_EQ(
      tmux.run({"new-session", "-d", "-s", "w", "-x", "150", "-y", "40", "sh", "-c", cmd}).status,
      0);
  // Two refreshes: the plugin traced two queries, and the screen shows the GPUs.
  std::string screen;
  for (int i = 0; i < 100; ++i) {
    sleep_for(0.1);
    const std::string trace = read_file(dir / "trace.txt");
    std::size_t queries = 0;
    for (std::size_t at = trace.find("late after_query"); at != std::string::npos;
         at = trace.find("late after_query", at + 1))
      ++queries;
    screen = tmux.capture();
    if (queries >= 2 && screen.find("[3] Tesla K80") != std::string::npos) break;
  }
  EXPECT_NE(screen.find("[0] NVIDIA A100-SXM4-40GB"), std::string::npos) << screen;
  EXPECT_NE(screen.find("[early] footer"), std::string::npos) << screen;
  EXPECT_EQ(tmux.format("#{alternate_on}"), "1");
  EXPECT_EQ(tmux.format("#{cursor_flag}"), "0");  // hidden while drawing
  // Redrawn in place: the header is on the first row, once.
  const auto rows = lines_of(screen);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].rfind(hostname(), 0), 0u) << screen;
  EXPECT_EQ(std::count_if(rows.begin(), rows.end(),
                          [](const std::string& l) { return l.rfind("[0] ", 0) == 0; }),
            1);
  // A narrower window: lines are cut to it at once (SIGWINCH).
  ASSERT_EQ(tmux.run({"resize-window", "-t", "w", "-x", "60"}).status, 0);
  bool fits = false;
  for (int i = 0; i < 50 && !fits; ++i) {
    sleep_for(0.1);
    screen = tmux.capture();
    fits = screen.find("[0] ") != std::string::npos;
    for (const auto& l : lines_of(screen)) {
      std::size_t cps = 0;
      for (unsigned char ch : l) cps += (ch & 0xC0) != 0x80;
      if (cps > 60) fits = false;
    }
  }
  EXPECT_TRUE(fits) << screen;
  // Ctrl-C: a clean exit, status 0, the normal screen and the cursor back.
  ASSERT_EQ(tmux.run({"send-keys", "-t", "w", "C-c"}).status, 0);
  bool exited = false;
  for (int i = 0; i < 50 && !exited; ++i) {
    sleep_for(0.1);
    screen = tmux.capture();
    exited = screen.find("EXITED") != std::string::npos;
  }
  EXPECT_NE(screen.find("EXITED 0"), std::string::npos) << screen;
  EXPECT_EQ(screen.find("[0] NVIDIA"), std::string::npos) << "alternate screen left\n" << screen;
  EXPECT_EQ(tmux.format("#{alternate_on}"), "0");
  EXPECT_EQ(tmux.format("#{cursor_flag}"), "1");
}

TEST(StatusWatch, SigtermRestoresTheTerminal) {
  if (run_command({"tmux", "-V"}).status != 0) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  const auto o = env_for(dir, SONDE_FAKE_NVML, scenario("nvidia_lost_gpu"));
  std::string cmd = "env";
  for (const auto& [k, v] : o.env) cmd += " " + shell_quote(k + "=" + v);
  cmd += " " + shell_quote(sonde_binary()) + " gpustat -i 0.2 & echo $! > " +
         shell_quote((dir / "pid").string()) + "; wait $!; echo \"EXITED $?\"; sleep 30";
  Tmux tmux(dir);
  ASSERT_EQ(
      tmux.run({"new-session", "-d", "-s", "w", "-x", "120", "-y", "30", "sh", "-c", cmd}).status,
      0);
  std::string screen;
  for (int i = 0; i < 100 && screen.find("[2] NVIDIA H100") == std::string::npos; ++i) {
    sleep_for(0.1);
    screen = tmux.capture();
  }
  // gpustat's lines; a lost GPU as gpustat shows it
  ASSERT_NE(screen.find("[1] ((GPU is lost))"), std::string::npos) << screen;
  EXPECT_EQ(tmux.format("#{alternate_on}"), "1");
  const int pid = std::stoi(read_file(dir / "pid"));
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  bool exited = false;
  for (int i = 0; i < 50 && !exited; ++i) {
    sleep_for(0.1);
    screen = tmux.capture();
    exited = screen.find("EXITED") != std::string::npos;
  }
  EXPECT_NE(screen.find("EXITED 0"), std::string::npos) << screen;
  EXPECT_EQ(tmux.format("#{alternate_on}"), "0");
  EXPECT_EQ(tmux.format("#{cursor_flag}"), "1");
}

#endif  // SONDE_FAKE_NVML

}  // namespace
}  // namespace sonde::test
