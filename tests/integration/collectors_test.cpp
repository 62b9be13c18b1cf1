// `sonde collectors` lists the built-in collectors with their columns and state, and with
// --timing their cost.
#include <algorithm>
#include <cctype>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

// Words of a line: runs of letters, digits, '_', '.' and '-'; lower-cased.
std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::string word;
  for (char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || ch == '_' || ch == '.' || ch == '-') {
      word += static_cast<char>(std::tolower(c));
    } else if (!word.empty()) {
      out.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

// The output line of collector `name` (named "name" or "sonde.collectors.name"): preferably one
// that starts with it, otherwise the first that mentions it.
std::optional<std::string> line_of(const std::string& output, const std::string& name) {
  const std::string target = "sonde.collectors." + name;
  auto is_name = [&](const std::string& w) { return w == name || w == target; };
  std::optional<std::string> mention;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const auto w = words(line);
    if (!w.empty() && is_name(w.front())) return line;
    if (!mention && std::any_of(w.begin(), w.end(), is_name)) mention = line;
  }
  return mention;
}

struct Builtin {
  const char* name;
  std::vector<const char*> columns;
};

const std::vector<Builtin> kBuiltins = {
    {"cpu", {"cpu_util_"}},
    {"memory", {"memory"}},
    {"io", {"io_read_count", "io_write_count", "io_read", "io_write"}},
    {"network", {"net_bytes_sent", "net_bytes_recv", "net_packets_sent", "net_packets_recv"}},
    {"process", {}},
    {"procs", {"num_procs"}},
};

TEST(Collectors, ListsBuiltinsWithColumnsAndState) {
  const RunResult r = run_command({sonde_binary(), "collectors"}, {{}, {}, 60});
  ASSERT_EQ(r.status, 0) << r.describe();
  for (const Builtin& b : kBuiltins) {
    const std::optional<std::string> line = line_of(r.out, b.name);
    ASSERT_TRUE(line.has_value()) << "collector '" << b.name << "' not listed\n" << r.out;
    const auto w = words(*line);
    EXPECT_NE(std::find(w.begin(), w.end(), "ok"), w.end())
        << "collector '" << b.name << "' is not in state ok: " << *line;
    for (const char* column : b.columns)
      EXPECT_NE(r.out.find(column), std::string::npos)
          << "column " << column << " of " << b.name << " not listed\n"
          << r.out;
  }
}

TEST(Collectors, TimingShowsACostPerCollector) {
  const RunResult r = run_command({sonde_binary(), "collectors", "--timing"}, {{}, {}, 60});
  ASSERT_EQ(r.status, 0) << r.describe();
  // A duration with a unit, e.g. "12.5 us", "0.03ms", "1.2 µs".
  const std::regex cost(R"(\d+(\.\d+)?\s*(ns|us|µs|ms|s)\b)");
  for (const Builtin& b : kBuiltins) {
    const std::optional<std::string> line = line_of(r.out, b.name);
    ASSERT_TRUE(line.has_value()) << "collector '" << b.name << "' not listed\n" << r.out;
    EXPECT_TRUE(std::regex_search(*line, cost))
        << "no cost on the line of '" << b.name << "': " << *line << "\n"
        << r.out;
  }
}

}  // namespace
}  // namespace sonde::test
