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

std::size_t indent_of(const std::string& line) {
  const auto first = line.find_first_not_of(" \t");
  return first == std::string::npos ? line.size() : first;
}

// The part of the output about collector `name` (named "name" or "sonde.collectors.name"): the
// line that starts with it (unindented preferred) and the lines indented below it. This fits a
// one-line-per-collector table as well as one block per collector.
std::optional<std::string> entry_of(const std::string& output, const std::string& name) {
  const std::string target = "sonde.collectors." + name;
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) lines.push_back(line);

  auto starts_with_name = [&](const std::string& line) {
    const auto w = words(line);
    return !w.empty() && (w.front() == name || w.front() == target);
  };
  std::optional<std::size_t> start;
  for (std::size_t i = 0; i < lines.size() && !start; ++i)
    if (indent_of(lines[i]) == 0 && starts_with_name(lines[i])) start = i;
  for (std::size_t i = 0; i < lines.size() && !start; ++i)
    if (starts_with_name(lines[i])) start = i;
  if (!start) return std::nullopt;

  std::string entry = lines[*start];
  const std::size_t base = indent_of(lines[*start]);
  for (std::size_t i = *start + 1; i < lines.size(); ++i) {
    if (lines[i].find_first_not_of(" \t") == std::string::npos || indent_of(lines[i]) <= base)
      break;
    entry += "\n" + lines[i];
  }
  return entry;
}

bool has_word(const std::string& text, const std::string& word) {
  const auto w = words(text);
  return std::find(w.begin(), w.end(), word) != w.end();
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
    const std::optional<std::string> entry = entry_of(r.out, b.name);
    ASSERT_TRUE(entry.has_value()) << "collector '" << b.name << "' not listed\n" << r.out;
    EXPECT_TRUE(has_word(*entry, "ok")) << "collector '" << b.name << "' not in state ok:\n"
                                        << *entry;
    for (const char* column : b.columns)
      EXPECT_NE(entry->find(column), std::string::npos)
          << "column " << column << " not listed for " << b.name << ":\n"
          << *entry;
  }
}

TEST(Collectors, TimingShowsACostPerCollector) {
  const RunResult r = run_command({sonde_binary(), "collectors", "--timing"}, {{}, {}, 60});
  ASSERT_EQ(r.status, 0) << r.describe();
  // A duration with a unit, e.g. "12.5 us", "0.03ms", "1.2 µs".
  const std::regex cost(R"(\d+(\.\d+)?\s*(ns|us|µs|ms|s)\b)");
  for (const Builtin& b : kBuiltins) {
    const std::optional<std::string> entry = entry_of(r.out, b.name);
    ASSERT_TRUE(entry.has_value()) << "collector '" << b.name << "' not listed\n" << r.out;
    EXPECT_TRUE(std::regex_search(*entry, cost)) << "no cost for '" << b.name << "':\n" << *entry;
  }
}

}  // namespace
}  // namespace sonde::test
