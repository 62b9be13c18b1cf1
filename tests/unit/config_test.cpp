// Configuration: defaults, layering of files, dump/reload, and one test per kind of bad file.
#include "core/config.hpp"
#include "support/built_paths.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>  // mkdtemp, setenv

#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace sonde {
namespace {

namespace fs = std::filesystem;

Config defaults() {
  Config cfg;
  auto r = merge_config_text(cfg, default_config_yaml(), "<defaults>");
  EXPECT_TRUE(r.ok()) << r.error().message;
  return cfg;
}

std::vector<std::string> names(const Config& cfg) {
  std::vector<std::string> out;
  for (const CollectorSpec& c : cfg.collectors) out.push_back(c.name);
  return out;
}

/// A fresh directory under the system's temporary directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "sonde-config-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

  std::string write(const std::string& rel, const std::string& text) const {
    fs::path p = path_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  fs::path path_;
};

/// Only the files a test writes: no /etc, no real XDG directory, no ./sonde.yaml.
ConfigSearch isolated(const TempDir& dir) {
  ConfigSearch s;
  s.etc_file = (dir.path() / "etc/sonde/config.yaml").string();
  s.xdg_config_home = (dir.path() / "xdg").string();
  s.cwd_file = (dir.path() / "cwd/sonde.yaml").string();
  return s;
}

/// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ConfigDefaults, NineCollectorsInOrder) {
  Config cfg = defaults();
  EXPECT_EQ(names(cfg), (std::vector<std::string>{"process", "cpu", "memory", "memory_rss", "io",
                                                  "network", "procs", "gpu", "energy"}));
  EXPECT_DOUBLE_EQ(cfg.interval_s, 0.5);
  EXPECT_EQ(cfg.out_dir, "sonde-runs");
  EXPECT_TRUE(cfg.levels.empty());
  EXPECT_EQ(cfg.sources, std::vector<std::string>{"<defaults>"});
  for (const CollectorSpec& c : cfg.collectors) {
    EXPECT_EQ(c.target, "sonde.collectors." + c.name);
    EXPECT_TRUE(c.enabled);
    EXPECT_FALSE(c.timeout_s);
    EXPECT_TRUE(c.kwargs.empty());
    EXPECT_EQ(c.origin.file, "<defaults>");
    EXPECT_GT(c.origin.line, 0);
  }
}

TEST(ConfigDefaults, HandlersAndInject) {
  Config cfg = defaults();
  const CollectorSpec* process = cfg.find("process");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->inject, (std::vector<std::string>{"pid", "process", "uid", "slurm_job"}));
  EXPECT_EQ(process->handler.target, "NoOpHandler");

  const CollectorSpec* cpu = cfg.find("cpu");
  ASSERT_NE(cpu, nullptr);
  EXPECT_EQ(cpu->inject, std::vector<std::string>{"node_info"});
  EXPECT_EQ(cpu->handler.target, "PerDeviceAggregateHandler");
  EXPECT_EQ(cpu->handler.prefix, "cpu_util_");

  EXPECT_EQ(cfg.find("memory")->handler.column, "memory");
  EXPECT_EQ(cfg.find("procs")->handler.column, "num_procs");
  EXPECT_EQ(cfg.find("io")->handler.target, "CumulativeRateHandler");
  EXPECT_EQ(cfg.find("io")->handler.columns,
            (std::vector<std::string>{"io_read_count", "io_write_count", "io_read", "io_write"}));
  EXPECT_EQ(cfg.find("network")->handler.columns,
            (std::vector<std::string>{"net_bytes_sent", "net_bytes_recv", "net_packets_sent",
                                      "net_packets_recv"}));
  EXPECT_TRUE(cfg.find("network")->inject.empty());
  const CollectorSpec* gpu = cfg.find("gpu");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->target, "sonde.collectors.gpu");
  EXPECT_EQ(gpu->handler.target, "PerDeviceMultiAggregateHandler");
  EXPECT_EQ(gpu->handler.prefix, "gpu_");
  EXPECT_EQ(gpu->handler.metrics, (std::vector<std::string>{"util", "band", "mem", "power"}));
}

TEST(ConfigDefaults, SettingTableMatchesDefaults) {
  Config cfg = defaults();
  std::vector<std::string> keys;
  for (const SettingInfo& s : setting_table()) keys.emplace_back(s.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"interval", "levels", "out_dir", "raise_priority",
                                            "collectors"}));
  EXPECT_EQ(std::stod(setting_table()[0].default_value), cfg.interval_s);
  EXPECT_EQ(setting_table()[2].default_value, cfg.out_dir);
}

