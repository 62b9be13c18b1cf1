// The plugin SDK as a plugin author gets it: this build installed with `cmake --install` into a
// temporary prefix, the example plugins (examples/plugins) built out of tree against it with CMake
// (find_package(sonde)) and with pkg-config (sonde-plugin.pc), then loaded by the installed sonde,
// found by name in its default plugin directory, and seen in its CSV files.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <sonde/plugin.h>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

constexpr double kBuildTimeout_s = 110;

std::string join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

/// Success when the command exited 0; otherwise a message with the command and its output.
testing::AssertionResult succeeded(const std::vector<std::string>& argv, const RunResult& r) {
  if (r.status == 0 && !r.timed_out) return testing::AssertionSuccess();
  return testing::AssertionFailure()
         << join(argv) << "\n"
         << (r.timed_out ? "timed out; " : "") << r.describe() << "\nstdout: " << r.out;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

/// Environment without the user's plugin directories and configuration.
RunOptions isolated_env(const fs::path& dir) {
  RunOptions o;
  fs::create_directories(dir / "xdg");
  o.env = {{"XDG_CONFIG_HOME", (dir / "xdg").string()}};
  o.unset_env = {"SONDE_PLUGIN_PATH"};
  o.timeout_s = kBuildTimeout_s;
  return o;
}

class SdkInstall : public testing::Test {
 protected:
  void SetUp() override {
    // sonde refuses plugins in directories that group or others may write to: make every
    // directory and file created here (by us, cmake and the compilers) 0755 / 0644.
    ::umask(022);
    dir_ = scratch_dir();
    prefix_ = dir_ / "prefix";
    const std::vector<std::string> argv = {SONDE_CMAKE_COMMAND, "--install", SONDE_BUILD_DIR,
                                           "--prefix", prefix_.string()};
    const RunResult r = run_command(argv, isolated_env(dir_));
    ASSERT_TRUE(succeeded(argv, r));
  }

  // Each prefix holds a copy of the sonde binary (tens of MB): keep it only to debug a failure.
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  std::string pkg_config(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"pkg-config"};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions o = isolated_env(dir_);
    o.env.emplace_back("PKG_CONFIG_PATH", (prefix_ / "share/pkgconfig").string());
    const RunResult r = run_command(argv, o);
    EXPECT_TRUE(succeeded(argv, r)) << "pkg-config comes with the Debian package pkg-config "
                                       "(scripts/install-deps)";
    return r.out;
  }

  fs::path dir_;
  fs::path prefix_;
};

