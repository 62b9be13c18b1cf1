// `sonde stream`: the JSON-lines protocol of JUmPER's native collector (ready handshake, then one
// sample line per level per tick), and how it ends.
#include <signal.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

using nlohmann::json;

std::vector<std::string> stream_argv(pid_t target, const std::string& levels) {
  return {sonde_binary(),         "stream",   "--interval", "0.1", "--target-pid",
          std::to_string(target), "--levels", levels};
}

// Reads and checks the handshake line.
void expect_ready(BackgroundProcess& sonde, json& ready) {
  const std::optional<std::string> line = sonde.read_line(30);
  ASSERT_TRUE(line.has_value()) << "no handshake line; stderr: " << sonde.err();
  ASSERT_NO_THROW(ready = json::parse(*line)) << *line;
  ASSERT_TRUE(ready.is_object()) << *line;
  EXPECT_EQ(ready.value("status", ""), "ready") << *line;
  for (const char* key : {"pid", "num_cpus", "num_system_cpus", "num_gpus", "gpu_memory",
                          "gpu_name", "memory_limits", "cpu_handles", "levels", "columns_by_level"})
    EXPECT_TRUE(ready.contains(key)) << "handshake lacks '" << key << "': " << *line;
  ASSERT_TRUE(ready.contains("columns_by_level") && ready["columns_by_level"].is_object()) << *line;
}

TEST(Stream, HandshakeThenSamplesThenEndsWhenStdoutCloses) {
  BackgroundProcess target({workload_binary(), "sleep", "60"});
  BackgroundProcess sonde(stream_argv(target.pid(), "process,user,system"));

  json ready;
  ASSERT_NO_FATAL_FAILURE(expect_ready(sonde, ready));
  EXPECT_EQ(ready.at("pid"), target.pid());
  const json& columns_by_level = ready.at("columns_by_level");
  for (const char* level : {"process", "user", "system"})
    ASSERT_TRUE(columns_by_level.contains(level)) << ready.dump();
  EXPECT_EQ(ready.at("levels"), json::array({"process", "user", "system"}));

  std::map<std::string, std::set<std::string>> expected_keys;
  for (const auto& [level, columns] : columns_by_level.items()) {
    ASSERT_TRUE(columns.is_array()) << level;
    // JUmPER's schema: `time` first, then the level's columns, each once.
    ASSERT_FALSE(columns.empty()) << level;
    EXPECT_EQ(columns.front(), "time") << level;
    std::set<std::string> keys;
    for (const auto& c : columns) keys.insert(c.get<std::string>());
    EXPECT_EQ(keys.size(), columns.size()) << "duplicate column at " << level;
    expected_keys[level] = std::move(keys);
  }

  std::map<std::string, int> ticks;
  auto enough = [&] {
    for (const char* level : {"process", "user", "system"})
      if (ticks[level] < 3) return false;
    return true;
  };
  int lines = 0;
  while (!enough() && lines < 1000) {
    const std::optional<std::string> line = sonde.read_line(30);
    ASSERT_TRUE(line.has_value()) << "stream ended or stalled; stderr: " << sonde.err();
    ++lines;
    json msg;
    ASSERT_NO_THROW(msg = json::parse(*line)) << *line;
    ASSERT_TRUE(msg.is_object() && msg.contains("level") && msg.contains("wallclock") &&
                msg.contains("sample"))
        << *line;
    const std::string level = msg.at("level").get<std::string>();
    ASSERT_TRUE(expected_keys.count(level)) << "unknown level in " << *line;
    EXPECT_TRUE(msg.at("wallclock").is_number()) << *line;
    const json& sample = msg.at("sample");
    ASSERT_TRUE(sample.is_object()) << *line;
    std::set<std::string> keys;
    for (const auto& [key, value] : sample.items()) {
      keys.insert(key);
      EXPECT_TRUE(value.is_number() || value.is_null()) << key << " in " << *line;
    }
    EXPECT_EQ(keys, expected_keys[level]) << *line;
    EXPECT_TRUE(sample.at("time").is_number()) << *line;
    ++ticks[level];
  }
  ASSERT_TRUE(enough()) << "fewer than 3 ticks per level in " << lines << " lines";

  sonde.close_stdout();
  const std::optional<int> status = sonde.wait(10);
  ASSERT_TRUE(status.has_value()) << "sonde stream kept running after its stdout was closed";
  EXPECT_TRUE(*status == 0 || *status == 128 + SIGPIPE)
      << "status " << *status << "; stderr: " << sonde.err();
}

TEST(Stream, SigtermEndsWithStatus0) {
  BackgroundProcess target({workload_binary(), "sleep", "60"});
  BackgroundProcess sonde(stream_argv(target.pid(), "process,system"));
  json ready;
  ASSERT_NO_FATAL_FAILURE(expect_ready(sonde, ready));
  const std::optional<std::string> sample = sonde.read_line(30);
  ASSERT_TRUE(sample.has_value()) << "no sample line; stderr: " << sonde.err();

  sonde.signal(SIGTERM);
  const std::optional<int> status = sonde.wait(10);
  ASSERT_TRUE(status.has_value()) << "sonde stream did not exit on SIGTERM";
  EXPECT_EQ(*status, 0) << "stderr: " << sonde.err();
}

TEST(Stream, BogusLevelIsAnErrorMessage) {
  const RunResult r = run_command(
      {sonde_binary(), "stream", "--interval", "0.1", "--levels", "bogus"}, {{}, {}, 60});
  EXPECT_EQ(r.status, 2) << r.describe();
  const std::string first_line = r.out.substr(0, r.out.find('\n'));
  json msg;
  ASSERT_NO_THROW(msg = json::parse(first_line)) << r.describe();
  ASSERT_TRUE(msg.is_object()) << first_line;
  EXPECT_EQ(msg.value("status", ""), "error") << first_line;
  // JUmPER shows the `error` key to the user.
  EXPECT_NE(msg.value("error", "").find("bogus"), std::string::npos) << first_line;
}

}  // namespace
}  // namespace sonde::test