TEST(ConfigDefaults, DocsListEverySetting) {
  std::ifstream in(std::string(SONDE_FIXTURES_DIR) + "/../../docs/configuration.md");
  ASSERT_TRUE(in) << "docs/configuration.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  for (const SettingInfo& s : setting_table())
    EXPECT_NE(ss.str().find("| `" + std::string(s.key) + "` |"), std::string::npos) << s.key;
}

// docs/security.md's "Resource bounds" lists every numeric range with its figures.
TEST(ConfigRanges, SecurityDocListsEveryRange) {
  std::ifstream in(std::string(SONDE_FIXTURES_DIR) + "/../../docs/security.md");
  ASSERT_TRUE(in) << "docs/security.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const auto bounds = doc.find("## Resource bounds");
  ASSERT_NE(bounds, std::string::npos);
  // Whole numbers as digits (86400), fractions as written (0.001).
  const auto figure = [](double v) {
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, res.ptr);
  };
  for (const NumericRange& r : numeric_ranges()) {
    const auto row = doc.find(std::string(r.name), bounds);
    ASSERT_NE(row, std::string::npos) << r.name;
    const std::string line = doc.substr(row, doc.find('\n', row) - row);
    EXPECT_NE(line.find(figure(r.min)), std::string::npos) << line;
    EXPECT_NE(line.find(figure(r.max)), std::string::npos) << r.name << ": " << line;
  }
}

TEST(ConfigOrigin, Str) {
  EXPECT_EQ((Origin{"a.yaml", 3, 11}).str(), "a.yaml:3:11");
  EXPECT_EQ((Origin{"<command line>", 0, 0}).str(), "<command line>");
}

