// What root executes or imports on a user's behalf (issue 21, docs/security.md "The trust
// rule"): the path is checked from "/" and what was checked is what runs, so a user who swaps a
// directory they own in a loop never gets their program run as root; a script's interpreter is
// checked as the script is; a python: collector never imports from a directory others can write.
// Tests that need a second user run as root and create one (sonde-test-other); elsewhere they
// are skipped.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

// Starts of sonde while the user swaps: 150 in the normal build (the issue asks for at least
// 100); 40 under ASan, where each start costs several times as much and ctest allows 120 s (the
// TSan stage leaves this test out: scripts/test).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kStarts = 40;
#else
constexpr int kStarts = 150;
#endif
// A loaded machine (CI's other tests, a busy shared node) may start sonde several times slower:
// after this long the test stops starting more, once it has made kMinStarts, so that it ends
// within ctest's 120 s. The check (every start refused, the user's program never run) is the
// same whatever the count; the count made is in the failure message.
constexpr double kStartBudgetS = 50;
constexpr int kMinStarts = 10;

void write(const fs::path& p, const std::string& text, mode_t mode = 0644) {
  std::ofstream(p) << text;
  ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p;
}

RunOptions isolated(const fs::path& home) {
  RunOptions o;
  o.env = {{"HOME", home.string()}, {"XDG_CONFIG_HOME", (home / "xdg").string()}};
  o.unset_env = {"SONDE_PLUGIN_PATH", "PYTHONPATH"};
  o.timeout_s = 60;
  return o;
}

std::vector<std::string> record_system(const fs::path& out, const fs::path& cfg) {
  return {sonde_binary(), "record", "--system",   "--duration", "0.01",
          "--quiet",      "--out",  out.string(), "--config",   cfg.string()};
}

std::string exec_yaml(const std::string& command_yaml) {
  return "collectors:\n  probe:\n    _target_: exec\n    command: " + command_yaml +
         "\n    handler: {_target_: NoOpHandler}\n";
}

// Finding 1: /base/home is the user's (as /home/u), /base/home/tools and the probe in it are
// root's; root's config names home/tools/probe. The user swaps tools with a directory of their
// own (renameat2 RENAME_EXCHANGE) in a loop while root starts sonde 150 times. The user's
// program writes its uid where only root can write: it must never run there.
TEST(TrustRace, SwappedAncestorNeverRunsTheUsersProgramAsRoot) {
  const std::optional<OtherUser> other = other_user();
  if (!other) GTEST_SKIP() << "needs root (to create and act as user " << kOtherUser << ")";
  const fs::path base = scratch_dir("base");
  const fs::path home = base / "home";
  const fs::path tools = home / "tools";
  const fs::path decoy = home / "decoy";
  const fs::path marks = base / "marks";  // root's, 755: only root can write here
  fs::create_directories(tools);
  fs::create_directories(decoy);
  fs::create_directories(marks);
  ASSERT_EQ(::chown(home.c_str(), other->uid, other->gid), 0);
  ASSERT_EQ(::chown(decoy.c_str(), other->uid, other->gid), 0);
  write(tools / "probe", "#!/bin/sh\nexit 0\n", 0755);
  const fs::path pwned = marks / "pwned";
  write(decoy / "probe", "#!/bin/sh\nid -u >> " + pwned.string() + "\n", 0755);
  ASSERT_EQ(::chown((decoy / "probe").c_str(), other->uid, other->gid), 0);
  const fs::path cfg = base / "cfg.yaml";
  write(cfg, exec_yaml("[" + (tools / "probe").string() + "]"));

  // The user: swaps tools and decoy as fast as it can until killed.
  const pid_t swapper = ::fork();
  ASSERT_GE(swapper, 0);
  if (swapper == 0) {
    if (::setgroups(0, nullptr) != 0 || ::setresgid(other->gid, other->gid, other->gid) != 0 ||
        ::setresuid(other->uid, other->uid, other->uid) != 0)
      ::_exit(3);
    for (;;) ::renameat2(AT_FDCWD, tools.c_str(), AT_FDCWD, decoy.c_str(), RENAME_EXCHANGE);
  }
  const fs::path out = scratch_dir("out");
  int refused = 0, starts = 0;
  std::string last_err;
  const auto began = std::chrono::steady_clock::now();
  for (int i = 0; i < kStarts; ++i, ++starts) {
    const std::chrono::duration<double> spent = std::chrono::steady_clock::now() - began;
    if (i >= kMinStarts && spent.count() > kStartBudgetS) break;
    const auto r = run_command(record_system(out / std::to_string(i), cfg), isolated(base));
    EXPECT_EQ(r.status, 0) << r.describe();
    // Refused for the user's directory on the path, or for the user's file when the swap
    // put it there: either way never started.
    const std::string head = "refusing program " + (tools / "probe").string() + ": its ";
    const std::string uid = " is owned by uid " + std::to_string(other->uid);
    if (r.err.find(head + "directory " + home.string() + uid) != std::string::npos ||
        r.err.find(head + "file" + uid) != std::string::npos)
      ++refused;
    last_err = r.err;
  }
  int ws = 0;
  const bool swapping = ::waitpid(swapper, &ws, WNOHANG) == 0;
  ::kill(swapper, SIGKILL);
  ::waitpid(swapper, &ws, 0);
  EXPECT_TRUE(swapping) << "the swapper stopped early";
  EXPECT_FALSE(fs::exists(pwned)) << "the user's program ran as uid " << read_file(pwned);
  // Every start is refused with the reason: the user's directory is on the path.
  EXPECT_EQ(refused, starts) << starts << " starts; the last one said: " << last_err;
}

