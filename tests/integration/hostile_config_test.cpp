// Configuration on a shared machine (docs/security.md): files and programs another user could
// have written are never used, whoever runs sonde; numbers have finite ranges; aliases cannot
// expand without bound; a HOME the user cannot read is not an error. Tests that need a second
// user run as root and create one (sonde-test-other); elsewhere they are skipped.
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

#define REQUIRE_OTHER_USER(var)                      \
  const std::optional<OtherUser> var = other_user(); \
  if (!var) GTEST_SKIP() << "needs root (to create and act as user " << kOtherUser << ")"

void write(const fs::path& p, const std::string& text, mode_t mode = 0644) {
  std::ofstream(p) << text;
  ASSERT_EQ(::chmod(p.c_str(), mode), 0) << p;
}

void chown_to(const fs::path& p, const OtherUser& u) {
  ASSERT_EQ(::lchown(p.c_str(), u.uid, u.gid), 0) << p;
}

/// `argv` run with `dir` as its current directory.
std::vector<std::string> in_dir(const fs::path& dir, std::vector<std::string> argv) {
  std::vector<std::string> out = {"sh", "-c", "cd \"$0\" && exec \"$@\"", dir.string()};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

/// An environment without the user's own configuration files.
RunOptions isolated(const fs::path& home) {
  RunOptions o;
  o.env = {{"HOME", home.string()}, {"XDG_CONFIG_HOME", (home / "xdg").string()}};
  o.unset_env = {"SONDE_PLUGIN_PATH"};
  o.timeout_s = 60;
  return o;
}

/// An exec collector whose program appends to `marker` when it runs.
std::string exec_collector_yaml(const std::string& command_yaml) {
  return "collectors:\n"
         "  probe:\n"
         "    _target_: exec\n"
         "    command: " +
         command_yaml +
         "\n"
         "    handler: {_target_: NoOpHandler}\n";
}

std::string marker_command(const fs::path& marker) {
  return "[sh, -c, \"id >> " + marker.string() + "\"]";
}

std::vector<std::string> record_system(const fs::path& out) {
  return {sonde_binary(), "record",  "--system", "--duration",
          "0.5",          "--quiet", "--out",    out.string()};
}

std::size_t count_lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

// ---- defect 1: configuration files and the programs they start ----

// The repro of issue 12: root runs `sonde record --system` in a directory where another user put
// a sonde.yaml with an exec collector. The file is ignored with one warning; nothing runs.
TEST(HostileConfig, OtherUsersSondeYamlInTheCurrentDirectoryIsIgnored) {
  REQUIRE_OTHER_USER(other);
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("project");
  const fs::path marker = dir / "F";
  chown_to(dir, *other);
  write(dir / "sonde.yaml", exec_collector_yaml(marker_command(marker)));
  chown_to(dir / "sonde.yaml", *other);

  const auto r =
      run_command(in_dir(dir, record_system(scratch_dir("out") / "run")), isolated(home));
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker);
  EXPECT_NE(r.err.find("warning: ignoring config file sonde.yaml: its file is owned by uid " +
                       std::to_string(other->uid)),
            std::string::npos)
      << r.err;

  // A root-owned file in that directory: the directory is the other user's, so it is ignored too.
  ASSERT_EQ(::chown((dir / "sonde.yaml").c_str(), 0, 0), 0);
  const auto r2 =
      run_command(in_dir(dir, record_system(scratch_dir("out2") / "run")), isolated(home));
  EXPECT_EQ(r2.status, 0) << r2.describe();
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(r2.err.find("ignoring config file sonde.yaml: its directory is owned by uid"),
            std::string::npos)
      << r2.err;
}