TEST(ConfigMerge, LaterFileOverrides) {
  Config cfg = defaults();
  const std::string text = R"(interval: 2
levels: [process, system]
out_dir: /scratch/runs
collectors:
  network:
    enabled: false
  memory:
    handler: {_target_: ScalarHandler, column: memory_gib}
  sensors:
    _target_: exec
    command: [a, b]
    retries: 3
    handler: {_target_: PerDeviceAggregateHandler, prefix: temp_}
)";
  auto r = merge_config_text(cfg, text, "site.yaml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_DOUBLE_EQ(cfg.interval_s, 2);
  EXPECT_EQ(cfg.levels, (std::vector<Level>{Level::process, Level::system}));
  EXPECT_EQ(cfg.levels_origin.str(), "site.yaml:2:1");
  EXPECT_EQ(cfg.out_dir, "/scratch/runs");
  EXPECT_EQ(cfg.sources, (std::vector<std::string>{"<defaults>", "site.yaml"}));
  EXPECT_EQ(names(cfg), (std::vector<std::string>{"process", "cpu", "memory", "memory_rss", "io",
                                                  "network", "procs", "gpu", "energy", "sensors"}));

  const CollectorSpec* network = cfg.find("network");
  EXPECT_FALSE(network->enabled);
  EXPECT_EQ(network->target, "sonde.collectors.network");  // fields not given stay
  EXPECT_EQ(network->handler.columns.size(), 4u);
  EXPECT_EQ(network->origin.str(), "site.yaml:5:3");

  const CollectorSpec* memory = cfg.find("memory");
  EXPECT_TRUE(memory->enabled);
  EXPECT_EQ(memory->handler.column, "memory_gib");
  EXPECT_EQ(memory->handler.origin.str(), "site.yaml:8:5");

  const CollectorSpec* sensors = cfg.find("sensors");
  EXPECT_EQ(sensors->target, "exec");
  EXPECT_TRUE(sensors->inject.empty());
  EXPECT_EQ(sensors->handler.target, "PerDeviceAggregateHandler");
  EXPECT_EQ(sensors->handler.prefix, "temp_");
  ASSERT_EQ(sensors->kwargs.count("command"), 1u);
  const KwArg& command = sensors->kwargs.at("command");
  ASSERT_TRUE(command.value.IsSequence());
  EXPECT_EQ(command.value.as<std::vector<std::string>>(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(command.origin.str(), "site.yaml:11:14");
  EXPECT_EQ(sensors->kwargs.at("retries").value.as<int>(), 3);
  EXPECT_EQ(sensors->origin.str(), "site.yaml:9:3");
}

TEST(ConfigMerge, HandlerReplacedWholeAndKwargsMergeByKey) {
  Config cfg = defaults();
  ASSERT_TRUE(merge_config_text(cfg, R"(collectors:
  x:
    _target_: exec
    command: [a]
    env: prod
    handler: {_target_: ScalarHandler, column: x}
)",
                                "a.yaml")
                  .ok());
  auto r = merge_config_text(cfg, R"(collectors:
  x:
    command: [b, c]
    timeout: 0.25
    inject: [node_info]
    handler: {_target_: CumulativeRateHandler, columns: [x_a, x_b]}
)",
                             "b.yaml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  const CollectorSpec* x = cfg.find("x");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->target, "exec");
  EXPECT_EQ(x->kwargs.at("command").value.as<std::vector<std::string>>(),
            (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(x->kwargs.at("command").origin.file, "b.yaml");
  EXPECT_EQ(x->kwargs.at("env").value.as<std::string>(), "prod");
  EXPECT_EQ(x->kwargs.at("env").origin.file, "a.yaml");
  EXPECT_EQ(x->timeout_s, 0.25);
  EXPECT_EQ(x->inject, std::vector<std::string>{"node_info"});
  EXPECT_EQ(x->handler.target, "CumulativeRateHandler");
  EXPECT_FALSE(x->handler.column);  // the old handler's column is gone
  EXPECT_EQ(x->handler.columns, (std::vector<std::string>{"x_a", "x_b"}));
  EXPECT_EQ(x->origin.str(), "b.yaml:2:3");
  EXPECT_EQ(names(cfg).back(), "x");
  EXPECT_EQ(cfg.collectors.size(), 10u);
}

TEST(ConfigMerge, JumperHandlerNameAndMultiAggregate) {
  Config cfg = defaults();
  auto r = merge_config_text(cfg, R"(collectors:
  io:
    handler:
      _target_: jumper_extension.monitor.metrics.handlers.CumulativeRateHandler
      columns: [io_read, io_write]
  gpu:
    _target_: sonde.collectors.gpu_nvml
    inject: [node_info]
    handler:
      _target_: jumper_extension.monitor.metrics.handlers.PerDeviceMultiAggregateHandler
      prefix: gpu_
      metrics: [util, band, mem]
)",
                             "jumper.yaml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(cfg.find("io")->handler.target, "CumulativeRateHandler");
  const CollectorSpec* gpu = cfg.find("gpu");
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->handler.target, "PerDeviceMultiAggregateHandler");
  EXPECT_EQ(gpu->handler.prefix, "gpu_");
  EXPECT_EQ(gpu->handler.metrics, (std::vector<std::string>{"util", "band", "mem"}));
}

TEST(ConfigMerge, EmptyOrCommentOnlyDocumentChangesNothing) {
  Config cfg = defaults();
  for (const char* text : {"", "\n\n", "# only a comment\n# and another\n"}) {
    Config copy = cfg;
    auto r = merge_config_text(copy, text, "empty.yaml");
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(copy.sources.back(), "empty.yaml");
    EXPECT_EQ(names(copy), names(cfg));
    EXPECT_EQ(copy.interval_s, cfg.interval_s);
  }
}

TEST(ConfigMerge, FailedMergeLeavesConfigUnchanged) {
  Config cfg = defaults();
  auto r =
      merge_config_text(cfg, "interval: 3\ncollectors:\n  cpu: {enabled: maybe}\n", "bad.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::config);
  EXPECT_DOUBLE_EQ(cfg.interval_s, 0.5);
  EXPECT_TRUE(cfg.find("cpu")->enabled);
  EXPECT_EQ(cfg.sources, std::vector<std::string>{"<defaults>"});
}

TEST(ConfigLoad, LayersInOrder) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  dir.write("etc/sonde/config.yaml", "interval: 1\nout_dir: /var/sonde\n");
  dir.write("xdg/sonde/config.yaml", "interval: 2\ncollectors:\n  io: {enabled: false}\n");
  dir.write("cwd/sonde.yaml", "levels: [user]\n");
  search.explicit_file = dir.write("explicit.yaml", "interval: 4\n");

  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 4);
  EXPECT_EQ(cfg->out_dir, "/var/sonde");
  EXPECT_FALSE(cfg->find("io")->enabled);
  EXPECT_EQ(cfg->levels, std::vector<Level>{Level::user});
  EXPECT_EQ(cfg->sources, (std::vector<std::string>{"<defaults>", search.etc_file,
                                                    *search.xdg_config_home + "/sonde/config.yaml",
                                                    search.cwd_file, search.explicit_file}));
}

TEST(ConfigLoad, MissingOptionalFilesAreSkipped) {
  TempDir dir;
  auto cfg = load_config(isolated(dir));
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->sources, std::vector<std::string>{"<defaults>"});
  EXPECT_EQ(cfg->collectors.size(), 9u);
}