// Finding 3: a script whose interpreter lies in a directory others can write is refused naming
// both; a trusted script runs as its checked interpreter with its arguments.
TEST(TrustExec, ScriptInterpreterIsChecked) {
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("tools");
  const fs::path open_dir = scratch_dir("open");
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  ASSERT_TRUE(fs::copy_file("/bin/sh", open_dir / "sh"));
  ASSERT_EQ(::chmod((open_dir / "sh").c_str(), 0755), 0);
  const fs::path marker = dir / "ran";
  write(dir / "bad.sh",
        "#!" + (open_dir / "sh").string() + "\necho bad >> " + marker.string() + "\n", 0755);
  write(dir / "good.sh", "#!/bin/sh -e\necho \"good $1\" >> " + marker.string() + "\n", 0755);
  const fs::path cfg = dir / "cfg.yaml";
  write(cfg, exec_yaml("[" + (dir / "bad.sh").string() + "]"));
  const auto r = run_command(record_system(scratch_dir("out") / "run", cfg), isolated(home));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker);
  EXPECT_NE(r.err.find("collector 'probe' is unavailable: refusing program " +
                       (dir / "bad.sh").string() + ": its interpreter " +
                       (open_dir / "sh").string() + ": its directory is writable by others"),
            std::string::npos)
      << r.err;

  write(cfg, exec_yaml("[" + (dir / "good.sh").string() + ", arg1]"));
  const auto g = run_command(record_system(scratch_dir("out2") / "run", cfg), isolated(home));
  EXPECT_EQ(g.status, 0) << g.describe();
  EXPECT_EQ(read_file(marker), "good arg1\n") << g.err;
}

// Finding 2: root runs a python: collector from a sticky, world-writable directory (as /tmp)
// holding json.py, which the bridge imports first thing; the same directory in PYTHONPATH is
// refused with a clear error. The collector's own module in a trusted PYTHONPATH entry works.
TEST(TrustPython, StickyDirectoryIsNeverOnTheImportPath) {
  const fs::path home = scratch_dir("home");
  const fs::path marker = scratch_dir("marker") / "imported";
  const fs::path sticky = scratch_dir("sticky");
  ASSERT_EQ(::chmod(sticky.c_str(), 01777), 0);
  const std::string touch = "open('" + marker.string() + "', 'a').write(__name__ + '\\n')\n";
  for (const char* m : {"json.py", "inspect.py", "traceback.py", "numbers.py"})
    write(sticky / m, touch);
  const fs::path cfg = scratch_dir("cfg") / "c.yaml";
  write(cfg,
        "collectors:\n"
        "  good: {_target_: python:sonde_test_plugins.Constant, handler: {_target_: "
        "ScalarHandler, column: good_value}}\n");
  const std::string plugins = (fs::path(SONDE_SOURCE_DIR) / "tests" / "plugins").string();
  RunOptions o = isolated(home);
  o.unset_env = {"SONDE_PLUGIN_PATH"};
  o.env.emplace_back("PYTHONPATH", plugins);
  const fs::path out = scratch_dir("out");
  const auto cd = [&](std::vector<std::string> argv) {
    std::vector<std::string> v = {"sh", "-c", "cd \"$0\" && exec \"$@\"", sticky.string()};
    v.insert(v.end(), argv.begin(), argv.end());
    return v;
  };
  const auto r = run_command(cd(record_system(out / "cwd", cfg)), o);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker) << r.err;
  EXPECT_EQ(r.err.find("unavailable"), std::string::npos) << r.err;  // the collector works
  EXPECT_NE(read_file(out / "cwd" / "perf_system.csv").find("good_value"), std::string::npos);

  o.env.back().second = sticky.string() + ":" + plugins;
  const auto p = run_command(record_system(out / "pythonpath", cfg), o);
  EXPECT_EQ(p.status, 0) << p.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker) << p.err;
  EXPECT_NE(p.err.find("collector 'good' is unavailable: refusing python path directory " +
                       sticky.string() + ": its directory " + sticky.string() +
                       " is writable by others (mode 1777)"),
            std::string::npos)
      << p.err;
}

}  // namespace
}  // namespace sonde::test
