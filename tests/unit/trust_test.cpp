// The trust rule (src/core/trust.cpp, docs/security.md): every component from "/" owned by root
// or the invoking user and writable by nobody else (sticky directories only for what is read),
// links resolved under the same rule; scripts' interpreters checked; environment variables that
// name programs ignored under AT_SECURE.
#include "core/trust.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace sonde {
namespace {

namespace fs = std::filesystem;

// A scratch directory beside the test binary (the build tree: root's or the user's, mode 755 up
// to "/"), not under /tmp, whose sticky bit the rule for code refuses.
class Scratch {
 public:
  Scratch() {
    const fs::path exe = fs::read_symlink("/proc/self/exe");
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = exe.parent_path() / (std::string("trust-scratch-") + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::chmod(dir_.c_str(), 0755);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& path() const { return dir_; }
  fs::path dir(const std::string& name, mode_t mode = 0755) const {
    fs::create_directories(dir_ / name);
    ::chmod((dir_ / name).c_str(), mode);
    return dir_ / name;
  }
  fs::path file(const std::string& name, const std::string& text = "x\n",
                mode_t mode = 0644) const {
    std::ofstream(dir_ / name) << text;
    ::chmod((dir_ / name).c_str(), mode);
    return dir_ / name;
  }

 private:
  fs::path dir_;
};

std::string refusal(const std::string& path, TrustUse use, bool follow_last = true) {
  auto r = walk_trusted(path, "file", use, follow_last);
  return r ? std::string() : r.error().message;
}

TEST(TrustRule, OwnFileInOwnDirectoriesPasses) {
  Scratch s;
  s.dir("d");
  const auto f = s.file("d/f");
  auto r = walk_trusted(f.string(), "file", TrustUse::run, true);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->real, f.string());
  EXPECT_TRUE(S_ISREG(r->st.st_mode));
  // "..", "." and "//" are walked as the kernel would.
  EXPECT_EQ(refusal((s.path() / "d" / ".." / "d" / "." / "f").string(), TrustUse::run), "");
}

TEST(TrustRule, WritableFileIsRefused) {
  Scratch s;
  const auto f = s.file("f", "x", 0664);
  EXPECT_EQ(refusal(f.string(), TrustUse::read),
            "refusing file " + f.string() +
                ": its file is writable by its group (mode 664); run chmod go-w on it");
  ::chmod(f.c_str(), 0646);
  EXPECT_NE(refusal(f.string(), TrustUse::read).find("writable by others (mode 646)"),
            std::string::npos);
}

// Not only the parent: any directory on the way, named in the message.
TEST(TrustRule, WritableAncestorIsRefused) {
  Scratch s;
  const auto open = s.dir("open", 0777);
  s.dir("open/d");
  const auto f = s.file("open/d/f");
  EXPECT_EQ(refusal(f.string(), TrustUse::read),
            "refusing file " + f.string() + ": its directory " + open.string() +
                " is writable by others (mode 777); run chmod go-w on it");
  ::chmod(open.c_str(), 0775);
  EXPECT_NE(refusal(f.string(), TrustUse::run)
                .find("its directory " + open.string() + " is writable by its group"),
            std::string::npos);
}

// A sticky directory (/tmp) passes for what is read, never for what is executed or imported.
TEST(TrustRule, StickyDirectoryOnlyForReading) {
  Scratch s;
  const auto sticky = s.dir("sticky", 01777);
  s.dir("sticky/d");
  const auto f = s.file("sticky/d/f");
  EXPECT_EQ(refusal(f.string(), TrustUse::read), "");
  EXPECT_EQ(refusal(f.string(), TrustUse::run),
            "refusing file " + f.string() + ": its directory " + sticky.string() +
                " is writable by others (mode 1777); programs, plugins and Python modules are "
                "not taken from below a directory others may write, sticky or not: move it "
                "elsewhere");
}

TEST(TrustRule, AncestorOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another uid";
  Scratch s;
  const auto theirs = s.dir("theirs");
  s.dir("theirs/mine");
  const auto f = s.file("theirs/mine/f");
  ASSERT_EQ(::chown(theirs.c_str(), 4242, 4242), 0);
  EXPECT_EQ(refusal(f.string(), TrustUse::read),
            "refusing file " + f.string() + ": its directory " + theirs.string() +
                " is owned by uid 4242, not by root or you (uid " + std::to_string(::getuid()) +
                ")");
  ASSERT_EQ(::chown(theirs.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(f.c_str(), 4242, 4242), 0);
  EXPECT_NE(refusal(f.string(), TrustUse::read).find(": its file is owned by uid 4242"),
            std::string::npos);
}

TEST(TrustRule, LinksAreWalkedUnderTheRule) {
  Scratch s;
  s.dir("real");
  const auto target = s.file("real/f");
  fs::create_symlink(target, s.path() / "abs_link");
  fs::create_symlink("real/f", s.path() / "rel_link");
  fs::create_symlink("real", s.path() / "dir_link");
  for (const char* l : {"abs_link", "rel_link", "dir_link/f"}) {
    auto r = walk_trusted((s.path() / l).string(), "file", TrustUse::run, true);
    ASSERT_TRUE(r) << l << ": " << r.error().message;
    EXPECT_EQ(r->real, target.string()) << l;
  }
  // Not followed as the last component when reading a configuration.
  EXPECT_EQ(refusal((s.path() / "abs_link").string(), TrustUse::read, false),
            "refusing file " + (s.path() / "abs_link").string() +
                ": it is a symbolic link (give the real file)");
  // A link to a file in a directory others can write: that directory is checked.
  const auto open = s.dir("open", 0777);
  s.file("open/g");
  fs::create_symlink(open / "g", s.path() / "to_open");
  EXPECT_NE(refusal((s.path() / "to_open").string(), TrustUse::run)
                .find("its directory " + open.string() + " is writable by others"),
            std::string::npos);
  // A loop is an error, not a hang.
  fs::create_symlink("loop_b", s.path() / "loop_a");
  fs::create_symlink("loop_a", s.path() / "loop_b");
  auto loop = walk_trusted((s.path() / "loop_a").string(), "file", TrustUse::run, true);
  ASSERT_FALSE(loop);
  EXPECT_EQ(loop.error().code, Errc::io);
  EXPECT_NE(loop.error().message.find("Too many levels of symbolic links"), std::string::npos);
  // A link owned by another user (who could replace it in a sticky directory) is refused.
  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown((s.path() / "abs_link").c_str(), 4242, 4242), 0);
    EXPECT_NE(refusal((s.path() / "abs_link").string(), TrustUse::run)
                  .find("its link " + (s.path() / "abs_link").string() + " is owned by uid 4242"),
              std::string::npos);
  }
}

TEST(TrustRule, OpenTrustedReadsTheCheckedFile) {
  Scratch s;
  const auto f = s.file("cfg.yaml", "interval: 1\n");
  auto fd = open_trusted(f.string(), "config file");
  ASSERT_TRUE(fd) << fd.error().message;
  auto text = read_trusted(*fd, f.string(), 1024);
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, "interval: 1\n");
  ::mkfifo((s.path() / "fifo").c_str(), 0644);
  auto fifo = open_trusted((s.path() / "fifo").string(), "config file");
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().message.find("not a regular file"), std::string::npos);
}