TEST(ConfigLoad, XdgFromEnvironmentThenHome) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.xdg_config_home.reset();
  dir.write("env-xdg/sonde/config.yaml", "interval: 3\n");
  dir.write("home/.config/sonde/config.yaml", "interval: 5\n");
  ScopedEnv home("HOME", (dir.path() / "home").c_str());
  {
    ScopedEnv xdg("XDG_CONFIG_HOME", (dir.path() / "env-xdg").c_str());
    auto cfg = load_config(search);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    EXPECT_DOUBLE_EQ(cfg->interval_s, 3);
  }
  ScopedEnv no_xdg("XDG_CONFIG_HOME", nullptr);
  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 5);
  EXPECT_EQ(cfg->sources.back(), (dir.path() / "home/.config/sonde/config.yaml").string());
}

TEST(ConfigLoad, ErrorNamesTheFileThatHasIt) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  dir.write("etc/sonde/config.yaml", "interval: 1\n");
  std::string xdg_file = dir.write("xdg/sonde/config.yaml", "# site\nlevels: [gpu]\n");
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().message.rfind(xdg_file + ":2:10: levels: unknown level 'gpu'", 0), 0u)
      << cfg.error().message;
}

TEST(ConfigLoad, MissingExplicitFileIsError) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.explicit_file = (dir.path() / "nope.yaml").string();
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().code, Errc::io);
  EXPECT_EQ(cfg.error().message,
            "cannot read config file " + search.explicit_file + ": No such file or directory");
}

TEST(ConfigLoad, ExplicitDirectoryIsError) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.explicit_file = dir.path().string();
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.error().message.find("refusing config file " + dir.path().string() +
                                     ": not a regular file"),
            std::string::npos);
}

// ---- trust (docs/security.md): the rules of src/core/trust.cpp for configuration files ----

struct Warnings {
  std::vector<std::string> lines;
  ConfigWarn fn() {
    return [this](const std::string& m) { lines.push_back(m); };
  }
};

TEST(ConfigTrust, ImplicitWritableFileIsIgnoredWithOneWarning) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  Warnings w;
  search.warn = w.fn();
  dir.write("cwd/sonde.yaml", "interval: 3\n");
  ASSERT_EQ(::chmod(search.cwd_file.c_str(), 0666), 0);
  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 0.5);
  EXPECT_EQ(cfg->sources, std::vector<std::string>{"<defaults>"});
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], "ignoring config file " + search.cwd_file +
                            ": its file is writable by others (mode 666); run chmod go-w on it "
                            "(see docs/security.md)");
}

TEST(ConfigTrust, ExplicitWritableFileOrDirectoryIsAnError) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.explicit_file = dir.write("group/c.yaml", "interval: 3\n");
  ASSERT_EQ(::chmod(search.explicit_file.c_str(), 0664), 0);
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().message, "refusing config file " + search.explicit_file +
                                     ": its file is writable by its group (mode 664); run chmod "
                                     "go-w on it");
  ASSERT_EQ(::chmod(search.explicit_file.c_str(), 0644), 0);
  ASSERT_EQ(::chmod((dir.path() / "group").c_str(), 0777), 0);
  cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.error().message.find("its directory is writable by others (mode 777)"),
            std::string::npos)
      << cfg.error().message;
  ASSERT_EQ(::chmod((dir.path() / "group").c_str(), 0755), 0);
  cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 3);
}

// A sticky directory writable by all (/tmp): only a file's owner may replace the file there, so
// the file's own owner and mode decide.
TEST(ConfigTrust, StickyDirectoryIsAccepted) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.explicit_file = dir.write("tmp/c.yaml", "interval: 3\n");
  ASSERT_EQ(::chmod((dir.path() / "tmp").c_str(), 01777), 0);
  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 3);
  ASSERT_EQ(::chmod(search.explicit_file.c_str(), 0666), 0);
  EXPECT_FALSE(load_config(search).ok());
}

TEST(ConfigTrust, SymbolicLinkIsRefused) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  const std::string real = dir.write("real.yaml", "interval: 3\n");
  search.explicit_file = (dir.path() / "link.yaml").string();
  fs::create_symlink(real, search.explicit_file);
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.error().message, "refusing config file " + search.explicit_file +
                                     ": it is a symbolic link (give the real file)");
}

