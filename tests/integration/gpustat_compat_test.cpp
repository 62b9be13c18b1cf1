// `sonde gpustat` against gpustat's command line (wookayin/gpustat, gpustat/cli.py and core.py)
// through the real binary on the fake NVML: -v/--version, -i 0 (no watch mode), shtab's
// --print-completion, the flag sets whose lines differed from gpustat's (--no-processes,
// -P draw, --gpuname-width), a lost GPU as gpustat's InvalidGPU, and the exact resident memory
// of -f / --json (cpu_memory_usage: gpustat's psutil rss, /proc/<pid>/statm).
#include <unistd.h>

#include <fstream>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

#ifdef SONDE_FAKE_NVML

using nlohmann::json;

RunOptions fake_gpus(const fs::path& scratch, const std::string& scenario) {
  RunOptions o;
  fs::create_directories(scratch / "config");
  const std::string pids = std::to_string(::getpid()) + ",1,1";  // env:0, env:1, env:2
  o.env = {
      {"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
      {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
      {"XDG_CONFIG_HOME", (scratch / "config").string()},
      {"SONDE_PLUGIN_PATH", ""},
      {"SONDE_FAKE_GPU_PIDS", pids},
      {"SONDE_FAKE_NVML_SCENARIO", std::string(SONDE_FAKE_SCENARIOS) + "/" + scenario + ".json"}};
  o.unset_env = {"NO_COLOR"};
  o.timeout_s = 30;
  return o;
}

RunResult gpustat(const std::vector<std::string>& args, const RunOptions& o) {
  std::vector<std::string> argv{sonde_binary(), "gpustat"};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, o);
}

std::uint64_t statm_resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

TEST(GpustatCompat, VersionFlag) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_three_gpus");
  for (const char* flag : {"-v", "--version"}) {
    const auto r = gpustat({flag}, o);
    ASSERT_EQ(r.status, 0) << r.describe();
    // gpustat's argparse version action: "gpustat <version>" on stdout, exit 0.
    EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(gpustat \S+ \(sonde gpustat\)\n)"))) << r.out;
  }
}

TEST(GpustatCompat, IntervalZeroIsOneShot) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_three_gpus");
  // gpustat: -i 0 is not > 0, so one query and no watch mode (and no --json conflict).
  const auto r = gpustat({"-i", "0", "--no-header", "--no-processes"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(lines_of(r.out).size(), 4u) << r.out;
  const auto j = gpustat({"--json", "-i", "0"}, o);
  ASSERT_EQ(j.status, 0) << j.describe();
  EXPECT_EQ(json::parse(j.out)["gpus"].size(), 4u);
  // -i with a positive interval and --json: gpustat's error and status 1.
  const auto e = gpustat({"--json", "-i", "1"}, o);
  EXPECT_EQ(e.status, 1);
  EXPECT_EQ(e.err, "Error: --json and --interval/-i can't be used together.\n");
}

TEST(GpustatCompat, PrintCompletion) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_three_gpus");
  const auto b = gpustat({"--print-completion", "bash"}, o);
  ASSERT_EQ(b.status, 0) << b.describe();
  for (const char* flag : {"--show-all", "--no-processes", "--gpuname-width", "-P", "--json"})
    EXPECT_NE(b.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(b.out.find("complete "), std::string::npos);
  EXPECT_EQ(gpustat({"--print-completion", "zsh"}, o).out.rfind("#compdef gpustat", 0), 0u);
  EXPECT_EQ(gpustat({"--print-completion", "fish"}, o).status, 2);
}

TEST(GpustatCompat, LinesAsGpustatPrintsThem) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_three_gpus");
  // --no-processes: no bar at the end (gpustat writes " |" only before process information)
  auto r = gpustat({"--no-header", "--no-processes"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  auto l = lines_of(r.out);
  ASSERT_EQ(l.size(), 4u) << r.out;
  EXPECT_EQ(l[0], "[0] NVIDIA A100-SXM4-40GB | 41°C,  87 % | 20480 / 40960 MB");
  EXPECT_EQ(l[3], "[3] Tesla K80             | 35°C,  ?? % |  1000 / 11441 MB");
  r = gpustat({"--no-header", "--show-all", "--no-processes"}, o);
  EXPECT_EQ(lines_of(r.out)[0],
            "[0] NVIDIA A100-SXM4-40GB | 41°C,  30 %,  87 % (E:   0 %  D:   5 %),  250 / 400 W | "
            "20480 / 40960 MB");
  // -P draw: the draw without a unit (gpustat adds " W" only after the limit)
  r = gpustat({"--no-header", "--no-processes", "--show-power=draw"}, o);
  EXPECT_EQ(lines_of(r.out)[0], "[0] NVIDIA A100-SXM4-40GB | 41°C,  87 %,  250 | 20480 / 40960 MB");
  // --gpuname-width 5: shortened from the left, as gpustat's util.shorten_left
  r = gpustat({"--no-header", "--no-processes", "--gpuname-width", "5"}, o);
  l = lines_of(r.out);
  EXPECT_EQ(l[0], "[0] …40GB | 41°C,  87 % | 20480 / 40960 MB");
  EXPECT_EQ(l[3], "[3] … K80 | 35°C,  ?? % |  1000 / 11441 MB");
  r = gpustat({"--no-header", "--no-processes", "--gpuname-width", "0"}, o);
  EXPECT_EQ(lines_of(r.out)[0], "[0]  41°C,  87 % | 20480 / 40960 MB");
}

TEST(GpustatCompat, LostGpuAsGpustatsInvalidGpu) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_lost_gpu");
  const auto r = gpustat({"--no-header"}, o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto l = lines_of(r.out);
  ASSERT_EQ(l.size(), 3u) << r.out;
  EXPECT_EQ(l[1], "[1] ((GPU is lost))       | ??°C,  ?? % |    ?? /    ?? MB | (Not Supported)");
}

TEST(GpustatCompat, CpuMemoryUsageIsTheExactResidentSize) {
  const auto o = fake_gpus(scratch_dir(), "nvidia_three_gpus");
  const std::uint64_t before = statm_resident_bytes();
  const auto r = gpustat({"--json"}, o);
  const std::uint64_t after = statm_resident_bytes();
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = json::parse(r.out);
  bool seen = false;
  for (const auto& p : d["gpus"][0]["processes"]) {
    if (p["pid"] != ::getpid()) continue;  // env:0: this test process
    seen = true;
    const auto rss = p["cpu_memory_usage"].get<std::uint64_t>();
    // psutil's rss (what gpustat shows) is statm's resident pages: between the two readings.
    EXPECT_GE(rss, std::min(before, after));
    EXPECT_LE(rss, std::max(before, after));
    EXPECT_EQ(rss % static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)), 0u);
  }
  EXPECT_TRUE(seen) << r.out;
}

#endif  // SONDE_FAKE_NVML

}  // namespace
}  // namespace sonde::test
