// Text that is not UTF-8 never stops sonde (issue 22): a command line, a process name or a GPU
// process's arguments are the user's bytes, and nlohmann's dump() threw on them (type_error 316),
// which aborted `sonde run` before its manifest and `sonde status --json` / `gpustat --json` for
// every user of a node. Every JSON writer now goes through json_text() (src/core/json_text.hpp),
// which writes U+FFFD for each invalid byte, as JSON readers do.
#include <unistd.h>

#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

const std::string kBad = "caf\xe9-\xff\xfe";  // Latin-1 "café" and two bytes no UTF-8 has
const std::string kReplaced = "caf\xef\xbf\xbd-\xef\xbf\xbd\xef\xbf\xbd";  // each as U+FFFD

TEST(NonUtf8Text, RunOfACommandWithSuchAnArgumentIsComplete) {
  const fs::path dir = scratch_dir();
  const RunResult r =
      run_command({sonde_binary(), "run", "--interval", "0.1", "--levels", "process,system",
                   "--out", (dir / "out").string(), "--", "/bin/sh", "-c", "sleep 0.3", kBad});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("sonde summary ("), std::string::npos) << r.err;
  const nlohmann::json manifest = read_json(run_dir(dir / "out") / "manifest.json");
  EXPECT_TRUE(manifest.at("complete").get<bool>());
  const auto command = manifest.at("command").get<std::vector<std::string>>();
  ASSERT_EQ(command.size(), 4u);
  EXPECT_EQ(command[3], kReplaced);
}

TEST(NonUtf8Text, StreamAndSqliteOfSuchACommand) {
  const fs::path dir = scratch_dir();
  // stream watches a process (here one whose arguments are not UTF-8) and ends with it.
  BackgroundProcess target({"/bin/sh", "-c", "sleep 0.6", "sh", kBad});
  RunOptions o;
  o.timeout_s = 30;
  const RunResult stream = run_command({sonde_binary(), "stream", "--interval", "0.1", "--levels",
                                        "process", "--target-pid", std::to_string(target.pid())},
                                       o);
  ASSERT_EQ(stream.status, 0) << stream.describe();
  std::size_t lines = 0;
  for (std::size_t start = 0, nl; (nl = stream.out.find('\n', start)) != std::string::npos;
       start = nl + 1, ++lines)
    EXPECT_TRUE(nlohmann::json::accept(stream.out.substr(start, nl - start)))
        << stream.out.substr(start, nl - start);
  EXPECT_GE(lines, 2u);
  const RunResult db =
      run_command({sonde_binary(), "run", "--interval", "0.1", "--levels", "process", "--out",
                   (dir / "runs.sqlite").string(), "--", "/bin/sh", "-c", "sleep 0.3", kBad});
  ASSERT_EQ(db.status, 0) << db.describe();
  const RunResult list =
      run_command({sonde_binary(), "runs", "list", "--json", (dir / "runs.sqlite").string()});
  ASSERT_EQ(list.status, 0) << list.describe();
  EXPECT_NE(list.out.find(kReplaced), std::string::npos) << list.out;
}

// A GPU process whose command line is not UTF-8 (any local user can start one).
TEST(NonUtf8Text, StatusAndGpustatJsonWithSuchAGpuProcess) {
  BackgroundProcess gpu_user({"/bin/sh", "-c", "sleep 30; :", "sh", kBad});
  const fs::path dir = scratch_dir();
  fs::create_directories(dir / "config");
  RunOptions o;
  const std::string scenario = std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_three_gpus.json";
  o.env = {{"SONDE_NVML_LIBRARY", SONDE_FAKE_NVML},
           {"SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so"},
           {"XDG_CONFIG_HOME", (dir / "config").string()},
           {"SONDE_PLUGIN_PATH", ""},
           {"SONDE_FAKE_GPU_PIDS", fmt::format("{0},{0},{0}", gpu_user.pid())},
           {"SONDE_FAKE_GPU_SCENARIO", scenario}};
  o.timeout_s = 30;
  for (const char* cmd : {"status", "gpustat"}) {
    const RunResult r = run_command({sonde_binary(), cmd, "--json"}, o);
    ASSERT_EQ(r.status, 0) << cmd << ": " << r.describe();
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(r.out)) << r.out;
    EXPECT_NE(r.out.find(kReplaced), std::string::npos)
        << cmd << ": the process's arguments are not in the JSON: " << r.out;
  }
}

}  // namespace
}  // namespace sonde::test