TEST(ConfigTrust, FileOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another uid";
  TempDir dir;
  ConfigSearch search = isolated(dir);
  Warnings w;
  search.warn = w.fn();
  dir.write("cwd/sonde.yaml", "interval: 3\n");
  ASSERT_EQ(::chown(search.cwd_file.c_str(), 4242, 4242), 0);
  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_DOUBLE_EQ(cfg->interval_s, 0.5);
  ASSERT_EQ(w.lines.size(), 1u);
  EXPECT_EQ(w.lines[0], "ignoring config file " + search.cwd_file +
                            ": its file is owned by uid 4242, not by root or you (uid 0) (see "
                            "docs/security.md)");
  // Its directory another user's: refused as well.
  ASSERT_EQ(::chown(search.cwd_file.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown((dir.path() / "cwd").c_str(), 4242, 4242), 0);
  search.explicit_file = search.cwd_file;
  cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.error().message.find("its directory is owned by uid 4242"), std::string::npos);
}

TEST(ConfigTrust, OversizedFileIsRefused) {
  TempDir dir;
  ConfigSearch search = isolated(dir);
  search.explicit_file = dir.write("big.yaml", std::string(kMaxConfigBytes + 1, '#'));
  auto cfg = load_config(search);
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.error().message.find("larger than " + std::to_string(kMaxConfigBytes)),
            std::string::npos)
      << cfg.error().message;
}

// ---- ranges and expansion limits ----

TEST(ConfigRanges, EveryRangeIsFiniteAndOrdered) {
  for (const NumericRange& r : numeric_ranges()) {
    EXPECT_TRUE(std::isfinite(r.min) && std::isfinite(r.max)) << r.name;
    EXPECT_LE(r.min, r.max) << r.name;
  }
  EXPECT_DOUBLE_EQ(numeric_range("interval").min, 0.001);
  EXPECT_DOUBLE_EQ(numeric_range("interval").max, 86400);
}

TEST(ConfigRanges, ParseInRangeRefusesWhatIsNotAFiniteNumberInRange) {
  const NumericRange& interval = numeric_range("interval");
  for (const char* bad : {"inf", "infinity", "-inf", "nan", "1e308", "-1", "0", "0.0009", "86401",
                          "", " 1", "1s", "0x10"}) {
    auto v = parse_in_range(interval, bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(v.error().message,
              "expected a number of seconds from 0.001 to 86400, got '" + std::string(bad) + "'");
  }
  for (const char* good : {"0.001", "0.5", "86400", "1e-3"})
    EXPECT_TRUE(parse_in_range(interval, good).ok()) << good;
  auto pid = parse_in_range(numeric_range("--pid"), "1.5", true);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.error().message, "expected a whole number from 1 to 4194304, got '1.5'");
}

TEST(ConfigRanges, SmallestAndLargestIntervalAreAccepted) {
  for (const char* text : {"interval: 0.001\n", "interval: 86400\n"}) {
    Config cfg = defaults();
    auto r = merge_config_text(cfg, text, "c.yaml");
    EXPECT_TRUE(r.ok()) << text << r.error().message;
  }
}

TEST(ConfigLimits, ModestAliasesAreAccepted) {
  std::string text =
      "collectors:\n  a:\n    _target_: exec\n    command: &cmd [my-sensor, --json]\n"
      "    handler: &h {_target_: ScalarHandler, column: a}\n";
  for (int i = 0; i < 20; ++i)
    text += "  b" + std::to_string(i) + ": {_target_: exec, command: *cmd, handler: *h}\n";
  Config cfg = defaults();
  auto r = merge_config_text(cfg, text, "c.yaml");
  // Duplicate columns across collectors are the engine's business; the parser accepts them.
  EXPECT_TRUE(r.ok()) << r.error().message;
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.interval_s, b.interval_s);
  EXPECT_EQ(a.levels, b.levels);
  EXPECT_EQ(a.out_dir, b.out_dir);
  ASSERT_EQ(names(a), names(b));
  for (std::size_t i = 0; i < a.collectors.size(); ++i) {
    const CollectorSpec& x = a.collectors[i];
    const CollectorSpec& y = b.collectors[i];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(x.target, y.target);
    EXPECT_EQ(x.inject, y.inject);
    EXPECT_EQ(x.enabled, y.enabled);
    EXPECT_EQ(x.timeout_s, y.timeout_s);
    EXPECT_EQ(x.handler.target, y.handler.target);
    EXPECT_EQ(x.handler.column, y.handler.column);
    EXPECT_EQ(x.handler.prefix, y.handler.prefix);
    EXPECT_EQ(x.handler.metrics, y.handler.metrics);
    EXPECT_EQ(x.handler.columns, y.handler.columns);
    ASSERT_EQ(x.kwargs.size(), y.kwargs.size());
    for (const auto& [key, arg] : x.kwargs) {
      ASSERT_EQ(y.kwargs.count(key), 1u) << key;
      const YAML::Node& other = y.kwargs.at(key).value;
      EXPECT_EQ(YAML::Dump(arg.value), YAML::Dump(other)) << key;
      if (arg.value.IsScalar()) {
        EXPECT_EQ(arg.value.Tag(), other.Tag()) << key;
      }
    }
  }
}