TEST(TrustProgram, BinaryIsExecutedByItsDescriptor) {
  auto p = trusted_program("/bin/sh");
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->exe);
  EXPECT_FALSE(p->script);
  EXPECT_TRUE(p->interpreter.empty());
}

TEST(TrustProgram, ScriptInterpreterIsChecked) {
  Scratch s;
  const auto good = s.file("good.sh", "#!/bin/sh -e  \necho hi\n", 0755);
  auto p = trusted_program(good.string());
  ASSERT_TRUE(p) << p.error().message;
  EXPECT_TRUE(p->script);
  EXPECT_EQ(p->interpreter, (std::vector<std::string>{"/bin/sh", "-e"}));

  const auto open = s.dir("open", 0777);
  fs::copy_file("/bin/sh", open / "sh");
  const auto bad = s.file("bad.sh", "#!" + (open / "sh").string() + "\n", 0755);
  auto b = trusted_program(bad.string());
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, "refusing program " + bad.string() + ": its interpreter " +
                                   (open / "sh").string() +
                                   ": its directory is writable by others (mode 777); run chmod "
                                   "go-w on it");

  const auto rel = s.file("rel.sh", "#!sh\n", 0755);
  EXPECT_NE(trusted_program(rel.string()).error().message.find("no absolute interpreter"),
            std::string::npos);
  const auto nested = s.file("nested.sh", "#!" + good.string() + "\n", 0755);
  EXPECT_NE(trusted_program(nested.string()).error().message.find("is a script itself"),
            std::string::npos);
  const auto plain = s.file("plain.sh", "#!/bin/sh\n", 0644);
  EXPECT_NE(trusted_program(plain.string()).error().message.find("it is not executable"),
            std::string::npos);
}

