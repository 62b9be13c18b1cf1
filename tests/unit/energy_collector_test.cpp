// The energy collector on a fake powercap tree (counters advancing at known rates and wrapping,
// a zone that disappears, counters readable only by root) and on the fake NVML and ROCm SMI
// energy counters; level shares checked against the known rates.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/collector.hpp"
#include "core/config.hpp"
#include "core/engine.hpp"
#include "core/rapl.hpp"
#include "sinks/prometheus.hpp"
#include "support/built_paths.hpp"

namespace sonde {
namespace {

namespace fs = std::filesystem;

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class EnergyCollectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("sonde-energy-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "proc");
    fs::create_directories(root_ / "sys");
    fs::permissions(root_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
    roots_.proc = (root_ / "proc").string();
    roots_.sys = (root_ / "sys").string();
    setenv("SONDE_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
    setenv("SONDE_ROCM_SMI_LIBRARY", "/nonexistent/librocm_smi64.so", 1);
  }
  void TearDown() override {
    fs::remove_all(root_);
    for (const char* v :
         {"SONDE_NVML_LIBRARY", "SONDE_ROCM_SMI_LIBRARY", "SONDE_FAKE_GPU_SCENARIO"})
      unsetenv(v);
  }

  fs::path zone_dir(const std::string& zone) const { return root_ / "sys/class/powercap" / zone; }
  void zone(const std::string& zone, const std::string& name, double range_uj) {
    write(zone_dir(zone) / "name", name + "\n");
    write(zone_dir(zone) / "max_energy_range_uj", fmt(range_uj));
    write(zone_dir(zone) / "energy_uj", "0\n");
  }
  static std::string fmt(double v) { return std::to_string(static_cast<long long>(v)) + "\n"; }
  void set_uj(const std::string& zone, double uj) { write(zone_dir(zone) / "energy_uj", fmt(uj)); }
  void topology(int cpu, int package) {
    write(root_ / "sys/devices/system/cpu" / ("cpu" + std::to_string(cpu)) /
              "topology/physical_package_id",
          std::to_string(package) + "\n");
  }
  // /proc/stat with cumulative busy (user) and idle ticks per CPU.
  void stat(const std::vector<std::pair<long, long>>& cpus) {
    long busy = 0, idle = 0;
    std::string lines;
    for (std::size_t i = 0; i < cpus.size(); ++i) {
      busy += cpus[i].first;
      idle += cpus[i].second;
      lines += "cpu" + std::to_string(i) + " " + std::to_string(cpus[i].first) + " 0 0 " +
               std::to_string(cpus[i].second) + " 0 0 0 0 0 0\n";
    }
    write(root_ / "proc/stat", "cpu  " + std::to_string(busy) + " 0 0 " + std::to_string(idle) +
                                   " 0 0 0 0 0 0\n" + lines);
  }

  std::unique_ptr<Collector> make(bool gpus) {
    register_builtin_collectors(registry_);
    const CollectorInfo* info = registry_.find("energy");
    EXPECT_NE(info, nullptr);
    if (info == nullptr) return nullptr;
    CollectorArgs args;
    args.name = "energy";
    args.roots = &roots_;
    for (const auto& p : info->params) args.params[p.name] = p.default_value;
    args.params["gpus"] = gpus;
    args.handler_metrics = {"power", "joules"};
    args.warn = [this](const std::string& m) { warnings_ += m + "\n"; };
    return info->make(args);
  }

  // The process level holds one pid: `placed` seconds on CPUs, `unplaced` more not placed.
  TickContext tick(double dt, int pid, const std::vector<CpuShare>& placed, double unplaced) {
    procs_ = ProcSnapshot{};
    PidSample s;
    s.pid = pid;
    s.level_mask = 1u << level_index(Level::process);
    double total = unplaced;
    for (const auto& c : placed) {
      procs_.shares.push_back(c);
      total += c.seconds;
    }
    s.share_begin = 0;
    s.share_end = static_cast<std::uint32_t>(placed.size());
    s.cpu_delta_s = total;
    procs_.pids.push_back(s);
    procs_.members[level_index(Level::process)] = {0};
    TickContext ctx;
    ctx.dt_s = dt;
    ctx.procs = &procs_;
    return ctx;
  }

  static const std::vector<std::vector<double>>& metrics(const Result<RawValue>& r) {
    return std::get<MultiPerDevice>(*r).metrics;
  }

  fs::path root_;
  Roots roots_;
  Registry registry_;
  ProcSnapshot procs_;
  std::string warnings_;
};

TEST_F(EnergyCollectorTest, UnavailableWithoutRaplAndGpus) {
  auto c = make(true);
  auto ok = c->setup();
  ASSERT_FALSE(ok.ok());
  EXPECT_NE(ok.error().message.find("no RAPL zone"), std::string::npos) << ok.error().message;
  EXPECT_NE(ok.error().message.find("no GPU"), std::string::npos) << ok.error().message;
}

TEST_F(EnergyCollectorTest, DiscoversZonesInOrder) {
  zone("intel-rapl:1", "package-1", 1e9);
  zone("intel-rapl:0", "package-0", 1e9);
  zone("intel-rapl:0:1", "dram", 1e9);
  zone("intel-rapl:0:0", "core", 1e9);
  zone("intel-rapl:10", "psys", 1e9);
  zone("intel-rapl-mmio:0", "package-0", 1e9);  // a second view of package-0: not read
  const auto zones = rapl::discover(roots_.sys);
  ASSERT_EQ(zones.size(), 5u);
  EXPECT_EQ(zones[0].label, "package-0");
  EXPECT_EQ(zones[1].label, "core-0");
  EXPECT_EQ(zones[2].label, "dram-0");
  EXPECT_EQ(zones[3].label, "package-1");
  EXPECT_EQ(zones[4].label, "psys");
  EXPECT_EQ(zones[2].package, 0);
  EXPECT_EQ(zones[4].package, -1);
  EXPECT_DOUBLE_EQ(zones[0].max_range_uj, 1e9);
}

// Counters advancing at known rates, wrapping at max_energy_range_uj; the process level's share
// of each package by its CPU time on that package's CPUs.
TEST_F(EnergyCollectorTest, RatesWrapAndLevelShares) {
  // package-0 wraps every 100 J (60 J per 1 s tick).
  zone("intel-rapl:0", "package-0", 100e6);
  zone("intel-rapl:0:0", "core", 100e6);
  zone("intel-rapl:0:1", "dram", 262143328850.0);
  zone("intel-rapl:1", "package-1", 262143328850.0);
  zone("intel-rapl:2", "psys", 262143328850.0);
  for (int cpu = 0; cpu < 4; ++cpu) topology(cpu, cpu / 2);
  const std::vector<std::pair<std::string, double>> rate_w = {{"intel-rapl:0", 60},
                                                              {"intel-rapl:0:0", 40},
                                                              {"intel-rapl:0:1", 6},
                                                              {"intel-rapl:1", 30},
                                                              {"intel-rapl:2", 120}};
  const std::vector<double> max_uj = {100e6, 100e6, 262143328850.0, 262143328850.0, 262143328850.0};
  auto counters_at = [&](int k) {
    for (std::size_t i = 0; i < rate_w.size(); ++i)
      set_uj(rate_w[i].first, std::fmod(12345678.0 + rate_w[i].second * 1e6 * k, max_uj[i]));
    // Per 1 s interval (USER_HZ 100): cpu0 busy, cpu1 half, cpu2 20 %, cpu3 idle.
    stat({{100L * k, 0}, {50L * k, 50L * k}, {20L * k, 80L * k}, {0, 100L * k}});
  };
  counters_at(0);
  auto c = make(false);
  ASSERT_TRUE(c->setup().ok()) << warnings_;
  NodeInfo node;
  c->contribute_node_info(node);
  EXPECT_EQ(node.energy.domains,
            (std::vector<std::string>{"package-0", "core-0", "dram-0", "package-1", "psys"}));
  EXPECT_EQ(node.energy.counted, (std::vector<std::string>{"package-0", "dram-0", "package-1"}));
  EXPECT_DOUBLE_EQ(node.energy.carbon_intensity_g_per_kwh, 480);
  EXPECT_FALSE(node.energy.method.empty());

  // The process: 0.75 s on cpu0, 0.1 s on cpu2, 0.4 s unplaced (0.1 s per CPU).
  const std::vector<CpuShare> placed = {{0, 0.75}, {2, 0.1}};
  TickContext ctx0 = tick(0, 4242, placed, 0.4);
  c->snapshot(ctx0);
  {
    const auto sys = c->collect(Level::system, ctx0);
    ASSERT_TRUE(sys.ok());
    EXPECT_TRUE(std::isnan(metrics(sys)[0][0]));  // no interval yet
    EXPECT_EQ(metrics(sys)[1][0], 0);             // nothing used yet
  }
  // Level shares: package 0 busy 1.5 s, the process 0.95 s; package 1 busy 0.2 s, the process
  // 0.3 s (capped at 1); every CPU (psys) 1.7 s busy, the process 1.25 s.
  const double share0 = 0.95 / 1.5, share1 = 1.0, share_all = 1.25 / 1.7;
  const std::vector<double> process_share = {share0, share0, share0, share1, share_all};
  for (int k = 1; k <= 10; ++k) {
    counters_at(k);
    TickContext ctx = tick(1.0, 4242, placed, 0.4);
    c->snapshot(ctx);
    const auto sys = c->collect(Level::system, ctx);
    const auto proc = c->collect(Level::process, ctx);
    const auto user = c->collect(Level::user, ctx);
    ASSERT_TRUE(sys.ok() && proc.ok() && user.ok());
    for (std::size_t i = 0; i < rate_w.size(); ++i) {
      const double w = rate_w[i].second;
      EXPECT_NEAR(metrics(sys)[0][i], w, 0.02 * w) << "tick " << k << " domain " << i;
      EXPECT_NEAR(metrics(sys)[1][i], w * k, 0.02 * w * k) << "tick " << k << " domain " << i;
      const double pw = w * process_share[i];
      EXPECT_NEAR(metrics(proc)[0][i], pw, 0.02 * pw) << "tick " << k << " domain " << i;
      EXPECT_NEAR(metrics(proc)[1][i], pw * k, 0.02 * pw * k) << "tick " << k << " domain " << i;
      EXPECT_EQ(metrics(user)[0][i], 0);  // no member: measured, used nothing
    }
  }
  EXPECT_EQ(warnings_, "");
}

// A zone that disappears: its columns are not measured from then on (never 0), the others go on.
TEST_F(EnergyCollectorTest, DisappearingDomain) {
  zone("intel-rapl:0", "package-0", 262143328850.0);
  zone("intel-rapl:1", "package-1", 262143328850.0);
  for (int cpu = 0; cpu < 2; ++cpu) topology(cpu, cpu);
  stat({{0, 0}, {0, 0}});
  auto c = make(false);
  ASSERT_TRUE(c->setup().ok());
  for (int k = 0; k <= 4; ++k) {
    if (k == 3) fs::remove_all(zone_dir("intel-rapl:1"));
    set_uj("intel-rapl:0", 50e6 * k);
    if (k < 3) set_uj("intel-rapl:1", 20e6 * k);
    stat({{50L * k, 50L * k}, {50L * k, 50L * k}});
    TickContext ctx = tick(k == 0 ? 0 : 1.0, 4242, {{0, 0.5}}, 0);
    c->snapshot(ctx);
    for (Level l : {Level::system, Level::process}) {
      const auto r = c->collect(l, ctx);
      ASSERT_TRUE(r.ok());
      if (k == 0) continue;
      // The process ran all of cpu0's busy time: all of package-0, none of package-1.
      EXPECT_NEAR(metrics(r)[0][0], 50, 1e-6) << k;
      EXPECT_NEAR(metrics(r)[1][0], 50.0 * k, 1e-6) << k;
      if (k < 3) {
        EXPECT_NEAR(metrics(r)[1][1], l == Level::system ? 20.0 * k : 0.0, 1e-6) << k;
      } else {
        EXPECT_TRUE(std::isnan(metrics(r)[0][1])) << k;
        EXPECT_TRUE(std::isnan(metrics(r)[1][1])) << k;
      }
    }
  }
  EXPECT_NE(warnings_.find("package-1 is not measured"), std::string::npos) << warnings_;
}

// energy_uj readable only by root: not measured (NaN, never 0), one hint naming how a site grants
// read access. Run as an unprivileged user in a child (root reads any file).
TEST_F(EnergyCollectorTest, UnreadableCountersGiveOneHint) {
  zone("intel-rapl:0", "package-0", 262143328850.0);
  zone("intel-rapl:0:0", "dram", 262143328850.0);
  stat({{0, 0}});
  for (const char* z : {"intel-rapl:0", "intel-rapl:0:0"})
    fs::permissions(zone_dir(z) / "energy_uj", fs::perms::owner_read | fs::perms::owner_write);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(10);
    auto c = make(false);
    if (!c->setup().ok()) _exit(11);
    for (int k = 0; k < 2; ++k) {
      TickContext ctx = tick(k == 0 ? 0 : 1.0, 4242, {}, 0);
      c->snapshot(ctx);
      for (Level l : {Level::system, Level::process}) {
        const auto r = c->collect(l, ctx);
        if (!r.ok()) _exit(12);
        for (const auto& m : metrics(r))
          for (double v : m)
            if (!std::isnan(v)) code = 13;
      }
    }
    // One hint, at setup, naming the file and a way to grant access.
    if (warnings_.find("energy_uj is readable only by root") == std::string::npos ||
        warnings_.find("udev rule") == std::string::npos ||
        warnings_.find("(2 zones)") == std::string::npos)
      code = 14;
    if (std::count(warnings_.begin(), warnings_.end(), '\n') != 1) code = 15;
    if (code != 0) fprintf(stderr, "warnings: %s\n", warnings_.c_str());
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Through the engine with the default configuration: the energy columns, and the Prometheus
// exporter's sonde_energy_joules_total counter per domain.
TEST_F(EnergyCollectorTest, EngineColumnsAndPrometheusCounter) {
  zone("intel-rapl:0", "package-0", 262143328850.0);
  set_uj("intel-rapl:0", 1e6);
  ConfigSearch search;
  search.etc_file = "";
  search.cwd_file = "";
  search.xdg_config_home = "";
  auto cfg = load_config(search);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EngineOptions opts;
  opts.roots.sys = roots_.sys;  // /proc stays the real one
  opts.levels = {Level::system};
  opts.warn = [this](const std::string& m) { warnings_ += m + "\n"; };
  Registry registry;
  register_builtin_collectors(registry);
  auto engine = Engine::create(*cfg, opts, registry);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  Engine& e = **engine;
  const auto& cols = e.columns(Level::system);
  EXPECT_NE(std::find(cols.begin(), cols.end(), "energy_power_0"), cols.end());
  EXPECT_NE(std::find(cols.begin(), cols.end(), "energy_joules_max"), cols.end());
  EXPECT_EQ(e.node_info().energy.domains, std::vector<std::string>{"package-0"});
  prom::Exporter exporter(e, {});
  exporter.update(e, e.tick(), 0, nullptr);
  set_uj("intel-rapl:0", 51e6);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  exporter.update(e, e.tick(), 0, nullptr);
  std::string out;
  prom::render(exporter.families(), prom::Format::prometheus, out);
  EXPECT_NE(out.find("# TYPE sonde_energy_joules_total counter\n"
                     "sonde_energy_joules_total{domain=\"package-0\"} 50\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("sonde_energy_power_watts{domain=\"package-0\"}"), std::string::npos) << out;
  EXPECT_EQ(out.find("energy_power_avg"), std::string::npos) << out;
  // The domain disappears: the counter keeps its value (a counter never goes back or vanishes).
  fs::remove_all(zone_dir("intel-rapl:0"));
  exporter.update(e, e.tick(), 0, nullptr);
  out.clear();
  prom::render(exporter.families(), prom::Format::prometheus, out);
  EXPECT_NE(out.find("sonde_energy_joules_total{domain=\"package-0\"} 50\n"), std::string::npos)
      << out;
}

class EnergyGpuTest : public EnergyCollectorTest {};

// NVML's energy counter (200 W) with the process level's share (60 of 80 % SM), and a GPU
// without a counter whose power (100 W) is integrated.
TEST_F(EnergyGpuTest, NvmlCountersAndShares) {
  setenv("SONDE_NVML_LIBRARY", SONDE_FAKE_NVML, 1);
  setenv("SONDE_FAKE_GPU_SCENARIO",
         (std::string(SONDE_FAKE_SCENARIOS) + "/nvidia_energy.json").c_str(), 1);
  stat({{0, 0}});
  auto c = make(true);
  ASSERT_TRUE(c->setup().ok());
  NodeInfo node;
  c->contribute_node_info(node);
  EXPECT_EQ(node.energy.domains, (std::vector<std::string>{"gpu-0", "gpu-1"}));
  const int self = static_cast<int>(getpid());
  TickContext ctx = tick(0, self, {}, 0);
  double t = now_s();
  c->snapshot(ctx);
  double total_dt = 0;
  for (int k = 1; k <= 2; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const double t1 = now_s();
    ctx = tick(t1 - t, self, {}, 0);
    total_dt += t1 - t;
    t = t1;
    c->snapshot(ctx);
    const auto sys = c->collect(Level::system, ctx);
    const auto proc = c->collect(Level::process, ctx);
    ASSERT_TRUE(sys.ok() && proc.ok());
    EXPECT_NEAR(metrics(sys)[0][0], 200, 4);
    EXPECT_NEAR(metrics(sys)[1][0], 200 * total_dt, 0.02 * 200 * total_dt);
    EXPECT_NEAR(metrics(sys)[0][1], 100, 1e-9);  // power integrated
    EXPECT_NEAR(metrics(sys)[1][1], 100 * total_dt, 1e-6);
    EXPECT_NEAR(metrics(proc)[0][0], 150, 3);
    EXPECT_NEAR(metrics(proc)[1][0], 150 * total_dt, 0.02 * 150 * total_dt);
    EXPECT_EQ(metrics(proc)[0][1], 0);  // none of its processes on GPU 1
  }
}

TEST_F(EnergyGpuTest, RocmCounter) {
  setenv("SONDE_ROCM_SMI_LIBRARY", SONDE_FAKE_ROCM, 1);
  setenv("SONDE_FAKE_GPU_SCENARIO",
         (std::string(SONDE_FAKE_SCENARIOS) + "/amd_energy.json").c_str(), 1);
  stat({{0, 0}});
  auto c = make(true);
  ASSERT_TRUE(c->setup().ok());
  TickContext ctx = tick(0, static_cast<int>(getpid()), {}, 0);
  const double t0 = now_s();
  c->snapshot(ctx);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const double t1 = now_s();
  ctx = tick(t1 - t0, static_cast<int>(getpid()), {}, 0);
  c->snapshot(ctx);
  const auto sys = c->collect(Level::system, ctx);
  ASSERT_TRUE(sys.ok());
  EXPECT_NEAR(metrics(sys)[0][0], 500, 10);
  EXPECT_NEAR(metrics(sys)[1][0], 500 * (t1 - t0), 0.02 * 500 * (t1 - t0));
}

}  // namespace
}  // namespace sonde
