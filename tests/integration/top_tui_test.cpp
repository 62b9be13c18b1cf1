// `sonde top`'s interactive view in a pseudo-terminal (tmux: send-keys,
// capture-pane): help, sort, a filter that narrows to one process, tree, group,
// user and job prompts, the environment view, a signal with confirmation to a
// child of the test, --readonly and another user's process refused, a resize,
// the mouse (a click on a title sorts, on a row selects), and the terminal restored on q and on
// SIGTERM.
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/run_helpers.hpp"
#include "support/tmux.hpp"

namespace sonde::test {
namespace {

bool has_tmux() {
  return run_command({"tmux", "-V"}).status == 0;
}

class TopScreen {
 public:
  /// Starts `sonde top ARGS` in a tmux window of 120x40 (under `prefix`, e.g.
  /// setpriv), with no GPU library and no plugin of the user's; the shell then
  /// says how it ended.
  TopScreen(const fs::path& dir, const std::vector<std::string>& args,
            const std::vector<std::string>& prefix = {})
      : tmux_(dir, {{"LANG", "C.UTF-8"}}), dir_(dir) {
    fs::create_directories(dir / "config");
    fs::permissions(dir, fs::perms::all);
    fs::permissions(dir / "config", fs::perms::all);
    std::string cmd =
        "env LANG=C.UTF-8 SONDE_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "
        "SONDE_ROCM_SMI_LIBRARY=/nonexistent/librocm_smi64.so "
        "SONDE_PLUGIN_PATH= " +
        shell_quote("XDG_CONFIG_HOME=" + (dir / "config").string());
    for (const auto& p : prefix) cmd += " " + shell_quote(p);
    cmd += " " + shell_quote(sonde_binary()) + " top";
    for (const auto& a : args) cmd += " " + shell_quote(a);
    // In the background (its pid for SIGTERM), with the terminal as stdin: sh gives a background
    // command /dev/null otherwise.
    cmd += " </dev/tty & echo $! > " + shell_quote((dir / "pid").string()) +
           "; wait $!; echo \"EXITED $?\"; sleep 60";
    const RunResult r =
        run({"new-session", "-d", "-s", "w", "-x", "120", "-y", "40", "sh", "-c", cmd});
    if (r.status != 0) throw std::runtime_error("tmux: " + r.describe());
  }
  RunResult run(const std::vector<std::string>& args) const { return tmux_.run(args); }
  std::string capture() const { return tmux_.capture(); }
  std::string format(const std::string& f) const { return tmux_.format(f); }
  void keys(const std::vector<std::string>& k) const {
    std::vector<std::string> argv{"send-keys", "-t", "w"};
    argv.insert(argv.end(), k.begin(), k.end());
    run(argv);
  }
  void type(const std::string& text) const { run({"send-keys", "-t", "w", "-l", text}); }
  /// Waits (up to 15 s, generous for a busy machine) until the screen satisfies
  /// `ok`.
  std::string wait_for(const std::function<bool(const std::string&)>& ok) const {
    std::string screen;
    for (int i = 0; i < 150; ++i) {
      screen = capture();
      if (ok(screen)) return screen;
      sleep_for(0.1);
    }
    return screen;
  }
  std::string wait_for_text(const std::string& text) const {
    return wait_for([&](const std::string& s) { return s.find(text) != std::string::npos; });
  }
  int sonde_pid() const { return std::stoi(read_file(dir_ / "pid")); }