// `#!/usr/bin/env NAME` would search PATH unchecked: NAME is resolved and checked instead.
TEST(TrustProgram, EnvInterpreterIsResolvedAndChecked) {
  if (!fs::exists("/usr/bin/env")) GTEST_SKIP() << "no /usr/bin/env";
  Scratch s;
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  const auto open = s.dir("open", 0777);
  fs::copy_file("/bin/sh", open / "sonde-test-sh");
  s.dir("bin");
  fs::copy_file("/bin/sh", s.path() / "bin" / "sonde-test-sh");
  const auto script = s.file("env.sh", "#!/usr/bin/env sonde-test-sh\n", 0755);

  ::setenv("PATH", (s.path() / "bin").c_str(), 1);
  auto ok = trusted_program(script.string());
  ::setenv("PATH", open.c_str(), 1);
  auto bad = trusted_program(script.string());
  ::setenv("PATH", saved.c_str(), 1);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->interpreter, (std::vector<std::string>{(s.path() / "bin/sonde-test-sh").string()}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("its interpreter " + (open / "sonde-test-sh").string()),
            std::string::npos)
      << bad.error().message;
}

// Finding 5: under AT_SECURE the invoking user's environment names no program or library.
TEST(TrustEnv, ProgramVariablesIgnoredUnderAtSecure) {
  ::setenv("SONDE_TEST_PROGRAM_VAR", "/home/u/evil", 1);
  ::setenv("SONDE_SRUN", "/home/u/srun", 1);
  EXPECT_STREQ(program_env("SONDE_TEST_PROGRAM_VAR", false), "/home/u/evil");
  EXPECT_EQ(program_env("SONDE_TEST_PROGRAM_VAR", true), nullptr);
  EXPECT_EQ(program_env("SONDE_SRUN", true), nullptr);
  ::setenv("SONDE_TEST_PROGRAM_VAR", "", 1);
  EXPECT_EQ(program_env("SONDE_TEST_PROGRAM_VAR", false), nullptr);
  ::unsetenv("SONDE_TEST_PROGRAM_VAR");
  ::unsetenv("SONDE_SRUN");

  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  ::setenv("PATH", "/home/u/bin:/usr/bin", 1);
  EXPECT_EQ(program_search_path(false), "/home/u/bin:/usr/bin");
  EXPECT_EQ(program_search_path(true), kSecurePath);
  ::setenv("PATH", saved.c_str(), 1);
  // A normal test run is not AT_SECURE.
  EXPECT_FALSE(secure_mode());
}

}  // namespace
}  // namespace sonde