TEST(ConfigDump, RoundTrip) {
  Config cfg = defaults();
  auto r = merge_config_text(cfg, R"(interval: 0.1
levels: [slurm, process]
out_dir: "runs: today"
collectors:
  cpu: {enabled: false, timeout: 0.05}
  sensors:
    _target_: exec
    command: [/usr/bin/sensor, --json]
    name: "123"
    flag: yes
    nested: {a: [1, 2], b: ~}
    handler: {_target_: PerDeviceMultiAggregateHandler, prefix: s_, metrics: [t, p]}
)",
                             "site.yaml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  std::string text = dump_config(cfg);
  EXPECT_EQ(text.rfind("# sonde configuration", 0), 0u) << text;
  EXPECT_NE(text.find("#   <defaults>\n#   site.yaml\n"), std::string::npos) << text;

  Config back;
  auto r2 = merge_config_text(back, text, "dump.yaml");
  ASSERT_TRUE(r2.ok()) << r2.error().message << "\n" << text;
  expect_same(cfg, back);
  EXPECT_EQ(back.find("sensors")->kwargs.at("name").value.Tag(), "!");  // still a string
  back.sources = cfg.sources;
  EXPECT_EQ(dump_config(back), text);
}

TEST(ConfigDump, DefaultsRoundTrip) {
  Config cfg = defaults();
  Config back;
  auto r = merge_config_text(back, dump_config(cfg), "dump.yaml");
  ASSERT_TRUE(r.ok()) << r.error().message;
  expect_same(cfg, back);
}

// --- Malformed files: every message names config.yaml, the line, and what was expected. ---

struct BadCase {
  const char* name;
  std::string_view text;
  int line;
  const char* expected;  ///< a fragment of the message
};