TEST_F(SdkInstall, InstallsProgramHeadersPackagesAndPluginDirectory) {
  EXPECT_EQ(::access((prefix_ / "bin/sonde").c_str(), X_OK), 0) << "bin/sonde is not executable";
  for (const char* header : {"plugin.h", "sdk.hpp"}) {
    const fs::path installed = prefix_ / "include/sonde" / header;
    ASSERT_TRUE(fs::is_regular_file(installed)) << installed;
    EXPECT_EQ(read_file(installed),
              read_file(fs::path(SONDE_SOURCE_DIR) / "include/sonde" / header))
        << installed << " differs from the source tree's";
  }

  const fs::path cmake_dir = prefix_ / "share/cmake/sonde";
  EXPECT_TRUE(fs::is_regular_file(cmake_dir / "sondeConfig.cmake"));
  const std::string version_file = read_file(cmake_dir / "sondeConfigVersion.cmake");
  EXPECT_NE(version_file.find("set(PACKAGE_VERSION \"" SONDE_VERSION "\")"), std::string::npos)
      << "sondeConfigVersion.cmake does not carry the project version " SONDE_VERSION;
  const std::string targets = read_file(cmake_dir / "sondeTargets.cmake");
  EXPECT_NE(targets.find("add_library(sonde::plugin_sdk INTERFACE IMPORTED)"), std::string::npos);
  EXPECT_NE(targets.find("cxx_std_17"), std::string::npos) << "sonde::plugin_sdk lacks C++17";

  // The default plugin directory exists and is one sonde accepts.
  const fs::path plugins = prefix_ / "lib/sonde/plugins";
  struct stat st {};
  ASSERT_EQ(::stat(plugins.c_str(), &st), 0) << plugins << " was not created";
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & (S_IWGRP | S_IWOTH), 0u) << plugins << " is group/other-writable";

  // The relocatable pkg-config file points at the installed headers.
  EXPECT_EQ(pkg_config({"--modversion", "sonde-plugin"}), SONDE_VERSION "\n");
  const std::vector<std::string> cflags = split_words(pkg_config({"--cflags", "sonde-plugin"}));
  ASSERT_EQ(cflags.size(), 1u) << "sonde-plugin.pc: expected only -I<includedir>";
  ASSERT_EQ(cflags[0].rfind("-I", 0), 0u) << cflags[0];
  EXPECT_EQ(fs::canonical(cflags[0].substr(2)), fs::canonical(prefix_ / "include"));

  // The Python bridge, when the source tree has one, is installed file for file.
  const fs::path python = fs::path(SONDE_SOURCE_DIR) / "python";
  if (fs::is_directory(python)) {
    std::size_t files = 0;
    for (const auto& e : fs::recursive_directory_iterator(python)) {
      const std::string rel = fs::relative(e.path(), python).string();
      if (!e.is_regular_file() || rel.find("__pycache__") != std::string::npos ||
          e.path().extension() == ".pyc")
        continue;
      ++files;
      EXPECT_EQ(read_file(prefix_ / "share/sonde/python" / rel), read_file(e.path()))
          << "share/sonde/python/" << rel << " is missing or differs";
    }
    EXPECT_GT(files, 0u);
  }
}

// A compiler with nothing but `pkg-config --cflags sonde-plugin` builds both examples, and the
// result is a loadable plugin whose entry table is what sonde expects.
TEST_F(SdkInstall, PkgConfigFlagsBuildTheExamples) {
  const std::vector<std::string> cflags = split_words(pkg_config({"--cflags", "sonde-plugin"}));
  ASSERT_FALSE(cflags.empty());
  const fs::path examples = fs::path(SONDE_SOURCE_DIR) / "examples/plugins";
  struct Example {
    std::vector<std::string> compiler;
    fs::path source;
    std::string so;
    std::string name;
    std::string default_column;
  };
  const std::vector<Example> builds = {
      {{SONDE_C_COMPILER, "-std=c99"},
       examples / "c_loadavg/loadavg.c",
       "libc_loadavg.so",
       "loadavg",
       "prefix: loadavg_"},
      {{SONDE_CXX_COMPILER, "-std=c++17"},
       examples / "cpp_ctxswitch/ctxswitch.cpp",
       "libcpp_ctxswitch.so",
       "ctxswitch",
       "columns: [ctx_voluntary, ctx_involuntary]"},
  };
  for (const Example& ex : builds) {
    const fs::path so = dir_ / ex.so;
    std::vector<std::string> argv = ex.compiler;
    for (const char* flag :
         {"-Wall", "-Wextra", "-Wpedantic", "-Werror", "-fPIC", "-shared", "-fvisibility=hidden"})
      argv.emplace_back(flag);
    argv.insert(argv.end(), cflags.begin(), cflags.end());
    for (const std::string& a : {std::string("-o"), so.string(), ex.source.string()})
      argv.push_back(a);
    const RunResult r = run_command(argv, isolated_env(dir_));
    ASSERT_TRUE(succeeded(argv, r));

    void* handle = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << ::dlerror();
    void* sym = ::dlsym(handle, SONDE_PLUGIN_ENTRY_NAME);
    ASSERT_NE(sym, nullptr) << so << " does not export " SONDE_PLUGIN_ENTRY_NAME;
    const sonde_plugin* plugin = reinterpret_cast<sonde_plugin_entry_fn>(sym)();
    ASSERT_NE(plugin, nullptr);
    EXPECT_EQ(plugin->abi_major, SONDE_ABI_MAJOR);
    EXPECT_EQ(plugin->struct_size, sizeof(sonde_plugin));
    EXPECT_STREQ(plugin->name, ex.name.c_str());
    ASSERT_NE(plugin->capability, nullptr);
    EXPECT_EQ(plugin->capability(12345u), nullptr) << "an unknown capability must give NULL";
    const auto* collector =
        static_cast<const sonde_collector_v1*>(plugin->capability(SONDE_CAP_COLLECTOR));
    ASSERT_NE(collector, nullptr);
    EXPECT_EQ(collector->struct_size, sizeof(sonde_collector_v1));
    ASSERT_NE(collector->default_entry_yaml, nullptr);
    EXPECT_NE(std::string(collector->default_entry_yaml).find(ex.default_column), std::string::npos)
        << collector->default_entry_yaml;
    EXPECT_NE(collector->create, nullptr);
    EXPECT_NE(collector->collect, nullptr);
    EXPECT_NE(collector->destroy, nullptr);
    // Not unloaded: the test process ends soon, and unloading C++ code is not what is tested.
  }
}

