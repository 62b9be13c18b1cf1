// MIG through the real binary, against the fake NVML's MIG scenarios
// (tests/fakes/scenarios/nvidia_mig.json, nvidia_mig_lost.json): `sonde status` (text and JSON),
// `sonde gpustat --json`, `sonde top --once` and a scrape of `sonde serve`, each figure the
// scenario's; a GPU in MIG mode that is lost leaves the other one shown, and sonde exits 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <regex>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

std::string scenario(const char* name) {
  return std::string(SONDE_FAKE_SCENARIOS) + "/" + name;
}

RunOptions mig_env(const fs::path& scratch, const char* scen) {
  RunOptions o;
  fs::create_directories(scratch / "config");
  o.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
           {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
           {"XDG_CONFIG_HOME", (scratch / "config").string()},
           {"SONDE_PLUGIN_PATH", ""},
           {"SONDE_FAKE_GPU_SCENARIO", scenario(scen)}};
  o.timeout_s = 60;
  return o;
}

json parse(const RunResult& r) {
  try {
    return json::parse(r.out);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("not JSON: ") + e.what() + "\n" + r.out);
  }
}

// What nvidia_mig.json gives each MIG device of GPU 0.
struct Want {
  const char* profile;
  unsigned gi;
  std::uint64_t used_mib, total_mib;
  std::size_t processes;
};
const Want kWant[] = {
    {"3g.20gb", 1, 8205, 19968, 1}, {"2g.10gb", 5, 13, 9856, 0}, {"1g.5gb", 13, 13, 4864, 0}};

TEST(MigRun, StatusJsonHasEachMigDevice) {
  const auto dir = scratch_dir();
  const auto r =
      sonde({"status", "--json", "--cpu-interval", "0"}, mig_env(dir, "nvidia_mig.json"));
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse(r);
  ASSERT_EQ(d["gpus"].size(), 2u) << r.out;
  const json& g = d["gpus"][0];
  EXPECT_EQ(g["mig_mode"], true);
  EXPECT_TRUE(g["util_gpu_percent"].is_null());
  EXPECT_EQ(g["mem_used_bytes"], 8231 * kMiB);
  ASSERT_EQ(g["mig_devices"].size(), 3u) << g.dump(2);
  for (std::size_t i = 0; i < 3; ++i) {
    const json& m = g["mig_devices"][i];
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m["index"], i);
    EXPECT_EQ(m["profile"], kWant[i].profile);
    EXPECT_EQ(m["name"], std::string("NVIDIA A100-SXM4-40GB MIG ") + kWant[i].profile);
    EXPECT_EQ(m["uuid"], fmt::format("MIG-a100m000-0000-0000-0000-00000000000{}", i + 1));
    EXPECT_EQ(m["gpu_instance_id"], kWant[i].gi);
    EXPECT_EQ(m["compute_instance_id"], 0);
    EXPECT_TRUE(m["util_gpu_percent"].is_null());  // n/a, never 0
    EXPECT_EQ(m["mem_used_bytes"], kWant[i].used_mib * kMiB);
    EXPECT_EQ(m["mem_total_bytes"], kWant[i].total_mib * kMiB);
    EXPECT_TRUE(m["error"].is_null());
    ASSERT_EQ(m["processes"].size(), kWant[i].processes);
  }
  // sonde itself ("self") holds 8 GiB on the 3g.20gb.
  const json& p = g["mig_devices"][0]["processes"][0];
  EXPECT_EQ(p["gpu_memory_bytes"], 8192 * kMiB);
  EXPECT_EQ(p["command"], "sonde");
  EXPECT_TRUE(p["sm_util_percent"].is_null());
  // The GPU's own list has the same process.
  ASSERT_EQ(g["processes"].size(), 1u);
  EXPECT_EQ(g["processes"][0]["pid"], p["pid"]);
  // GPU 1: MIG mode off.
  EXPECT_EQ(d["gpus"][1]["mig_mode"], false);
  EXPECT_TRUE(d["gpus"][1]["mig_devices"].empty());
  EXPECT_EQ(d["gpus"][1]["util_gpu_percent"], 25);
}