 private:
  Tmux tmux_;
  fs::path dir_;
};

bool contains(const std::string& s, const std::string& a) {
  return s.find(a) != std::string::npos;
}

// Rows of the table: the lines between the titles and the bottom bar.
std::vector<std::string> table_rows(const std::string& screen) {
  std::vector<std::string> rows;
  bool in = false;
  const auto lines = lines_of(screen);
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
    if (in && !lines[i].empty() && lines[i].find_first_not_of(' ') != std::string::npos)
      rows.push_back(lines[i]);
    if (contains(lines[i], "PID USER") || contains(lines[i], "PROCS ")) in = true;
  }
  return rows;
}

// Typed with `/` (not --filter, which sonde top's own command line and the shell's would match).
std::string filter_to(const TopScreen& t, const std::string& text) {
  t.wait_for_text("PID USER");
  t.keys({"/"});
  t.type(text);
  t.keys({"Enter"});
  return t.wait_for([](const std::string& x) { return table_rows(x).size() == 1; });
}

TEST(TopTui, KeysHelpSortFilterTreeGroupAndQuit) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  BackgroundProcess one({workload_binary(), "hold", "1", "58.25"});
  BackgroundProcess spawner({workload_binary(), "spawn", "2", "20000"});
  TopScreen t(dir, {"--interval", "0.5"});
  std::string s = t.wait_for_text("PID USER");
  ASSERT_TRUE(contains(s, "PID USER")) << s;
  EXPECT_TRUE(contains(s, "sonde top  ")) << s;
  EXPECT_EQ(t.format("#{alternate_on}"), "1");
  // help, and any key closes it
  t.keys({"h"});
  s = t.wait_for_text("sonde top: keys");
  EXPECT_TRUE(contains(s, "k, F9")) << s;
  t.keys({"x"});
  s = t.wait_for_text("PID USER");
  EXPECT_FALSE(contains(s, "sonde top: keys")) << s;
  // sort: the next column (MEM), back, inverted
  EXPECT_TRUE(contains(s, "▼CPU%")) << s;
  t.keys({">"});
  s = t.wait_for_text("▼MEM");
  EXPECT_TRUE(contains(s, "▼MEM")) << s;
  t.keys({"<"});
  t.keys({"I"});
  s = t.wait_for_text("▲CPU%");
  EXPECT_TRUE(contains(s, "▲CPU%")) << s;
  t.keys({"I"});
  // a filter that narrows to one process
  t.keys({"/"});
  t.type("58.25");
  t.keys({"Enter"});
  s = t.wait_for([](const std::string& x) { return table_rows(x).size() == 1; });
  ASSERT_EQ(table_rows(s).size(), 1u) << s;
  EXPECT_TRUE(contains(table_rows(s)[0], std::to_string(one.pid()))) << s;
  EXPECT_TRUE(contains(s, "filter=58.25")) << s;
  // Esc clears it
  t.keys({"/"});
  t.keys({"Escape"});
  s = t.wait_for([](const std::string& x) { return table_rows(x).size() > 3; });
  EXPECT_GT(table_rows(s).size(), 3u) << s;
  // tree: the spawner's child under it
  t.keys({"/"});
  t.type("spawn 2 20000");
  t.keys({"Enter", "t"});
  s = t.wait_for_text("└─ ");
  EXPECT_TRUE(contains(s, "└─ " + std::string(workload_binary()))) << s;
  EXPECT_TRUE(contains(s, "tree")) << s;
  t.keys({"t", "/", "Escape"});
  // group by user, then by job, container, none
  t.keys({"g"});
  s = t.wait_for_text("group=user");
  EXPECT_TRUE(contains(s, "PROCS")) << s;
  EXPECT_TRUE(contains(s, " processes")) << s;
  t.keys({"g", "g", "g"});
  s = t.wait_for([](const std::string& x) { return !contains(x, "group="); });
  EXPECT_TRUE(contains(s, "PID USER")) << s;
  // the user prompt (the selected process' user by default) and the job prompt
  t.keys({"u"});
  s = t.wait_for_text("User (empty: all)");
  EXPECT_TRUE(contains(s, "User (empty: all)")) << s;
  t.keys({"Escape", "j"});
  s = t.wait_for_text("Slurm job (empty: all)");
  EXPECT_TRUE(contains(s, "Slurm job (empty: all)")) << s;
  t.keys({"Escape"});
  // arrows and paging move the selection without leaving the view
  t.keys({"Down", "Down", "NPage", "End", "Home", "PPage", "Up"});
  // q: the normal screen and the cursor back, exit status 0
  t.keys({"q"});
  s = t.wait_for_text("EXITED");
  EXPECT_TRUE(contains(s, "EXITED 0")) << s;
  EXPECT_FALSE(contains(s, "PID USER")) << "alternate screen left\n" << s;
  EXPECT_EQ(t.format("#{alternate_on}"), "0");
  EXPECT_EQ(t.format("#{cursor_flag}"), "1");
}

