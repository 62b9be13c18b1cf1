// The safe output primitives (src/core/fs.hpp): nothing sonde writes goes through a link that
// someone planted, and nothing is written into another user's directory.
#include "core/fs.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace sonde {
namespace {
namespace fs = std::filesystem;

class Scratch {
 public:
  Scratch() {
    dir_ = fs::temp_directory_path() /
           ("sonde_fs_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  ~Scratch() { fs::remove_all(dir_); }
  std::string path(const std::string& name = "") const {
    return name.empty() ? dir_.string() : (dir_ / name).string();
  }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Another user of this machine, made when the tests run as root; nullopt otherwise.
std::optional<uid_t> other_uid() {
  if (::geteuid() != 0) return std::nullopt;
  if (!::getpwnam("sonde-test-other")) {
    // Its status does not matter: getpwnam below says whether the user exists.
    [[maybe_unused]] const int rc = std::system("useradd -M -r sonde-test-other >/dev/null 2>&1");
  }
  const passwd* pw = ::getpwnam("sonde-test-other");
  if (!pw) return std::nullopt;
  return pw->pw_uid;
}

TEST(Fs, CreateFileInNeverOpensAPlantedLink) {
  Scratch s;
  const std::string victim = s.path("victim");
  std::ofstream(victim) << "precious\n";
  fs::create_symlink(victim, s.path("out.csv"));
  auto dir = open_output_dir(s.path(), false);
  ASSERT_TRUE(dir) << dir.error().message;
  auto f = create_file_in(dir->get(), "out.csv", s.path("out.csv"));
  ASSERT_FALSE(f);
  EXPECT_NE(f.error().message.find("already exists"), std::string::npos) << f.error().message;
  EXPECT_EQ(slurp(victim), "precious\n");
  // A dangling link is not created through either.
  fs::create_symlink(s.path("would-be-created"), s.path("dangling.csv"));
  EXPECT_FALSE(create_file_in(dir->get(), "dangling.csv", "dangling.csv"));
  EXPECT_FALSE(fs::exists(s.path("would-be-created")));
  EXPECT_FALSE(create_file_in(dir->get(), "../escape", "../escape"));
}

TEST(Fs, AtomicWritesRefuseALinkAndUseUnguessableTemporaryNames) {
  Scratch s;
  const std::string victim = s.path("victim");
  std::ofstream(victim) << "precious\n";
  // The old temporary name, `<name>.tmp.<pid>`, planted as a link.
  fs::create_symlink(victim, s.path("report.html.tmp." + std::to_string(::getpid())));
  ASSERT_TRUE(write_file_atomic(s.path("report.html"), "new\n"));
  EXPECT_EQ(slurp(s.path("report.html")), "new\n");
  EXPECT_EQ(slurp(victim), "precious\n");
  // A link at the final name is refused, not followed (nor silently replaced).
  fs::create_symlink(victim, s.path("summary.json"));
  auto ok = write_file_atomic(s.path("summary.json"), "{}\n");
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::config);
  EXPECT_NE(ok.error().message.find("symbolic link"), std::string::npos) << ok.error().message;
  EXPECT_EQ(slurp(victim), "precious\n");
  EXPECT_TRUE(fs::is_symlink(s.path("summary.json")));
  // No temporary file is left behind.
  int tmp_files = 0;
  for (const auto& e : fs::directory_iterator(s.path()))
    if (e.path().filename().string().rfind("report.html.tmp.", 0) == 0) ++tmp_files;
  EXPECT_EQ(tmp_files, 1) << "only the planted link";
}

TEST(Fs, OutputDirectoryThatIsALinkIsRefused) {
  Scratch s;
  fs::create_directories(s.path("real"));
  fs::create_directory_symlink(s.path("real"), s.path("link"));
  auto d = open_output_dir(s.path("link"), true);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::config);
  EXPECT_NE(d.error().message.find("symbolic link"), std::string::npos) << d.error().message;
  d = open_output_dir(s.path("link") + "/", true);
  EXPECT_FALSE(d) << "a trailing slash does not make it followed";
  auto made = open_output_dir(s.path("new/deeper"), true);
  ASSERT_TRUE(made) << made.error().message;
  EXPECT_TRUE(fs::is_directory(s.path("new/deeper")));
}

TEST(Fs, OutputDirectoryOfAnotherUserIsRefused) {
  const auto other = other_uid();
  if (!other) GTEST_SKIP() << "needs root to make a directory of another user";
  Scratch s;
  fs::create_directories(s.path("theirs"));
  ASSERT_EQ(::chown(s.path("theirs").c_str(), *other, *other), 0);
  auto d = open_output_dir(s.path("theirs"), true);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::config);
  EXPECT_NE(d.error().message.find(s.path("theirs")), std::string::npos) << d.error().message;
  EXPECT_NE(d.error().message.find("sonde-test-other"), std::string::npos) << d.error().message;
  EXPECT_FALSE(write_file_atomic(s.path("theirs") + "/report.html", "x"));
  EXPECT_FALSE(fs::exists(s.path("theirs") + "/report.html"));
}

TEST(Fs, OpenRegularInRefusesLinksFifosAndPaths) {
  Scratch s;
  std::ofstream(s.path("plain")) << "x";
  fs::create_symlink(s.path("plain"), s.path("link"));
  ASSERT_EQ(::mkfifo(s.path("fifo").c_str(), 0600), 0);
  auto dir = open_output_dir(s.path(), false);
  ASSERT_TRUE(dir);
  std::uint64_t size = 0;
  ASSERT_TRUE(open_regular_in(dir->get(), "plain", "plain", &size));
  EXPECT_EQ(size, 1u);
  EXPECT_FALSE(open_regular_in(dir->get(), "link", "link"));
  EXPECT_FALSE(open_regular_in(dir->get(), "fifo", "fifo"));
  EXPECT_FALSE(open_regular_in(dir->get(), "../plain", "../plain"));
  EXPECT_FALSE(open_regular_in(dir->get(), "/etc/passwd", "/etc/passwd"));
  EXPECT_FALSE(open_regular_in(dir->get(), "..", ".."));
  EXPECT_FALSE(is_plain_name(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace sonde