TEST(MigRun, StatusTextShowsTheMigDevicesUnderTheirGpu) {
  const auto dir = scratch_dir();
  const auto r = sonde({"status", "--cpu-interval", "0"}, mig_env(dir, "nvidia_mig.json"));
  ASSERT_EQ(r.status, 0) << r.describe();
  const auto lines = lines_of(r.out);
  // The header, GPU 0, its 3 MIG devices and 1 process, GPU 1, then the host plugin's lines.
  ASSERT_GE(lines.size(), 7u) << r.out;
  EXPECT_NE(lines[1].find("[0] NVIDIA A100-SXM4-40GB"), std::string::npos) << r.out;
  EXPECT_NE(lines[1].find("MIG on, 3 devices"), std::string::npos) << r.out;
  // No utilisation for a GPU in MIG mode: n/a, as in the JSON (null), not "??".
  EXPECT_NE(lines[1].find(",   n/a util,   n/a mem bw | "), std::string::npos) << r.out;
  EXPECT_EQ(lines[1].find("?? %"), std::string::npos) << r.out;
  // A GPU with MIG mode off keeps its figures.
  EXPECT_NE(lines[6].find(",  25 % util,  10 % mem bw | "), std::string::npos) << r.out;
  EXPECT_NE(
      lines[2].find("├─ MIG 3g.20gb  GI  1 CI  0 | n/a util |   8.0 GiB /  19.5 GiB | 1 process"),
      std::string::npos)
      << r.out;
  EXPECT_TRUE(std::regex_search(
      lines[3], std::regex(R"(^    │  └─ \S+ +\d+   8\.0 GiB gpu mem .*sonde status)")))
      << r.out;
  EXPECT_NE(lines[4].find(
                "├─ MIG 2g.10gb  GI  5 CI  0 | n/a util |    13 MiB /   9.6 GiB | no processes"),
            std::string::npos)
      << r.out;
  EXPECT_NE(lines[5].find(
                "└─ MIG 1g.5gb   GI 13 CI  0 | n/a util |    13 MiB /   4.8 GiB | no processes"),
            std::string::npos)
      << r.out;
  EXPECT_NE(lines[6].find("[1] NVIDIA A100-SXM4-40GB"), std::string::npos) << r.out;
  EXPECT_EQ(lines[6].find("MIG"), std::string::npos) << r.out;
}

TEST(MigRun, GpustatJsonAddsMigDevicesOnlyWhereMigIsOn) {
  const auto dir = scratch_dir();
  const auto r = sonde({"gpustat", "--json"}, mig_env(dir, "nvidia_mig.json"));
  ASSERT_EQ(r.status, 0) << r.describe();
  const json d = parse(r);
  ASSERT_EQ(d["gpus"].size(), 2u);
  const json& g = d["gpus"][0];
  EXPECT_TRUE(g["utilization.gpu"].is_null());
  EXPECT_EQ(g["memory.used"], 8231);
  ASSERT_EQ(g["mig_devices"].size(), 3u) << g.dump(2);
  for (std::size_t i = 0; i < 3; ++i) {
    const json& m = g["mig_devices"][i];
    SCOPED_TRACE(m.dump());
    EXPECT_EQ(m["gpu_instance_id"], kWant[i].gi);
    EXPECT_EQ(m["compute_instance_id"], 0);
    EXPECT_EQ(m["profile"], kWant[i].profile);
    EXPECT_TRUE(m["utilization.gpu"].is_null());
    EXPECT_EQ(m["memory.used"], kWant[i].used_mib);
    EXPECT_EQ(m["memory.total"], kWant[i].total_mib);
    EXPECT_EQ(m["processes"].size(), kWant[i].processes);
  }
  EXPECT_EQ(g["mig_devices"][0]["processes"][0]["gpu_memory_usage"], 8192);
  EXPECT_EQ(g["mig_devices"][0]["processes"][0]["command"], "sonde");
  EXPECT_FALSE(d["gpus"][1].contains("mig_devices"));  // gpustat's keys, exactly
}

TEST(MigRun, TopOnceShowsTheMigDevicesInItsHeader) {
  const auto dir = scratch_dir();
  const auto r = sonde({"top", "--once", "--interval", "0.2", "--width", "200"},
                       mig_env(dir, "nvidia_mig.json"));
  ASSERT_EQ(r.status, 0) << r.describe();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(\[0\] NVIDIA A100-SXM4-40GB +util\[ *n/a\] mem\[\|* *8\.0G/40G\])")))
      << r.out;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(
          R"(└ MIG 3g\.20gb  GI  1 CI  0  util\[ *n/a\] mem\[\|+ *8\.0G/20G\]  1 proc \(pid (\d+)\))")))
      << r.out;
  const std::string pid = m[1];
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(└ MIG 2g\.10gb  GI  5 CI  0  util\[ *n/a\] mem\[ *13M/9\.6G\]  0 proc)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(└ MIG 1g\.5gb   GI 13 CI  0  util\[ *n/a\] mem\[ *13M/4\.8G\]  0 proc)")))
      << r.out;
  // That pid is sonde top itself, with its 8 GiB in the GPUMEM column.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\n *" + pid + " .* 8\\.0G .*top --once")))
      << "pid " << pid << "\n"
      << r.out;
  // GPU 1 (MIG off) keeps its utilisation.
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\[1\] NVIDIA A100-SXM4-40GB +util\[\|* *25%\])")))
      << r.out;
}