const BadCase kBadCases[] = {
    {"yaml_syntax", "interval: 1\nlevels: [process, user\nout_dir: x\n", 3,
     "invalid YAML: end of sequence flow not found"},
    {"yaml_tab_indent", "interval: 1\n\tlevels: [user]\n", 2,
     "invalid YAML: illegal tab when looking for indentation"},
    {"yaml_tab_in_block", "collectors:\n\tcpu: {enabled: false}\n", 2,
     "(YAML is indented with spaces, not tabs)"},
    {"yaml_bad_indent", "collectors:\n  cpu:\n    enabled: false\n   timeout: 1\n", 4,
     "invalid YAML"},
    {"two_documents", "interval: 1\n---\ninterval: 2\n", 3, "expected one YAML document, found 2"},
    {"top_level_list", "- interval\n- 1\n", 1,
     "expected a map of settings (interval, levels, out_dir, raise_priority, collectors) at the "
     "top level, got "
     "a list"},
    {"top_level_scalar", "# hello\njust words\n", 2, "at the top level, got 'just words'"},
    {"unknown_top_level_key", "interval: 1\nintervall: 2\n", 2,
     "unknown key 'intervall' (expected one of: interval, levels, out_dir, raise_priority, "
     "collectors)"},
    {"duplicate_key", "interval: 1\nout_dir: a\ninterval: 2\n", 3,
     "duplicate key 'interval' (first given on line 1)"},
    {"interval_zero", "interval: 0\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got '0'"},
    {"interval_negative", "\ninterval: -1\n", 2,
     "interval: expected a number of seconds from 0.001 to 86400, got '-1'"},
    {"interval_word", "interval: fast\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got 'fast'"},
    {"interval_quoted", "interval: \"0.5\"\n", 1,
     "expected a number of seconds from 0.001 to 86400, got '0.5' (a quoted string)"},
    {"interval_empty", "interval:\nout_dir: x\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got nothing"},
    {"interval_too_small", "interval: 0.0009\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got '0.0009'"},
    {"interval_too_large", "interval: 86401\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got '86401'"},
    {"interval_huge", "interval: 1e308\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got '1e308'"},
    {"interval_inf", "interval: .inf\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got '.inf'"},
    {"interval_inf_word", "interval: infinity\n", 1,
     "interval: expected a number of seconds from 0.001 to 86400, got 'infinity'"},
    {"interval_nan", "interval: .nan\n", 1,
     "expected a number of seconds from 0.001 to 86400, got '.nan'"},
    {"levels_unknown", "levels:\n  - process\n  - gpu\n", 3,
     "levels: unknown level 'gpu' (expected one of: process, user, slurm, system)"},
    {"levels_duplicate", "levels: [user, system, user]\n", 1, "levels: duplicate level 'user'"},
    {"levels_not_list", "levels: user\n", 1, "levels: expected a non-empty list of levels"},
    {"levels_empty", "levels: []\n", 1, "got an empty list"},
    {"out_dir_not_string", "out_dir: [a, b]\n", 1, "out_dir: expected a string, got a list"},
    {"collectors_not_map", "collectors: [cpu, memory]\n", 1,
     "collectors: expected a map of collector name to entry, got a list"},
    {"entry_not_map", "collectors:\n  cpu: false\n", 2,
     "collectors.cpu: expected a map with _target_, handler"},
    {"entry_duplicate", "collectors:\n  cpu: {enabled: false}\n  cpu: {enabled: true}\n", 3,
     "collectors: duplicate key 'cpu' (first given on line 2)"},
    {"new_entry_without_target",
     "collectors:\n  lustre:\n    handler: {_target_: ScalarHandler, column: lustre}\n", 2,
     "collectors.lustre: a new collector needs '_target_'"},
    {"new_entry_without_handler", "interval: 1\ncollectors:\n  lustre:\n    _target_: exec\n", 3,
     "collectors.lustre: a new collector needs 'handler'"},
    {"target_not_string", "collectors:\n  cpu:\n    _target_: {a: b}\n", 3,
     "collectors.cpu._target_: expected a string, got a map"},
    {"unknown_reserved_key", "collectors:\n  cpu:\n    _taget_: x\n", 3,
     "collectors.cpu: unknown reserved key '_taget_' (expected one of: _target_, inject, enabled, "
     "timeout, handler)"},
    {"unknown_handler", "collectors:\n  cpu:\n    handler: {_target_: AverageHandler}\n", 3,
     "collectors.cpu.handler._target_: unknown handler 'AverageHandler' (expected one of: "
     "ScalarHandler, PerDeviceAggregateHandler, PerDeviceMultiAggregateHandler, "
     "CumulativeRateHandler, NoOpHandler)"},
    {"unknown_dotted_handler", "collectors:\n  cpu:\n    handler: {_target_: a.b.RateHandler}\n", 3,
     "unknown handler 'a.b.RateHandler'"},
    {"handler_not_map", "collectors:\n  cpu:\n    handler: ScalarHandler\n", 3,
     "collectors.cpu.handler: expected a map with _target_"},
    {"handler_without_target", "collectors:\n  memory:\n    handler: {column: mem}\n", 3,
     "collectors.memory.handler: missing '_target_'"},
    {"handler_missing_column", "collectors:\n  memory:\n\n    handler: {_target_: ScalarHandler}\n",
     4, "collectors.memory.handler: ScalarHandler needs 'column' (a column name)"},
    {"handler_missing_metrics",
     "collectors:\n  g:\n    _target_: exec\n    handler:\n      _target_: "
     "PerDeviceMultiAggregateHandler\n      prefix: g_\n",
     4, "PerDeviceMultiAggregateHandler needs 'metrics'"},
    {"handler_columns_not_list",
     "collectors:\n  io:\n    handler: {_target_: CumulativeRateHandler, columns: io_read}\n", 3,
     "collectors.io.handler.columns: expected a non-empty list of column names, got 'io_read'"},
    {"handler_columns_empty",
     "collectors:\n  io:\n    handler: {_target_: CumulativeRateHandler, columns: []}\n", 3,
     "collectors.io.handler.columns: expected a non-empty list of column names, got an empty "
     "list"},
    {"handler_duplicate_columns",
     "collectors:\n  io:\n    handler:\n      _target_: CumulativeRateHandler\n      columns:\n"
     "        - io_read\n        - io_write\n        - io_read\n",
     8, "collectors.io.handler.columns: duplicate column 'io_read'"},
    {"bad_column_name",
     "collectors:\n  memory:\n    handler: {_target_: ScalarHandler, column: 2mem-used}\n", 3,
     "collectors.memory.handler.column: expected a column name matching [A-Za-z_][A-Za-z0-9_]*, "
     "got '2mem-used'"},
    {"bad_name_in_columns",
     "collectors:\n  io:\n    handler: {_target_: CumulativeRateHandler, columns: [a, b c]}\n", 3,
     "collectors.io.handler.columns[1]: expected a column name"},
    {"unknown_handler_arg",
     "collectors:\n  memory:\n    handler: {_target_: ScalarHandler, column: m, unit: GiB}\n", 3,
     "collectors.memory.handler: unknown argument 'unit' for ScalarHandler (expected: column)"},
    {"noop_handler_arg",
     "collectors:\n  process:\n    handler: {_target_: NoOpHandler, column: x}\n", 3,
     "unknown argument 'column' for NoOpHandler (it takes none)"},
    {"unknown_inject", "collectors:\n  cpu:\n    inject: [node_info, gpu_info]\n", 3,
     "collectors.cpu.inject: unknown inject key 'gpu_info' (expected one of: node_info, pid, "
     "process, uid, slurm_job)"},
    {"inject_not_list", "collectors:\n  cpu:\n    inject: node_info\n", 3,
     "collectors.cpu.inject: expected a list of inject keys (node_info, pid, process, uid, "
     "slurm_job), got "
     "'node_info'"},
    {"enabled_not_bool", "collectors:\n  cpu:\n    enabled: maybe\n", 3,
     "collectors.cpu.enabled: expected true or false, got 'maybe'"},
    {"timeout_zero", "collectors:\n  cpu:\n    timeout: 0\n", 3,
     "collectors.cpu.timeout: expected a number of seconds from 0.001 to 86400, got '0'"},
    {"timeout_negative", "collectors:\n  cpu: {timeout: -0.5}\n", 2,
     "collectors.cpu.timeout: expected a number of seconds from 0.001 to 86400, got '-0.5'"},
    {"timeout_inf", "collectors:\n  cpu: {timeout: .inf}\n", 2,
     "collectors.cpu.timeout: expected a number of seconds from 0.001 to 86400, got '.inf'"},
    {"billion_laughs",
     "collectors:\n"
     "  cpu:\n"
     "    a: &a [x, x, x, x, x, x, x, x, x, x]\n"
     "    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
     "    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
     "    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
     "    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n"
     "    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n"
     "    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]\n",
     1, "the YAML expands to more than"},
    {"self_alias", "collectors:\n  cpu:\n    a: &a [x, *a]\n", 1, "nests deeper than 64 levels"},
    {"control_byte", "interval: 0.5\nout_dir: \"ab\x01\"\n", 2,
     "invalid YAML: control character U+0001"},
    {"nul_in_key", std::string_view("collectors:\n  cp\0u: {}\n", 22), 2,
     "control character U+0000"},
    {"not_utf8", "interval: 0.5\n# caf\xe9\n", 2, "byte 0xE9, which is not UTF-8"},
    {"utf8_cut_short", "out_dir: x\xe2\x82", 1, "a UTF-8 sequence cut short"},
};

