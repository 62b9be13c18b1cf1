// Native plugin loading (src/plugins/native.cpp): a library that is refused is closed again, and
// so is the checked file, on every failure path; the loader's own message (dlerror) is kept.
#include <dirent.h>

#include <string>

#include <gtest/gtest.h>

#include "plugins/plugins.hpp"
#include "support/built_paths.hpp"

namespace sonde {
namespace {

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d) != nullptr) ++n;
    ::closedir(d);
  }
  return n;
}

TEST(NativeLoading, LibraryWithoutTheEntryPointIsClosedAndSaysWhy) {
  // A real shared library (the fake NVML of the tests) that is no sonde plugin.
  CollectorArgs args;
  args.name = "not_a_plugin";
  auto first = plugins::make_native_collector(SONDE_FAKE_NVML, args);
  ASSERT_FALSE(first.ok());
  const std::string& msg = first.error().message;
  EXPECT_NE(msg.find("does not export sonde_plugin_entry()"), std::string::npos) << msg;
  EXPECT_NE(msg.find("undefined symbol"), std::string::npos) << msg;  // dlerror()'s text
  const std::size_t before = open_fds();
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(plugins::make_native_collector(SONDE_FAKE_NVML, args));
  EXPECT_EQ(open_fds(), before);  // each refusal closed the checked file
}

TEST(NativeLoading, FileThatIsNoLibraryKeepsTheLoadersMessage) {
  CollectorArgs args;
  args.name = "text";
  // A regular file owned by the user in a directory only the user writes (the trust checks pass).
  const std::string path = std::string(SONDE_SOURCE_DIR) + "/tests/fakes/README.md";
  const std::size_t before = open_fds();
  auto r = plugins::make_native_collector(path, args);
  ASSERT_FALSE(r.ok());
  const std::string& msg = r.error().message;
  if (msg.find("refusing") == std::string::npos) {  // a checkout the trust rules accept
    EXPECT_NE(msg.find("cannot load plugin " + path + ": "), std::string::npos) << msg;
    EXPECT_GT(msg.size(), ("cannot load plugin " + path + ": ").size() + 5) << msg;
  }
  EXPECT_EQ(open_fds(), before);
}

}  // namespace
}  // namespace sonde
