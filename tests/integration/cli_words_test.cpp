// Command-line errors name the word that is wrong, in one `sonde: error: …` line with exit status
// 2 and a "did you mean" where one is close; `--report FILE -- CMD` works as `--report=FILE`; the
// completion scripts come from the same parser (issue 25, finding 2).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::vector<std::string> args;
  std::string line;  ///< the whole stderr, one line
};

TEST(CliWords, ErrorsNameTheWrongWordInOneLine) {
  const std::vector<Case> cases = {
      {{"run", "--intervl", "0.2", "--", "true"},
       "sonde: error: run: unknown option '--intervl' (did you mean --interval?)\n"},
      {{"rn"}, "sonde: error: unknown command 'rn' (did you mean 'run'?)\n"},
      {{"runs", "lst"}, "sonde: error: runs: unknown command 'lst' (did you mean 'list'?)\n"},
      {{"run", "--qiuet", "--", "true"},
       "sonde: error: run: unknown option '--qiuet' (did you mean --quiet?)\n"},
      {{"record", "--xyzzy"},
       "sonde: error: record: unknown option '--xyzzy' ('sonde record --help' lists them)\n"},
      {{"config"},
       "sonde: error: config: a command is required: one of show, check ('sonde "
       "config --help')\n"},
      {{"report", "--out"}, "sonde: error: report: --out: expected a value after it\n"},
      {{"run", "--"},
       "sonde: error: run: command is required (sonde run [OPTIONS] -- CMD [ARGS])\n"},
      {{"run", "--interval", "abc", "--", "true"},
       "sonde: error: run: --interval: expected a number of seconds from 0.001 to 86400, got "
       "'abc'\n"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {sonde_binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const RunResult r = run_command(argv);
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_EQ(r.err, c.line);
    EXPECT_EQ(r.out, "");
  }
  // No command at all: the commands are listed.
  const RunResult none = run_command({sonde_binary()});
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("a command is required: one of run, record,"), std::string::npos)
      << none.err;
}

TEST(CliWords, ReportTakesItsFileAsTheNextWordBeforeTheCommand) {
  const fs::path dir = scratch_dir();
  const fs::path html = dir / "my.html";
  const RunResult r =
      run_command({sonde_binary(), "run", "--quiet", "--interval", "0.1", "--report", html.string(),
                   "--out", (dir / "run").string(), "--", "true"});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_TRUE(fs::exists(html)) << r.err;
  // Without a file, --report -- CMD still runs CMD (the report lands in the run directory).
  const RunResult plain = run_command({sonde_binary(), "run", "--quiet", "--interval", "0.1",
                                       "--report", "--out", (dir / "run2").string(), "--", "true"});
  ASSERT_EQ(plain.status, 0) << plain.describe();
  EXPECT_TRUE(fs::exists(dir / "run2" / "report.html")) << plain.err;
}

TEST(CliWords, BashCompletionCompletesCommandsAndOptions) {
  const fs::path dir = scratch_dir();
  const RunResult script = run_command({sonde_binary(), "completion", "bash"});
  ASSERT_EQ(script.status, 0) << script.describe();
  std::ofstream(dir / "sonde.bash") << script.out;
  // The real bash, as a user's shell would call the function.
  const std::string probe =
      "source '" + (dir / "sonde.bash").string() +
      "'; for line in 'sonde ru' 'sonde run --int' 'sonde runs l' 'sonde report --o'; do "
      "read -ra COMP_WORDS <<< \"$line\"; COMP_CWORD=$((${#COMP_WORDS[@]}-1)); COMPREPLY=(); "
      "_sonde; echo \"$line => ${COMPREPLY[*]}\"; done";
  const RunResult r = run_command({"bash", "-c", probe});
  ASSERT_EQ(r.status, 0) << r.describe();
  EXPECT_EQ(r.out,
            "sonde ru => run runs\n"
            "sonde run --int => --interval\n"
            "sonde runs l => list\n"
            "sonde report --o => --out --output\n");
  for (const char* shell : {"zsh", "fish"}) {
    const RunResult s = run_command({sonde_binary(), "completion", shell});
    EXPECT_EQ(s.status, 0) << s.describe();
    EXPECT_NE(s.out.find("run"), std::string::npos);
  }
  const RunResult bad = run_command({sonde_binary(), "completion", "tcsh"});
  EXPECT_EQ(bad.status, 2);
}

}  // namespace
}  // namespace sonde::test