void PrintTo(const BadCase& c, std::ostream* os) {
  *os << c.name;
}

class ConfigMalformed : public ::testing::TestWithParam<BadCase> {};

TEST_P(ConfigMalformed, NamesFileLineAndExpectation) {
  const BadCase& c = GetParam();
  Config cfg = defaults();
  auto r = merge_config_text(cfg, std::string(c.text), "config.yaml");
  ASSERT_FALSE(r.ok()) << "accepted:\n" << c.text;
  const std::string& msg = r.error().message;
  EXPECT_EQ(r.error().code, Errc::config);
  std::string prefix = "config.yaml:" + std::to_string(c.line) + ":";
  EXPECT_EQ(msg.rfind(prefix, 0), 0u) << msg;
  EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
  EXPECT_EQ(cfg.sources, std::vector<std::string>{"<defaults>"});
}

INSTANTIATE_TEST_SUITE_P(ConfigErrors, ConfigMalformed, ::testing::ValuesIn(kBadCases),
                         [](const ::testing::TestParamInfo<BadCase>& p) {
                           return std::string(p.param.name);
                         });

TEST(ConfigErrors, ExactMessageWithColumn) {
  Config cfg = defaults();
  auto r = merge_config_text(cfg, "# sonde\n# site settings\ninterval: fast\n", "config.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "config.yaml:3:11: interval: expected a number of seconds from 0.001 to 86400, got "
            "'fast'");
}

TEST(ConfigErrors, UnknownKeyMessageListsTheSettingTable) {
  Config cfg;
  auto r = merge_config_text(cfg, "colectors: {}\n", "c.yaml");
  ASSERT_FALSE(r.ok());
  std::string keys;
  for (const SettingInfo& s : setting_table())
    keys += std::string(keys.empty() ? "" : ", ") + s.key;
  EXPECT_EQ(r.error().message,
            "c.yaml:1:1: unknown key 'colectors' (expected one of: " + keys + ")");
}

}  // namespace
}  // namespace sonde