TEST(TopTui, EnvironmentViewAndKillWithConfirmation) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  RunOptions env;
  env.env = {{"SONDE_TOP_TEST_MARK", "visible-in-e"}};
  BackgroundProcess child({workload_binary(), "hold", "1", "57.5"}, env);
  TopScreen t(dir, {"--interval", "0.5"});
  std::string s = filter_to(t, "57.5");
  ASSERT_EQ(table_rows(s).size(), 1u) << s;
  // e: its command line and environment
  t.keys({"e"});
  s = t.wait_for_text("command line:");
  EXPECT_TRUE(contains(s, "command line:")) << s;
  EXPECT_TRUE(contains(s, "  hold")) << s;  // an argument a line
  t.keys({"End"});                          // the variable set last is at the end
  s = t.wait_for_text("SONDE_TOP_TEST_MARK=visible-in-e");
  EXPECT_TRUE(contains(s, "SONDE_TOP_TEST_MARK=visible-in-e")) << s;
  t.keys({"q"});  // back to the table, not out of top
  s = t.wait_for_text("PID USER");
  ASSERT_TRUE(contains(s, "PID USER")) << s;
  // k, then no: nothing sent
  t.keys({"k"});
  s = t.wait_for_text(fmt::format("Send SIGTERM to {}", child.pid()));
  ASSERT_TRUE(contains(s, fmt::format("Send SIGTERM to {}", child.pid()))) << s;
  t.keys({"n"});
  s = t.wait_for_text("k: cancelled");
  EXPECT_TRUE(contains(s, "k: cancelled")) << s;
  sleep_for(0.3);
  EXPECT_FALSE(child.poll().has_value()) << "signalled without a yes";
  // k, y: SIGTERM
  t.keys({"k"});
  t.wait_for_text("Send SIGTERM");
  t.keys({"y"});
  s = t.wait_for_text("sent SIGTERM");
  EXPECT_TRUE(contains(s, fmt::format("sent SIGTERM to {}", child.pid()))) << s;
  const auto status = child.wait(10);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 128 + SIGTERM);
  t.keys({"q"});
  t.wait_for_text("EXITED");
}

// The mouse, as a terminal reports it to a program that asked for it (xterm's X10 encoding,
// which tmux passes on): a click on a column title sorts by that column, a second click inverts
// it; a click on a row selects that process (k then names it).
TEST(TopTui, MouseClickSortsAndSelects) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  BackgroundProcess one({workload_binary(), "hold", "1", "56.75"});
  BackgroundProcess two({workload_binary(), "hold", "2", "56.75"});
  TopScreen t(dir, {"--interval", "0.5"});
  t.wait_for_text("PID USER");
  t.keys({"/"});
  t.type("56.75");
  t.keys({"Enter"});
  std::string s = t.wait_for([](const std::string& x) { return table_rows(x).size() == 2; });
  ASSERT_EQ(table_rows(s).size(), 2u) << s;
  // Button 1 pressed, then released, at (col, row), both counted from 0.
  auto click = [&](std::size_t col, std::size_t row) {
    const std::string at =
        std::string() + static_cast<char>(33 + col) + static_cast<char>(33 + row);
    t.type("\x1b[M" + std::string(1, ' ') + at);
    t.type("\x1b[M" + std::string(1, '#') + at);
  };
  auto title_at = [](const std::string& screen, std::size_t& row) {
    const auto lines = lines_of(screen);
    for (row = 0; row < lines.size(); ++row)
      if (const auto at = lines[row].find("PID USER"); at != std::string::npos) return at;
    return std::string::npos;
  };
  std::size_t title_row = 0;
  const std::size_t pid_col = title_at(s, title_row);
  ASSERT_NE(pid_col, std::string::npos) << s;
  ASSERT_FALSE(contains(s, "▼PID") || contains(s, "▲PID")) << s;  // sorted by CPU% at first
  click(pid_col + 1, title_row);
  s = t.wait_for([](const std::string& x) { return contains(x, "▼PID") || contains(x, "▲PID"); });
  ASSERT_TRUE(contains(s, "▼PID") || contains(s, "▲PID")) << s;
  const std::string first = contains(s, "▼PID") ? "▼PID" : "▲PID";
  const std::string second = first == "▼PID" ? "▲PID" : "▼PID";
  click(pid_col + 2, title_row);
  s = t.wait_for_text(second);
  EXPECT_TRUE(contains(s, second)) << s;
  // The second row of the table: select it with a click, then k asks about its process.
  const auto lines = lines_of(s);
  std::size_t row = title_row + 2;
  ASSERT_LT(row, lines.size()) << s;
  const std::string picked = std::to_string(two.pid()), other = std::to_string(one.pid());
  const bool second_is_two = lines[row].find(picked) != std::string::npos;
  const std::string expect = second_is_two ? picked : other;
  ASSERT_TRUE(contains(lines[row], expect)) << s;
  click(pid_col + 1, row);
  sleep_for(0.3);
  t.keys({"k"});
  s = t.wait_for_text("Send SIGTERM to ");
  EXPECT_TRUE(contains(s, "Send SIGTERM to " + expect)) << s;
  t.keys({"n", "q"});
  t.wait_for_text("EXITED");
}

