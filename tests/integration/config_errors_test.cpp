// Malformed configuration files are reported with FILE:LINE and exit status 2, by
// `sonde config check` and by `sonde run`, which then starts nothing.
#include <cctype>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

struct BadConfig {
  const char* name;
  const char* yaml;
  int line;                           ///< 1-based line that the message must name
  std::vector<const char*> mentions;  ///< substrings the message must contain
};

void PrintTo(const BadConfig& c, std::ostream* os) {
  *os << c.name;
}

const BadConfig kBadConfigs[] = {
    {"bad_yaml", "# a comment\ninterval: 0.5\nlevels: [process]]\n", 3, {}},
    {"unknown_top_level_key", "interval: 0.5\ncolectors: {}\n", 2, {"colectors"}},
    {"interval_zero", "levels: [process]\ninterval: 0\n", 2, {"interval"}},
    {"interval_negative", "# sampling\n\ninterval: -1\n", 3, {"interval"}},
    {"interval_not_a_number", "interval: fast\n", 1, {"interval"}},
    {"unknown_level", "interval: 0.5\nlevels: [process, galaxy]\n", 2, {"galaxy"}},
    {"unknown_collector_target",
     "collectors:\n"
     "  thing:\n"
     "    _target_: sonde.collectors.nope\n"
     "    handler: {_target_: ScalarHandler, column: thing}\n",
     3,
     {"sonde.collectors.nope", "sonde.collectors.cpu", "sonde.collectors.memory"}},
    {"unknown_handler",
     "collectors:\n"
     "  cpu:\n"
     "    handler: {_target_: MagicHandler, prefix: cpu_util_}\n",
     3,
     {"MagicHandler"}},
    {"handler_missing_column",
     "interval: 0.5\n"
     "collectors:\n"
     "  memory:\n"
     "    handler: {_target_: ScalarHandler}\n",
     4,
     {"column"}},
    {"kwarg_wrong_type",
     "collectors:\n"
     "  network:\n"
     "    include_loopback: maybe\n",
     3,
     {"include_loopback"}},
    {"kwarg_unknown",
     "collectors:\n"
     "  cpu:\n"
     "    foo: 1\n",
     3,
     {"foo"}},
    {"duplicate_column",
     "collectors:\n"
     "  memory_again:\n"
     "    _target_: sonde.collectors.memory\n"
     "    handler: {_target_: ScalarHandler, column: memory}\n",
     4,
     {"memory"}},
    {"unknown_inject_key",
     "collectors:\n"
     "  cpu:\n"
     "    inject: [node_info, gpus]\n",
     3,
     {"gpus"}},
    {"inject_not_a_list",
     "collectors:\n"
     "  cpu:\n"
     "    inject: node_info\n",
     3,
     {"inject"}},
    {"enabled_not_a_bool",
     "collectors:\n"
     "  io:\n"
     "    enabled: sometimes\n",
     3,
     {"enabled"}},
    {"timeout_zero",
     "# per-collect deadline\n"
     "collectors:\n"
     "  memory:\n"
     "    timeout: 0\n",
     4,
     {"timeout"}},
};

fs::path write_config(const fs::path& dir, const std::string& name, const std::string& yaml) {
  const fs::path path = dir / (name + ".yaml");
  std::ofstream(path) << yaml;
  return path;
}

// True when `text` contains "FILE:LINE" not followed by another digit.
bool names_file_line(const std::string& text, const fs::path& file, int line) {
  const std::string needle = file.string() + ":" + std::to_string(line);
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) {
    const auto after = pos + needle.size();
    if (after >= text.size() || !std::isdigit(static_cast<unsigned char>(text[after]))) return true;
  }
  return false;
}

class ConfigError : public ::testing::TestWithParam<BadConfig> {};

TEST_P(ConfigError, ConfigCheckNamesFileAndLine) {
  const BadConfig& c = GetParam();
  const fs::path dir = scratch_dir();
  const fs::path file = write_config(dir, c.name, c.yaml);
  const RunResult r = run_command({sonde_binary(), "config", "check", file.string()}, {{}, {}, 60});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_TRUE(names_file_line(r.err, file, c.line))
      << "expected '" << file.string() << ":" << c.line << "' in stderr\n"
      << r.describe();
  for (const char* m : c.mentions)
    EXPECT_NE(r.err.find(m), std::string::npos) << m << "\n" << r.describe();
}

TEST_P(ConfigError, RunStartsNothing) {
  const BadConfig& c = GetParam();
  const fs::path dir = scratch_dir();
  const fs::path file = write_config(dir, c.name, c.yaml);
  const fs::path marker = dir / "started";
  const fs::path out = dir / "out";
  const RunResult r =
      run_command({sonde_binary(), "run", "--quiet", "--config", file.string(), "--out",
                   out.string(), "--", "sh", "-c", "touch '" + marker.string() + "'"},
                  {{}, {}, 60});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_TRUE(names_file_line(r.err, file, c.line))
      << "expected '" << file.string() << ":" << c.line << "' in stderr\n"
      << r.describe();
  EXPECT_FALSE(fs::exists(marker)) << "the command was started despite the bad configuration";
  EXPECT_FALSE(fs::exists(out / "manifest.json")) << "a run directory was written";
}

INSTANTIATE_TEST_SUITE_P(Files, ConfigError, ::testing::ValuesIn(kBadConfigs),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Config, ValidFileIsAccepted) {
  const fs::path dir = scratch_dir();
  const fs::path file = write_config(dir, "valid",
                                     "# a valid file\n"
                                     "interval: 0.25\n"
                                     "levels: [process, system]\n"
                                     "collectors:\n"
                                     "  network:\n"
                                     "    include_loopback: true\n"
                                     "  memory:\n"
                                     "    timeout: 0.1\n");
  const RunResult r = run_command({sonde_binary(), "config", "check", file.string()}, {{}, {}, 60});
  EXPECT_EQ(r.status, 0) << r.describe();
}

TEST(Config, ShowPrintsAnAcceptedFile) {
  const RunResult show = run_command({sonde_binary(), "config", "show"}, {{}, {}, 60});
  ASSERT_EQ(show.status, 0) << show.describe();
  EXPECT_NE(show.out.find("collectors"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("interval"), std::string::npos) << show.out;

  const fs::path dir = scratch_dir();
  const fs::path file = write_config(dir, "shown", show.out);
  const RunResult check =
      run_command({sonde_binary(), "config", "check", file.string()}, {{}, {}, 60});
  EXPECT_EQ(check.status, 0) << check.describe() << "\n--- file ---\n" << show.out;
}

}  // namespace
}  // namespace sonde::test