// Named explicitly (--config, config check), the same file is an error: exit 2, one line.
TEST(HostileConfig, OtherUsersExplicitConfigIsAnError) {
  REQUIRE_OTHER_USER(other);
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("theirs");
  const fs::path marker = dir / "F";
  chown_to(dir, *other);
  const fs::path cfg = dir / "cfg.yaml";
  write(cfg, exec_collector_yaml(marker_command(marker)));
  chown_to(cfg, *other);

  auto argv = record_system(scratch_dir("out") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto r = run_command(argv, isolated(home));
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_EQ(r.err, "sonde: error: refusing config file " + cfg.string() +
                       ": its file is owned by uid " + std::to_string(other->uid) +
                       ", not by root or you (uid 0)\n");
  EXPECT_FALSE(fs::exists(marker));

  const auto c = run_command({sonde_binary(), "config", "check", cfg.string()}, isolated(home));
  EXPECT_EQ(c.status, 2) << c.describe();
  EXPECT_NE(c.err.find("refusing config file " + cfg.string()), std::string::npos) << c.err;
  EXPECT_FALSE(fs::exists(marker));
}

// Permissions and links, without a second user: a file or directory writable by others, a
// symbolic link, a FIFO (which must not hang the open). Named with --config: an error; found as
// ./sonde.yaml: skipped with a warning.
TEST(HostileConfig, WritableLinkedOrSpecialConfigFilesAreRefused) {
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("cfg");
  const fs::path marker = dir / "F";
  const fs::path good = dir / "good.yaml";
  write(good, exec_collector_yaml(marker_command(marker)));

  const struct {
    const char* tag;
    std::string why;
  } cases[] = {
      {"loose", "its file is writable by others (mode 666)"},
      {"link", "it is a symbolic link"},
      {"fifo", "not a regular file"},
      {"open", "its directory is writable by others (mode 777)"},
  };
  for (const auto& c : cases) {
    const fs::path cwd = scratch_dir(c.tag);
    const fs::path file = cwd / "sonde.yaml";
    const std::string tag = c.tag;
    if (tag == "loose") write(file, read_file(good), 0666);
    if (tag == "link") fs::create_symlink(good, file);
    if (tag == "fifo") {
      ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
    }
    if (tag == "open") {
      write(file, read_file(good));
      ASSERT_EQ(::chmod(cwd.c_str(), 0777), 0);
    }
    const auto r =
        run_command({sonde_binary(), "config", "show", "--config", file.string()}, isolated(home));
    EXPECT_FALSE(r.timed_out) << tag;
    EXPECT_EQ(r.status, 2) << tag << ": " << r.describe();
    EXPECT_NE(r.err.find("refusing config file " + file.string() + ": " + c.why), std::string::npos)
        << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;

    const auto w =
        run_command(in_dir(cwd, record_system(scratch_dir("out") / tag)), isolated(home));
    EXPECT_FALSE(w.timed_out) << tag;
    EXPECT_EQ(w.status, 0) << tag << ": " << w.describe();
    EXPECT_NE(w.err.find("warning: ignoring config file sonde.yaml: " + c.why), std::string::npos)
        << w.err;
    EXPECT_FALSE(fs::exists(marker)) << tag;
  }
  // The control: the same content, trusted, is used.
  const auto ok = run_command(
      in_dir(dir, {sonde_binary(), "config", "show", "--config", good.string()}), isolated(home));
  EXPECT_EQ(ok.status, 0) << ok.describe();
  EXPECT_NE(ok.out.find("probe:"), std::string::npos) << ok.out;
}

// An exec collector's program: world-writable, owned by another user, or reached through a
// directory others can write; the collector is unavailable, the run goes on.
TEST(HostileConfig, UntrustedExecProgramsAreRefused) {
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("tools");
  const fs::path marker = dir / "ran";
  const fs::path tool = dir / "tool.sh";
  write(tool, "#!/bin/sh\necho ran >> " + marker.string() + "\nexec sleep 2\n", 0777);
  const fs::path cfg = dir / "cfg.yaml";
  write(cfg, exec_collector_yaml("[" + tool.string() + "]"));

  auto argv = record_system(scratch_dir("out") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto r = run_command(argv, isolated(home));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(r.err.find("collector 'probe' is unavailable: refusing program " + tool.string() +
                       ": its file is writable by others (mode 777)"),
            std::string::npos)
      << r.err;

  // Found through PATH, a link in a trusted directory to a program in an open one.
  const fs::path open_dir = scratch_dir("open");
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  const fs::path real = open_dir / "real.sh";
  write(real, read_file(tool), 0755);
  const fs::path bin = scratch_dir("bin");
  fs::create_symlink(real, bin / "sonde-test-tool");
  write(cfg, exec_collector_yaml("[sonde-test-tool]"));
  RunOptions o = isolated(home);
  o.env.emplace_back("PATH", bin.string() + ":/usr/bin:/bin");
  argv = record_system(scratch_dir("out2") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto l = run_command(argv, o);
  EXPECT_EQ(l.status, 0) << l.describe();
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(l.err.find("refusing program " + (bin / "sonde-test-tool").string() +
                       ": its directory " + open_dir.string() + " is writable by others"),
            std::string::npos)
      << l.err;

  // The control: mode 755, owned by root (the invoking user here), it runs.
  ASSERT_EQ(::chmod(tool.c_str(), 0755), 0);
  write(cfg, exec_collector_yaml("[" + tool.string() + "]"));
  argv = record_system(scratch_dir("out3") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto g = run_command(argv, isolated(home));
  EXPECT_EQ(g.status, 0) << g.describe();
  EXPECT_TRUE(fs::exists(marker)) << g.err;
}

TEST(HostileConfig, ExecProgramOwnedByAnotherUserIsRefused) {
  REQUIRE_OTHER_USER(other);
  const fs::path home = scratch_dir("home");
  const fs::path dir = scratch_dir("tools");
  const fs::path marker = dir / "ran";
  const fs::path tool = dir / "tool.sh";
  write(tool, "#!/bin/sh\necho ran >> " + marker.string() + "\n", 0755);
  chown_to(tool, *other);
  const fs::path cfg = dir / "cfg.yaml";
  write(cfg, exec_collector_yaml("[" + tool.string() + "]"));
  auto argv = record_system(scratch_dir("out") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto r = run_command(argv, isolated(home));
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(r.err.find("refusing program " + tool.string() + ": its file is owned by uid " +
                       std::to_string(other->uid)),
            std::string::npos)
      << r.err;
}

// A plugin directory's .yaml snippet follows the same rules (read from the checked descriptor).
TEST(HostileConfig, WritablePluginSnippetIsRefused) {
  const fs::path home = scratch_dir("home");
  const fs::path plugins = scratch_dir("plugins");
  const fs::path marker = plugins / "ran";
  const fs::path snippet = plugins / "probe.yaml";
  write(snippet, exec_collector_yaml(marker_command(marker)), 0666);
  RunOptions o = isolated(home);
  o.unset_env.clear();
  o.env.emplace_back("SONDE_PLUGIN_PATH", plugins.string());
  const auto r = run_command(record_system(scratch_dir("out") / "run"), o);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_NE(r.err.find("refusing plugin " + snippet.string() + ": its file is writable by others"),
            std::string::npos)
      << r.err;
}

// A python: collector started in a directory others can write: neither a module there nor a file
// that shadows the standard library (json.py, which `python -m` would find first) is imported;
// in a trusted directory, a module file others can write is refused.
TEST(HostileConfig, PythonCollectorImportsNothingUntrusted) {
  const fs::path home = scratch_dir("home");
  const fs::path marker = scratch_dir("marker") / "imported";
  const std::string touch = "open('" + marker.string() + "', 'a').write(__name__ + '\\n')\n";
  const fs::path open_dir = scratch_dir("open");
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  write(open_dir / "json.py", touch);
  write(open_dir / "evilmod.py", touch + "from sonde_test_plugins import Constant as C\n");
  const fs::path cfg = scratch_dir("cfg") / "c.yaml";
  write(cfg,
        "collectors:\n"
        "  good: {_target_: python:sonde_test_plugins.Constant, handler: {_target_: "
        "ScalarHandler, column: good_value}}\n"
        "  evil: {_target_: python:evilmod.C, handler: {_target_: ScalarHandler, column: "
        "evil_value}}\n");
  RunOptions o = isolated(home);
  o.env.emplace_back("PYTHONPATH", (fs::path(SONDE_SOURCE_DIR) / "tests" / "plugins").string());
  std::vector<std::string> argv = record_system(scratch_dir("out") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto r = run_command(in_dir(open_dir, argv), o);
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker) << r.err;
  EXPECT_NE(r.err.find("collector 'evil' is unavailable"), std::string::npos) << r.err;

  // A trusted directory on PYTHONPATH is searched, but a module file in it that others can
  // write is refused; the current directory is never searched, trusted or not.
  const fs::path own = scratch_dir("own");
  write(own / "evilmod.py", touch, 0666);
  o.env.back().second += ":" + own.string();
  argv = record_system(scratch_dir("out2") / "run");
  argv.insert(argv.end(), {"--config", cfg.string()});
  const auto w = run_command(in_dir(scratch_dir("cwd"), argv), o);
  EXPECT_EQ(w.status, 0) << w.describe();
  EXPECT_FALSE(fs::exists(marker)) << read_file(marker);
  EXPECT_NE(w.err.find("refusing python module " + (own / "evilmod.py").string() +
                       ": its file is writable by others"),
            std::string::npos)
      << w.err;
}

// ---- defect 8: a HOME the user cannot read ----

TEST(HostileConfig, UnreadableHomeIsNotAnError) {
  REQUIRE_OTHER_USER(other);
  const fs::path cwd = scratch_dir("cwd");
  chown_to(cwd, *other);
  // A HOME the user cannot search (as HOME=/root is for anyone but root), with a file in it.
  const fs::path closed = scratch_dir("closed");
  fs::create_directories(closed / ".config/sonde");
  write(closed / ".config/sonde/config.yaml", "interval: 2\n");
  ASSERT_EQ(::chmod(closed.c_str(), 0700), 0);
  RunOptions o;
  o.unset_env = {"XDG_CONFIG_HOME", "SONDE_PLUGIN_PATH"};
  o.timeout_s = 60;
  for (const std::string& home : {closed.string(), std::string("/root")}) {
    o.env = {{"HOME", home}};
    const auto r = run_command(as_user(*other, in_dir(cwd, {sonde_binary(), "config", "show"})), o);
    EXPECT_EQ(r.status, 0) << home << ": " << r.describe();
    EXPECT_EQ(r.err, "") << home;
    EXPECT_NE(r.out.find("interval: 0.5"), std::string::npos) << r.out;
  }

  // A file that exists but cannot be read: skipped with one warning that says why.
  const fs::path home = scratch_dir("home");
  fs::create_directories(home / ".config/sonde");
  for (const fs::path& p : {home, home / ".config", home / ".config/sonde"}) chown_to(p, *other);
  write(home / ".config/sonde/config.yaml", "interval: 2\n", 0600);  // root's
  o.env = {{"HOME", home.string()}};
  const auto w = run_command(as_user(*other, in_dir(cwd, {sonde_binary(), "config", "show"})), o);
  EXPECT_EQ(w.status, 0) << w.describe();
  EXPECT_EQ(w.err, "sonde: warning: cannot read config file " +
                       (home / ".config/sonde/config.yaml").string() +
                       ": Permission denied (see docs/security.md)\n");
  EXPECT_NE(w.out.find("interval: 0.5"), std::string::npos) << w.out;
}

// ---- defect 5 (YAML): billion laughs ----

std::string billion_laughs() {
  std::string y =
      "collectors:\n  lol:\n    _target_: exec\n    command: [\"true\"]\n"
      "    handler: {_target_: NoOpHandler}\n";
  y += "    a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i < 9; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    y += "    a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) y += (j ? ", " : "") + prev;
    y += "]\n";
  }
  return y;
}

TEST(HostileConfig, BillionLaughsIsRefusedEverywhere) {
  const fs::path home = scratch_dir("home");
  const fs::path cfg = scratch_dir() / "lol.yaml";
  const std::string text = billion_laughs();
  ASSERT_LT(text.size(), 1500u);
  write(cfg, text);
  const std::vector<std::vector<std::string>> commands = {
      {sonde_binary(), "config", "show", "--config", cfg.string()},
      {sonde_binary(), "config", "check", cfg.string()},
      {sonde_binary(), "run", "--quiet", "--out", (scratch_dir("out") / "run").string(), "--config",
       cfg.string(), "--", "true"},
  };
  for (const auto& argv : commands) {
    const auto r = run_command(argv, isolated(home));
    ASSERT_FALSE(r.timed_out) << argv[1];
    EXPECT_EQ(r.status, 2) << argv[1] << ": " << r.describe();
    EXPECT_NE(r.err.find("sonde: error: " + cfg.string() + ":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("expands to more than"), std::string::npos) << r.err;
    EXPECT_LT(r.out.size(), 4096u) << argv[1];
  }
}

// ---- defect 4: ranges ----

TEST(HostileConfig, NumericOptionsHaveFiniteRanges) {
  const fs::path home = scratch_dir("home");
  const std::string out = (scratch_dir("out") / "run").string();
  const struct {
    std::vector<std::string> args;
    std::string option;
  } cases[] = {
      {{"run", "--interval", "inf", "--out", out, "--", "true"}, "--interval"},
      {{"run", "--interval", "infinity", "--out", out, "--", "true"}, "--interval"},
      {{"run", "--interval", "1e308", "--out", out, "--", "true"}, "--interval"},
      {{"run", "--interval", "nan", "--out", out, "--", "true"}, "--interval"},
      {{"run", "--interval", "-1", "--out", out, "--", "true"}, "--interval"},
      {{"run", "--interval", "0.0005", "--out", out, "--", "true"}, "--interval"},
      {{"record", "--system", "--duration", "inf", "--out", out}, "--duration"},
      {{"record", "--system", "--duration", "-1", "--out", out}, "--duration"},
      {{"record", "--pid", "0", "--out", out}, "--pid"},
      {{"stream", "--interval", "86401"}, "--interval"},
      {{"serve", "--interval", "inf"}, "--interval"},
      {{"serve", "--max-series", "1000000000"}, "--max-series"},
      {{"status", "--watch", "inf"}, "--watch"},
      {{"status", "--cpu-interval", "nan"}, "--cpu-interval"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> argv = {sonde_binary()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunOptions o = isolated(home);
    o.timeout_s = 20;
    const auto r = run_command(argv, o);
    EXPECT_FALSE(r.timed_out) << c.args[0] << " " << c.args[1] << " " << c.args[2];
    EXPECT_EQ(r.status, 2) << c.args[1] << " " << c.args[2] << ": " << r.describe();
    EXPECT_NE(r.err.find(c.option), std::string::npos) << r.err;
  }
  // The YAML keys, through `config check` and `run` (file:line named).
  const fs::path cfg = scratch_dir("cfg") / "c.yaml";
  for (const char* bad : {"interval: .inf\n", "interval: 1e308\n", "interval: .nan\n",
                          "collectors:\n  cpu: {timeout: .inf}\n"}) {
    write(cfg, bad);
    const auto r = run_command({sonde_binary(), "config", "check", cfg.string()}, isolated(home));
    EXPECT_EQ(r.status, 2) << bad << r.describe();
    EXPECT_NE(r.err.find(cfg.string() + ":"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("from 0.001 to 86400"), std::string::npos) << r.err;
    const auto run =
        run_command({sonde_binary(), "run", "--config", cfg.string(), "--out", out, "--", "true"},
                    isolated(home));
    EXPECT_EQ(run.status, 2) << bad << run.describe();
  }
  // The smallest interval is accepted.
  const auto ok = run_command({sonde_binary(), "record", "--system", "--duration", "0.05",
                               "--interval", "0.001", "--quiet", "--out", out},
                              isolated(home));
  EXPECT_EQ(ok.status, 0) << ok.describe();
}

}  // namespace
}  // namespace sonde::test