TEST(TopTui, ReadonlyRefusesSignals) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  BackgroundProcess child({workload_binary(), "hold", "1", "56.5"});
  TopScreen t(dir, {"--interval", "0.5", "--readonly"});
  std::string s = filter_to(t, "56.5");
  ASSERT_EQ(table_rows(s).size(), 1u) << s;
  t.keys({"k"});
  s = t.wait_for_text("refused");
  EXPECT_TRUE(contains(s, "k: refused: sonde top runs with --readonly")) << s;
  EXPECT_FALSE(contains(s, "Send SIGTERM")) << s;
  t.keys({"y"});
  sleep_for(0.3);
  EXPECT_FALSE(child.poll().has_value());
  t.keys({"F10"});
  s = t.wait_for_text("EXITED");
  EXPECT_TRUE(contains(s, "EXITED 0")) << s;
}

TEST(TopTui, AnotherUsersProcessIsRefused) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto other = other_user();
  if (!other) GTEST_SKIP() << "needs root to run as another user";
  const auto dir = scratch_dir();
  BackgroundProcess child({workload_binary(), "hold", "1", "55.5"});  // root's
  std::vector<std::string> prefix = as_user(*other, {});
  TopScreen t(dir, {"--interval", "0.5"}, prefix);
  std::string s = filter_to(t, "55.5");
  ASSERT_EQ(table_rows(s).size(), 1u) << s;
  t.keys({"k"});
  s = t.wait_for_text("refused");
  EXPECT_TRUE(contains(s, fmt::format("k: refused: process {} belongs to root", child.pid()))) << s;
  t.keys({"y"});
  sleep_for(0.3);
  EXPECT_FALSE(child.poll().has_value());
  t.keys({"q"});
  t.wait_for_text("EXITED");
}

TEST(TopTui, ResizeAndSigtermRestoreTheTerminal) {
  if (!has_tmux()) GTEST_SKIP() << "tmux is not installed";
  const auto dir = scratch_dir();
  TopScreen t(dir, {"--interval", "0.5"});
  std::string s = t.wait_for_text("PID USER");
  ASSERT_TRUE(contains(s, "PID USER")) << s;
  ASSERT_EQ(t.run({"resize-window", "-t", "w", "-x", "60", "-y", "20"}).status, 0);
  s = t.wait_for([](const std::string& x) {
    const auto lines = lines_of(x);
    if (lines.size() > 20 || !contains(x, "PID")) return false;
    for (const auto& l : lines) {
      std::size_t cps = 0;
      for (unsigned char ch : l) cps += (ch & 0xC0) != 0x80;
      if (cps > 60) return false;
    }
    return true;
  });
  const auto lines = lines_of(s);
  EXPECT_LE(lines.size(), 20u) << s;
  EXPECT_TRUE(contains(s, "PID")) << s;
  // The bottom bar on the last row: drawn for the new size.
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(contains(lines.back(), "h:help")) << s;
  ASSERT_EQ(::kill(t.sonde_pid(), SIGTERM), 0);
  s = t.wait_for_text("EXITED");
  EXPECT_TRUE(contains(s, "EXITED 0")) << s;
  EXPECT_EQ(t.format("#{alternate_on}"), "0");
  EXPECT_EQ(t.format("#{cursor_flag}"), "1");
}

}  // namespace
}  // namespace sonde::test