// The examples as a standalone CMake project against the installed package, installed into the
// installed sonde's default plugin directory, registered in YAML by file name, and measured.
TEST_F(SdkInstall, ExamplePluginsBuildOutOfTreeAndWriteTheirColumns) {
  const fs::path build = dir_ / "build-plugins";
  const RunOptions env = isolated_env(dir_);
  const std::vector<std::vector<std::string>> steps = {
      {SONDE_CMAKE_COMMAND, "-S", (std::string(SONDE_SOURCE_DIR) + "/examples/plugins"), "-B",
       build.string(), "-G", SONDE_CMAKE_GENERATOR, "-DCMAKE_PREFIX_PATH=" + prefix_.string(),
       std::string("-DCMAKE_C_COMPILER=") + SONDE_C_COMPILER,
       std::string("-DCMAKE_CXX_COMPILER=") + SONDE_CXX_COMPILER, "-DCMAKE_BUILD_TYPE=Release",
       "-DCMAKE_C_FLAGS=-Werror", "-DCMAKE_CXX_FLAGS=-Werror"},
      {SONDE_CMAKE_COMMAND, "--build", build.string()},
      {SONDE_CMAKE_COMMAND, "--install", build.string(), "--prefix", prefix_.string()},
  };
  for (const auto& argv : steps) {
    const RunResult r = run_command(argv, env);
    ASSERT_TRUE(succeeded(argv, r));
  }
  const fs::path plugin_dir = prefix_ / "lib/sonde/plugins";
  for (const char* so : {"libc_loadavg.so", "libcpp_ctxswitch.so"}) {
    struct stat st {};
    ASSERT_EQ(::stat((plugin_dir / so).c_str(), &st), 0) << so << " was not installed";
    EXPECT_EQ(st.st_mode & (S_IWGRP | S_IWOTH), 0u) << so << " is group/other-writable";
  }
  const std::string sonde = (prefix_ / "bin/sonde").string();

  // Found in the default plugin directory without any configuration, through their default
  // entries, with the columns their default handlers give.
  {
    const std::vector<std::string> argv = {sonde, "collectors"};
    const RunResult r = run_command(argv, env);
    ASSERT_TRUE(succeeded(argv, r));
    std::vector<std::string> missing;
    for (const char* so : {"libc_loadavg.so", "libcpp_ctxswitch.so"})
      if (r.out.find("native (" + (plugin_dir / so).string() + ")") == std::string::npos)
        missing.push_back(so);
    for (const char* column : {"loadavg_0", "loadavg_max", "ctx_voluntary", "ctx_involuntary"})
      if (r.out.find(column) == std::string::npos) missing.push_back(column);
    EXPECT_TRUE(missing.empty()) << "not listed by `sonde collectors`: " << join(missing) << "\n"
                                 << r.out;
    EXPECT_EQ(r.err.find(plugin_dir.string()), std::string::npos) << r.err;
  }

  // Registered in YAML by file name, resolved in the plugin directory.
  const fs::path config = dir_ / "plugins.yaml";
  {
    std::ofstream out(config);
    out << "collectors:\n"
           "  loadavg:\n"
           "    _target_: plugin:libc_loadavg.so\n"
           "    handler: {_target_: PerDeviceAggregateHandler, prefix: loadavg_}\n"
           "  ctxswitch:\n"
           "    _target_: plugin:libcpp_ctxswitch.so\n"
           "    handler: {_target_: CumulativeRateHandler, columns: [ctx_voluntary, "
           "ctx_involuntary]}\n";
  }
  // A shell that starts and waits for 200 short children: context switches at the process level.
  const std::vector<std::string> argv = {sonde,
                                         "run",
                                         "--quiet",
                                         "--interval",
                                         "0.2",
                                         "--levels",
                                         "process,user,system",
                                         "--config",
                                         config.string(),
                                         "--out",
                                         (dir_ / "out").string(),
                                         "--",
                                         "sh",
                                         "-c",
                                         "for i in $(seq 200); do sleep 0.005; done"};
  const RunResult r = run_command(argv, env);
  ASSERT_TRUE(succeeded(argv, r));
  EXPECT_EQ(r.err.find("loadavg"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("ctxswitch"), std::string::npos) << r.err;
  const fs::path run = run_dir(dir_ / "out");

  // Load averages: the node's, at the system level only.
  const CsvTable system = read_csv(run / "perf_system.csv");
  ASSERT_GE(system.rows.size(), 2u);
  EXPECT_EQ(system.numbered_columns("loadavg_"),
            (std::vector<std::string>{"loadavg_0", "loadavg_1", "loadavg_2"}));
  const auto avg = system.numbers("loadavg_avg");
  const auto min = system.numbers("loadavg_min");
  const auto max = system.numbers("loadavg_max");
  std::size_t measured = 0;
  for (const char* column : {"loadavg_0", "loadavg_1", "loadavg_2"}) {
    const auto values = system.numbers(column);
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(values[i])) continue;
      ++measured;
      EXPECT_GE(values[i], 0.0) << column << " row " << i + 1;
      EXPECT_GE(values[i], min[i]) << column << " row " << i + 1;
      EXPECT_LE(values[i], max[i]) << column << " row " << i + 1;
    }
  }
  EXPECT_GT(measured, 0u) << "no load average was measured";
  for (std::size_t i = 0; i < avg.size(); ++i) {
    if (!std::isnan(avg[i])) {
      EXPECT_LE(min[i], avg[i]) << "row " << i + 1;
    }
  }
  // Context switches have no system-level value (documented in the example).
  EXPECT_FALSE(system.has_column("ctx_voluntary"));
  EXPECT_FALSE(system.has_column("ctx_involuntary"));

  // Context switches per second at the process and user levels; never negative.
  for (const char* level : {"process", "user"}) {
    const CsvTable table = read_csv(run / ("perf_" + std::string(level) + ".csv"));
    ASSERT_GE(table.rows.size(), 2u) << level;
    EXPECT_FALSE(table.has_column("loadavg_avg")) << "load average at the " << level << " level";
    for (const char* column : {"ctx_voluntary", "ctx_involuntary"}) {
      const auto values = table.numbers(column);
      for (std::size_t i = 0; i < values.size(); ++i) {
        if (std::isnan(values[i])) continue;
        EXPECT_GE(values[i], 0.0) << level << " " << column << " row " << i + 1;
        EXPECT_TRUE(std::isfinite(values[i])) << level << " " << column << " row " << i + 1;
      }
    }
    if (std::string(level) == "process") {
      const auto voluntary = table.numbers("ctx_voluntary");
      EXPECT_GT(std::count_if(voluntary.begin(), voluntary.end(), [](double v) { return v > 0; }),
                0)
          << "the shell waited for 200 children without a voluntary context switch";
    }
  }
}

}  // namespace
}  // namespace sonde::test