// GET http://127.0.0.1:<port><path>; the body.
std::string http_get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("connect");
  }
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    throw std::runtime_error("write");
  }
  std::string resp;
  char buf[65536];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    resp.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  const auto body = resp.find("\r\n\r\n");
  return body == std::string::npos ? resp : resp.substr(body + 4);
}

// One page of `sonde serve` after a few ticks.
std::string scrape(const RunOptions& o) {
  BackgroundProcess s({sonde_binary(), "serve", "--listen", "127.0.0.1:0", "--interval", "0.2"}, o);
  std::smatch m;
  for (double waited = 0; waited < 30; waited += 0.05) {
    if (s.poll().has_value()) throw std::runtime_error("serve exited: " + s.err());
    (void)s.read_line(0.05);  // drains stderr too
    if (std::regex_search(s.err(), m, std::regex(R"(http://127\.0\.0\.1:(\d+)/metrics)"))) break;
  }
  if (m.empty()) throw std::runtime_error("serve does not say where it listens: " + s.err());
  const int port = std::stoi(m[1]);
  sleep_for(0.6);
  std::string page = http_get(port, "/metrics");
  s.signal(SIGTERM);
  const auto status = s.wait(30);
  if (!status || *status != 0) throw std::runtime_error("serve did not end with 0: " + s.err());
  return page;
}

TEST(MigRun, ServeExportsTheMigDevicesWithDcgmLabels) {
  const auto dir = scratch_dir();
  const std::string page = scrape(mig_env(dir, "nvidia_mig.json"));
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string labels = fmt::format(
        R"({{gpu="0",GPU_I_ID="{}",GPU_I_PROFILE="{}",CI_ID="0",UUID="MIG-a100m000-0000-0000-0000-00000000000{}"}})",
        kWant[i].gi, kWant[i].profile, i + 1);
    EXPECT_NE(page.find(fmt::format("sonde_gpu_mig_memory_used_bytes{} {}\n", labels,
                                    kWant[i].used_mib * kMiB)),
              std::string::npos)
        << labels << "\n"
        << page;
    EXPECT_NE(page.find(fmt::format("sonde_gpu_mig_memory_total_bytes{} {}\n", labels,
                                    kWant[i].total_mib * kMiB)),
              std::string::npos)
        << labels;
    EXPECT_NE(page.find(fmt::format("sonde_gpu_mig_processes{} {}\n", labels, kWant[i].processes)),
              std::string::npos)
        << labels;
  }
  // No utilisation is made up for a MIG device; GPU 1 (MIG off) has none.
  EXPECT_EQ(page.find("sonde_gpu_mig_utilization_ratio"), std::string::npos);
  EXPECT_EQ(page.find("sonde_gpu_mig_memory_used_bytes{gpu=\"1\""), std::string::npos);
}

TEST(MigRun, LostGpuInMigModeLeavesTheOtherShown) {
  const auto dir = scratch_dir();
  const auto o = mig_env(dir, "nvidia_mig_lost.json");
  const auto st = sonde({"status", "--json", "--cpu-interval", "0"}, o);
  ASSERT_EQ(st.status, 0) << st.describe();
  const json d = parse(st);
  ASSERT_EQ(d["gpus"].size(), 2u);
  EXPECT_EQ(d["gpus"][0]["error"], "GPU is lost");
  EXPECT_TRUE(d["gpus"][0]["mig_devices"].empty());
  ASSERT_EQ(d["gpus"][1]["mig_devices"].size(), 2u);
  EXPECT_EQ(d["gpus"][1]["mig_devices"][0]["gpu_instance_id"], 2);
  EXPECT_EQ(d["gpus"][1]["mig_devices"][0]["processes"][0]["gpu_memory_bytes"], 2048 * kMiB);

  const auto gs = sonde({"gpustat", "--json"}, o);
  ASSERT_EQ(gs.status, 0) << gs.describe();
  const json g = parse(gs);
  EXPECT_EQ(g["gpus"][0]["name"], "((GPU is lost))");
  EXPECT_FALSE(g["gpus"][0].contains("mig_devices"));
  EXPECT_EQ(g["gpus"][1]["mig_devices"].size(), 2u);

  const auto top = sonde({"top", "--once", "--interval", "0.2", "--width", "200"}, o);
  ASSERT_EQ(top.status, 0) << top.describe();
  EXPECT_TRUE(std::regex_search(top.out, std::regex(R"(\[0\] \?\? +GPU is lost)"))) << top.out;
  EXPECT_TRUE(std::regex_search(top.out,
                                std::regex(R"(└ MIG 4g\.20gb  GI  2 CI  0 .*2\.0G/20G\]  1 proc)")))
      << top.out;

  const std::string page = scrape(o);
  EXPECT_NE(page.find("sonde_gpu_mig_memory_total_bytes{gpu=\"1\",GPU_I_ID=\"2\""),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("sonde_gpu_mig_memory_total_bytes{gpu=\"0\""), std::string::npos);
}

}  // namespace
}  // namespace sonde::test
