// Process plugins: JSON ↔ raw value conversion, the protocol's messages and framing
// (src/plugins/protocol.cpp), and ProcessCollector (src/plugins/process_collector.cpp) driven
// against scripted child processes: round trips, late replies dropped by tick number, restarts
// and their backoff after a death, no zombie left behind, stderr passed on with the collector's
// name, the Python bridge.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "core/engine.hpp"
#include "plugins/plugins.hpp"
#include "plugins/process_collector.hpp"
#include "plugins/protocol.hpp"
#include "support/built_paths.hpp"

namespace sonde::plugins {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using protocol::raw_from_json;

const fs::path kTestsDir = fs::path(SONDE_SOURCE_DIR) / "tests";
const fs::path kPlugins = kTestsDir / "plugins";
const fs::path kSourceRoot = kTestsDir.parent_path();

void sleep_s(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

std::string error_of(const Result<RawValue>& r) {
  return r ? std::string() : r.error().message;
}

// ---- JSON → raw value, by the handler's kind ----

TEST(ProcessProtocol, ScalarFromANumber) {
  auto r = raw_from_json(json(2.5), "scalar");
  ASSERT_TRUE(r) << error_of(r);
  ASSERT_TRUE(std::holds_alternative<Scalar>(*r));
  EXPECT_EQ(std::get<Scalar>(*r).value, 2.5);
  auto big = raw_from_json(json(std::uint64_t{1} << 60), "scalar");
  ASSERT_TRUE(big);
  EXPECT_EQ(std::get<Scalar>(*big).value, std::ldexp(1.0, 60));
}

TEST(ProcessProtocol, ScalarRejectsOtherShapes) {
  for (const json& bad :
       {json("12"), json::array({1}), json(true), json::object(), json(nullptr)}) {
    auto r = raw_from_json(bad, "scalar");
    EXPECT_FALSE(r) << bad.dump();
  }
  EXPECT_NE(error_of(raw_from_json(json("12"), "scalar")).find("expected a number, got a string"),
            std::string::npos);
  EXPECT_NE(error_of(raw_from_json(json(nullptr), "scalar")).find("null"), std::string::npos);
}

TEST(ProcessProtocol, PerDeviceVectorTakesNullAsNotMeasured) {
  auto r = raw_from_json(json::parse("[1, null, 3.5]"), "per-device vector");
  ASSERT_TRUE(r) << error_of(r);
  const auto& pd = std::get<PerDevice>(*r);
  ASSERT_EQ(pd.values.size(), 3u);
  EXPECT_EQ(pd.values[0], 1);
  EXPECT_TRUE(std::isnan(pd.values[1]));
  EXPECT_EQ(pd.values[2], 3.5);
  EXPECT_FALSE(pd.mean.has_value());
}

TEST(ProcessProtocol, PerDeviceVectorWithItsOwnMean) {
  auto r = raw_from_json(json::parse(R"({"values": [10, 20], "mean": 12})"), "per-device vector");
  ASSERT_TRUE(r) << error_of(r);
  const auto& pd = std::get<PerDevice>(*r);
  EXPECT_EQ(pd.values, (std::vector<double>{10, 20}));
  ASSERT_TRUE(pd.mean.has_value());
  EXPECT_EQ(*pd.mean, 12);
  EXPECT_FALSE(raw_from_json(json::parse(R"({"mean": 1})"), "per-device vector"));
}

TEST(ProcessProtocol, PerDeviceVectorRejectsStringsAndNesting) {
  auto r = raw_from_json(json::parse(R"([1, "two"])"), "per-device vector");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("entry 1"), std::string::npos) << r.error().message;
  EXPECT_FALSE(raw_from_json(json::parse("[[1]]"), "per-device vector"));
  EXPECT_FALSE(raw_from_json(json(3), "per-device vector"));
}

TEST(ProcessProtocol, CountersMustAllBeNumbers) {
  auto r = raw_from_json(json::parse("[1200, 3, 18446744073709551615]"), "counters");
  ASSERT_TRUE(r) << error_of(r);
  EXPECT_EQ(std::get<Counters>(*r).values.size(), 3u);
  auto with_null = raw_from_json(json::parse("[1, null]"), "counters");
  ASSERT_FALSE(with_null);
  EXPECT_NE(with_null.error().message.find("counters entry 1"), std::string::npos)
      << with_null.error().message;
}

TEST(ProcessProtocol, PerDeviceVectorsOnePerMetric) {
  auto r = raw_from_json(json::parse("[[1, 2], [3, null]]"), "per-device vectors");
  ASSERT_TRUE(r) << error_of(r);
  const auto& m = std::get<MultiPerDevice>(*r);
  ASSERT_EQ(m.metrics.size(), 2u);
  EXPECT_EQ(m.metrics[0], (std::vector<double>{1, 2}));
  EXPECT_TRUE(std::isnan(m.metrics[1][1]));
  auto flat = raw_from_json(json::parse("[1, 2]"), "per-device vectors");
  ASSERT_FALSE(flat);
  EXPECT_NE(flat.error().message.find("metric 0"), std::string::npos) << flat.error().message;
}

TEST(ProcessProtocol, NoneAcceptsAnything) {
  for (const json& v : {json(nullptr), json(1), json("x")}) {
    auto r = raw_from_json(v, "none");
    ASSERT_TRUE(r);
    EXPECT_TRUE(std::holds_alternative<NoValue>(*r));
  }
}

TEST(ProcessProtocol, RawValuesRoundTripThroughJson) {
  const std::vector<std::pair<RawValue, std::string>> cases = {
      {Scalar{4.25}, "scalar"},
      {PerDevice{{1, 2, 3}, std::nullopt}, "per-device vector"},
      {PerDevice{{1, 3}, 1.5}, "per-device vector"},
      {MultiPerDevice{{{1, 2}, {3, 4}}}, "per-device vectors"},
      {Counters{{10, 20, 30, 40}}, "counters"},
  };
  for (const auto& [raw, kind] : cases) {
    const json j = protocol::raw_to_json(raw);
    auto back = raw_from_json(json::parse(j.dump()), kind);
    ASSERT_TRUE(back) << kind << ": " << error_of(back);
    EXPECT_EQ(back->index(), raw.index()) << kind;
    EXPECT_EQ(j.dump(), protocol::raw_to_json(*back).dump()) << kind;
  }
  // NaN has no JSON form: it travels as null, which a per-device vector reads as NaN again.
  const json nan_entry = protocol::raw_to_json(PerDevice{{1, std::nan("")}, std::nullopt});
  EXPECT_EQ(nan_entry.dump(), "[1.0,null]");
  EXPECT_TRUE(protocol::raw_to_json(Scalar{std::nan("")}).is_null());
}

// ---- kwargs, injected values ----

TEST(ProcessProtocol, YamlKwargsBecomeTypedJson) {
  const YAML::Node n = YAML::Load(
      "{a: 3, b: 2.5, c: true, d: hello, e: '42', f: [1, x], g: {h: null}, i: ~, j: nan}");
  const json j = protocol::yaml_to_json(n);
  EXPECT_EQ(j.at("a"), 3);
  EXPECT_EQ(j.at("b"), 2.5);
  EXPECT_EQ(j.at("c"), true);
  EXPECT_EQ(j.at("d"), "hello");
  EXPECT_EQ(j.at("e"), "42") << "a quoted scalar stays a string";
  EXPECT_EQ(j.at("f"), json::parse(R"([1, "x"])"));
  EXPECT_TRUE(j.at("g").at("h").is_null());
  EXPECT_TRUE(j.at("i").is_null());
  EXPECT_EQ(j.at("j"), "nan") << "a non-finite number is kept as the text it was";
}

TEST(ProcessProtocol, JsonKwargsBackToYamlKeepTheirTypes) {
  const json j = json::parse(R"({"n": 3, "s": "42", "b": false, "l": ["a", "b"]})");
  for (const auto& [k, v] : j.items()) {
    const YAML::Node y = protocol::json_to_yaml(v);
    EXPECT_EQ(protocol::yaml_to_json(y), v) << k;
  }
  double d = 0;
  EXPECT_TRUE(YAML::convert<double>::decode(protocol::json_to_yaml(json(3)), d));
  EXPECT_EQ(d, 3);
}

TEST(ProcessProtocol, NodeInfoRoundTrip) {
  NodeInfo n;
  n.hostname = "node7";
  n.num_system_cpus = 8;
  n.cpu_handles = {0, 1, 2};
  n.num_cpus = 2.5;
  n.cpu_quota = 2.5;
  n.mem_total_bytes = 1ull << 34;
  n.memory_limit_bytes[level_index(Level::process)] = 1ull << 30;
  n.num_gpus = 2;
  n.gpu_name = "Fake GPU";
  const NodeInfo back =
      protocol::node_info_from_json(json::parse(protocol::node_info_to_json(n).dump()));
  EXPECT_EQ(back.hostname, "node7");
  EXPECT_EQ(back.num_system_cpus, 8);
  EXPECT_EQ(back.cpu_handles, n.cpu_handles);
  EXPECT_EQ(back.num_cpus, 2.5);
  ASSERT_TRUE(back.cpu_quota.has_value());
  EXPECT_EQ(back.mem_total_bytes, n.mem_total_bytes);
  EXPECT_EQ(back.memory_limit_bytes, n.memory_limit_bytes);
  EXPECT_EQ(back.num_gpus, 2);
  EXPECT_EQ(back.gpu_name, "Fake GPU");
}

// ---- messages ----

CollectorArgs args_for(const std::string& name, const TargetInfo* target) {
  CollectorArgs a;
  a.name = name;
  a.target = target;
  a.handler_accepts = "scalar";
  a.interval_s = 0.5;
  a.deadline_s = 0.25;
  return a;
}

TEST(ProcessProtocol, SetupRequestCarriesKwargsAndOnlyTheInjectedKeys) {
  TargetInfo t;
  t.pid = 4242;
  t.uid = 1000;
  t.slurm_job = "77";
  CollectorArgs a = args_for("lustre", &t);
  a.inject = {"pid", "slurm_job"};
  a.raw_kwargs["fs"] = KwArg{YAML::Load("/scratch"), {}};
  a.raw_kwargs["command"] = KwArg{YAML::Load("[x]"), {}};
  a.handler_accepts = "counters";
  const std::vector<Level> levels = {Level::process, Level::system};
  const std::vector<std::string> skip = {"command"};
  const std::string line = protocol::setup_request(a, levels, skip);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "one line";
  const json j = json::parse(line);
  EXPECT_EQ(j.at("op"), "setup");
  EXPECT_EQ(j.at("name"), "lustre");
  EXPECT_EQ(j.at("kwargs"), json::parse(R"({"fs": "/scratch"})"));
  EXPECT_EQ(j.at("inject"), json::parse(R"({"pid": 4242, "slurm_job": "77"})"));
  EXPECT_EQ(j.at("target").at("uid"), 1000);
  EXPECT_EQ(j.at("levels"), json::parse(R"(["process", "system"])"));
  EXPECT_EQ(j.at("handler").at("accepts"), "counters");
  EXPECT_EQ(j.at("deadline"), 0.25);
}

TEST(ProcessProtocol, TickRequestWithoutContextIsSmall) {
  ProcSnapshot snap;
  TickContext ctx;
  ctx.tick = 12;
  ctx.time_s = 5123.25;
  ctx.wallclock_s = 1733140000.5;
  ctx.dt_s = 0.5;
  ctx.procs = &snap;
  const std::vector<Level> levels = {Level::process, Level::system};
  const std::string line = protocol::tick_request(ctx, levels, false);
  ASSERT_EQ(line.back(), '\n');
  const json j = json::parse(line);
  EXPECT_EQ(j.at("op"), "tick");
  EXPECT_EQ(j.at("tick"), 12);
  EXPECT_EQ(j.at("time"), 5123.25);
  EXPECT_EQ(j.at("wallclock"), 1733140000.5);
  EXPECT_EQ(j.at("dt"), 0.5);
  EXPECT_EQ(j.at("levels"), json::parse(R"(["process", "system"])"));
  EXPECT_FALSE(j.contains("context"));
  EXPECT_LT(line.size(), 160u);
}

TEST(ProcessProtocol, TickContextSurvivesTheTrip) {
  ProcSnapshot snap;
  const std::string comm_a = "python3", comm_b = "worker \"x\"";
  PidSample a;
  a.pid = 100;
  a.ppid = 1;
  a.uid = 1000;
  a.set_comm(comm_a);
  a.cpu_s = 2.5;
  a.cpu_delta_s = 0.25;
  a.rss_bytes = 1 << 20;
  a.io_valid = true;
  a.io.read_bytes = 4096;
  a.level_mask = 0b11;
  PidSample b = a;
  b.pid = 101;
  b.ppid = 100;
  b.set_comm(comm_b);
  b.level_mask = 0b10;
  snap.pids = {a, b};
  snap.members[level_index(Level::process)] = {0};
  snap.members[level_index(Level::user)] = {0, 1};
  snap.total_pids = 321;
  TickContext ctx;
  ctx.tick = 3;
  ctx.procs = &snap;
  const std::vector<Level> levels = {Level::process, Level::user, Level::system};
  const json msg = json::parse(protocol::tick_request(ctx, levels, true));

  protocol::TickRequest req;
  auto ok = protocol::parse_tick_request(msg, req);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(req.ctx.tick, 3u);
  EXPECT_EQ(req.levels, levels);
  ASSERT_EQ(req.ctx.procs, &req.procs);
  EXPECT_EQ(req.procs.total_pids, 321u);
  ASSERT_EQ(req.procs.pids.size(), 2u);
  EXPECT_EQ(req.procs.pids[1].comm(), comm_b);
  EXPECT_EQ(req.procs.pids[0].cpu_delta_s, 0.25);
  EXPECT_EQ(req.procs.pids[0].io.read_bytes, 4096u);
  EXPECT_TRUE(req.procs.pids[0].in(Level::process));
  EXPECT_FALSE(req.procs.pids[1].in(Level::process));
  EXPECT_TRUE(req.procs.pids[1].in(Level::user));
  EXPECT_EQ(req.procs.members[level_index(Level::user)].size(), 2u);
  EXPECT_TRUE(req.procs.target_alive);
}

TEST(ProcessProtocol, SetupReplies) {
  auto ok = protocol::parse_setup_reply(
      R"({"ok":true,"devices":{"process":1,"system":4,"user":null},"context":true,"priority":3})");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->devices[level_index(Level::process)], 1u);
  EXPECT_EQ(ok->devices[level_index(Level::system)], 4u);
  EXPECT_FALSE(ok->devices[level_index(Level::user)].has_value());
  EXPECT_FALSE(ok->devices[level_index(Level::slurm)].has_value());
  EXPECT_TRUE(ok->context);
  EXPECT_EQ(ok->priority, 3);

  auto refused = protocol::parse_setup_reply(R"({"ok":false,"error":"no InfiniBand device"})");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::unavailable);
  EXPECT_EQ(refused.error().message, "no InfiniBand device");

  EXPECT_FALSE(protocol::parse_setup_reply(R"({"ok":true,"devices":{"node":1}})"));
  EXPECT_FALSE(protocol::parse_setup_reply(R"({"ok":true,"devices":{"system":-1}})"));
  EXPECT_FALSE(protocol::parse_setup_reply(R"({"ok":true})"));
  EXPECT_FALSE(protocol::parse_setup_reply("ready"));
}

TEST(ProcessProtocol, TickReplies) {
  auto r = protocol::parse_tick_reply(
      R"({"ok":true,"tick":9,"values":{"process":[1,2,3,4],"system":{"error":"sensor offline"}}})",
      "counters");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->tick, 9u);
  EXPECT_FALSE(r->error);
  ASSERT_TRUE(r->values[level_index(Level::process)].has_value());
  EXPECT_TRUE(*r->values[level_index(Level::process)]);
  ASSERT_TRUE(r->values[level_index(Level::system)].has_value());
  EXPECT_EQ(error_of(*r->values[level_index(Level::system)]), "sensor offline");
  EXPECT_FALSE(r->values[level_index(Level::user)].has_value());

  auto failed = protocol::parse_tick_reply(R"({"ok":false,"tick":10,"error":"busy"})", "scalar");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->tick, 10u);
  EXPECT_EQ(failed->error.value_or(""), "busy");

  auto wrong =
      protocol::parse_tick_reply(R"({"ok":true,"tick":11,"values":{"system":"x"}})", "scalar");
  ASSERT_TRUE(wrong);
  EXPECT_FALSE(*wrong->values[level_index(Level::system)]);

  EXPECT_FALSE(protocol::parse_tick_reply(R"({"ok":true,"values":{}})", "scalar"))
      << "a reply without its tick cannot be matched";
  EXPECT_FALSE(protocol::parse_tick_reply("NaN", "scalar"));
  EXPECT_FALSE(
      protocol::parse_tick_reply(R"({"ok":true,"tick":1,"values":{"system":NaN}})", "scalar"));
}

// ---- framing ----

TEST(ProcessProtocol, LineBufferSplitsAStream) {
  protocol::LineBuffer b;
  b.feed("{\"a\":1}\n{\"b\"");
  EXPECT_EQ(b.next().value_or("-"), "{\"a\":1}");
  EXPECT_FALSE(b.next().has_value());
  EXPECT_EQ(b.partial(), "{\"b\"");
  b.feed(":2}\r\n\n{\"c\":3}\n");
  EXPECT_EQ(b.next().value_or("-"), "{\"b\":2}");
  EXPECT_EQ(b.next().value_or("-"), "");
  EXPECT_EQ(b.next().value_or("-"), "{\"c\":3}");
  EXPECT_FALSE(b.next().has_value());
  EXPECT_TRUE(b.partial().empty());
  EXPECT_FALSE(b.overflow());
}

// ---- factories ----

CollectorArgs exec_args(const std::string& name, const TargetInfo* t,
                        const std::string& command_yaml, double deadline_s = 1.0) {
  CollectorArgs a = args_for(name, t);
  a.deadline_s = deadline_s;
  a.raw_kwargs["command"] = KwArg{YAML::Load(command_yaml), Origin{"/etc/sonde/x.yaml", 7, 5}};
  return a;
}

TEST(ProcessFactories, ExecNeedsACommandList) {
  TargetInfo t;
  const TargetFactory f = exec_factory();
  EXPECT_EQ(f.prefix, "exec");
  CollectorArgs none = args_for("sensors", &t);
  auto missing = f.make("exec", none);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, Errc::config);
  EXPECT_NE(missing.error().message.find("'command'"), std::string::npos);
  for (const char* bad : {"my-sensor --json", "[]", "[[a]]", "{a: b}", "['']"}) {
    auto r = f.make("exec", exec_args("sensors", &t, bad));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::config) << bad;
    EXPECT_NE(r.error().message.find("/etc/sonde/x.yaml:7:5"), std::string::npos)
        << r.error().message;
  }
}

TEST(ProcessFactories, PythonTargetMustBeModuleDotClass) {
  TargetInfo t;
  const TargetFactory f = python_factory();
  EXPECT_EQ(f.prefix, "python:");
  for (const char* bad :
       {"python:", "python:NoModule", "python:a..B", "python:1x.C", "python:a.b-c.D"}) {
    auto r = f.make(bad, args_for("x", &t));
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, Errc::config) << bad;
    EXPECT_NE(r.error().message.find("python:MODULE.CLASS"), std::string::npos)
        << r.error().message;
  }
}

// ---- ProcessCollector against scripted children ----

struct Tick {
  ProcSnapshot snap;
  TickContext ctx;
  explicit Tick(std::uint64_t n) {
    ctx.tick = n;
    ctx.time_s = monotonic_now();
    ctx.dt_s = n ? 0.5 : 0;
    ctx.procs = &snap;
  }
};

// One tick: snapshot, then collect at `level`.
Result<RawValue> tick(Collector& c, std::uint64_t n, Level level = Level::process) {
  Tick t(n);
  c.snapshot(t.ctx);
  return c.collect(level, t.ctx);
}

double value_of(const Result<RawValue>& r) {
  if (!r || !std::holds_alternative<Scalar>(*r)) return std::nan("");
  return std::get<Scalar>(*r).value;
}

std::string scripted(const std::string& args) {
  return "[" + (kPlugins / "scripted.sh").string() + (args.empty() ? "" : ", " + args) + "]";
}

std::unique_ptr<Collector> make_exec(const std::string& command_yaml, double deadline_s = 1.0,
                                     const std::string& name = "scripted") {
  static TargetInfo target{static_cast<int>(::getpid()), ::getuid(), std::nullopt};
  auto made = exec_factory().make("exec", exec_args(name, &target, command_yaml, deadline_s));
  EXPECT_TRUE(made) << (made ? "" : made.error().message);
  return made ? std::move(*made) : nullptr;
}

// Beside the test binary, not in /tmp: programs are started only from directories nobody else
// can write, sticky ones included (docs/security.md).
fs::path temp_dir() {
  std::string tmpl =
      (fs::read_symlink("/proc/self/exe").parent_path() / "sonde-process-host-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

pid_t read_pid(const fs::path& file) {
  for (int i = 0; i < 500 && !fs::exists(file); ++i) sleep_s(0.01);
  std::ifstream in(file);
  pid_t pid = -1;
  in >> pid;
  return pid;
}

// True when `pid` is neither running nor a zombie of ours.
bool gone(pid_t pid) {
  errno = 0;
  const bool not_a_child = ::waitpid(pid, nullptr, WNOHANG) < 0 && errno == ECHILD;
  return not_a_child && ::kill(pid, 0) != 0 && errno == ESRCH;
}

TEST(ProcessCollector, RoundTripPerTickWithDevicesFromSetup) {
  auto c = make_exec(scripted(""));
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(c->source(), "exec");
  EXPECT_NE(c->file().find("scripted.sh"), std::string::npos);
  EXPECT_EQ(c->priority(), 7);
  EXPECT_FALSE(c->needs_watchdog());
  EXPECT_TRUE(c->supports(Level::process));
  EXPECT_TRUE(c->supports(Level::system));
  EXPECT_FALSE(c->supports(Level::user));
  EXPECT_EQ(c->devices(Level::system), 1u);
  for (std::uint64_t n = 0; n < 5; ++n) {
    Tick t(n);
    c->snapshot(t.ctx);
    auto p = c->collect(Level::process, t.ctx);
    auto s = c->collect(Level::system, t.ctx);
    ASSERT_TRUE(p) << p.error().message;
    ASSERT_TRUE(s) << s.error().message;
    EXPECT_EQ(value_of(p), static_cast<double>(n));
    EXPECT_EQ(value_of(s), static_cast<double>(n));
  }
  c->teardown();
}

TEST(ProcessCollector, RefusedSetupMakesItUnavailableWithTheChildsMessage) {
  auto c = make_exec(scripted("--setup-error, 'no such sensor'"));
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::unavailable);
  EXPECT_EQ(ok.error().message, "no such sensor");
}

TEST(ProcessCollector, MissingProgramIsUnavailable) {
  auto c = make_exec("[/nonexistent/sonde-plugin]");
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::unavailable);
  EXPECT_NE(ok.error().message.find("/nonexistent/sonde-plugin"), std::string::npos)
      << ok.error().message;
}

TEST(ProcessCollector, ChildThatExitsBeforeSetupIsUnavailable) {
  auto c = make_exec("[/bin/sh, -c, 'exit 4']");
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().message.find("before answering setup"), std::string::npos)
      << ok.error().message;
}

TEST(ProcessCollector, LateReplyIsDroppedByItsTickNumber) {
  // Tick 0 is answered after 1.5 s, past the 0.5 s deadline; by tick 1 that late answer is in
  // the pipe and must not be taken for tick 1's.
  auto c = make_exec(scripted("--late, 0, 1.5"), 0.5);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  auto late = tick(*c, 0);
  ASSERT_FALSE(late);
  EXPECT_NE(late.error().message.find("deadline"), std::string::npos) << late.error().message;
  sleep_s(2.0);
  auto next = tick(*c, 1);
  ASSERT_TRUE(next) << next.error().message;
  EXPECT_EQ(value_of(next), 1.0);
  EXPECT_EQ(value_of(tick(*c, 2)), 2.0);
}

TEST(ProcessCollector, BusyChildGetsNoNewRequestUntilItAnswers) {
  auto c = make_exec(scripted("--late, 0, 1.2"), 0.3);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  EXPECT_FALSE(tick(*c, 0));
  auto busy = tick(*c, 1);  // still sleeping
  ASSERT_FALSE(busy);
  EXPECT_NE(busy.error().message.find("still busy with tick 0"), std::string::npos)
      << busy.error().message;
  // Once the late answer came, the next tick is served normally.
  Result<RawValue> r = make_error(Errc::failed, "not tried");
  for (std::uint64_t n = 2; n < 40 && !r; ++n) {
    sleep_s(0.1);
    r = tick(*c, n);
    if (r) {
      EXPECT_EQ(value_of(r), static_cast<double>(n));
    }
  }
  EXPECT_TRUE(r) << r.error().message;
}

TEST(ProcessCollector, GarbageLineFailsThatTickOnly) {
  auto c = make_exec(scripted("--garbage-at, 1"));
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  EXPECT_EQ(value_of(tick(*c, 0)), 0.0);
  auto bad = tick(*c, 1);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("malformed reply"), std::string::npos) << bad.error().message;
  EXPECT_EQ(value_of(tick(*c, 2)), 2.0);
}

TEST(ProcessCollector, DeadChildIsReapedAndRestartedWithBackoff) {
  const fs::path dir = temp_dir();
  auto c = make_exec(scripted("--exit-at, 1, --pidfile, " + (dir / "pid").string()));
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  const pid_t first = read_pid(dir / "pid");
  ASSERT_GT(first, 0);
  EXPECT_EQ(value_of(tick(*c, 0)), 0.0);
  auto died = tick(*c, 1);
  ASSERT_FALSE(died);
  EXPECT_NE(died.error().message.find("closed its stdout"), std::string::npos)
      << died.error().message;
  EXPECT_NE(died.error().message.find("restarting in 0.5 s"), std::string::npos)
      << died.error().message;
  EXPECT_EQ(died.error().code, Errc::failed) << "the crash is one failure";
  auto down = tick(*c, 2);  // at once: still within the backoff
  ASSERT_FALSE(down);
  EXPECT_NE(down.error().message.find("restarting in"), std::string::npos) << down.error().message;
  EXPECT_EQ(down.error().code, Errc::restarting) << "waiting for the restart is not a failure";

  // After the backoff a new child answers again (the tick number goes on; the new child exits
  // only when asked for tick 1, which never comes again).
  Result<RawValue> back = make_error(Errc::failed, "not tried");
  std::uint64_t n = 3;
  for (; n < 60 && !back; ++n) {
    sleep_s(0.1);
    back = tick(*c, n);
  }
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(value_of(back), static_cast<double>(n - 1));
  EXPECT_TRUE(gone(first)) << "the dead child was not reaped";
  c->teardown();
}

// Every child dies at its first tick: the delay doubles per crash within the window, the ticks in
// between are "restarting" (not failures), and the last crash the policy allows ends the restarts
// with a reason that every later tick carries.
TEST(ProcessCollector, RepeatedCrashesBackOffThenStopRestarting) {
  static TargetInfo target{static_cast<int>(::getpid()), ::getuid(), std::nullopt};
  SpawnSpec spec;
  spec.argv = {(kPlugins / "scripted.sh").string(), "--exit-after", "1"};
  spec.name = "crashy";
  const RestartPolicy policy{
      .first_backoff_s = 0.05, .max_backoff_s = 0.1, .window_s = 60, .max_crashes = 4};
  std::vector<std::string> warnings;
  CollectorArgs args = exec_args("crashy", &target, scripted("--exit-after, 1"), 1.0);
  args.warn = [&](const std::string& m) { warnings.push_back(m); };
  auto c = make_child_collector(spec, "exec", "scripted.sh", args, {"command"}, policy);
  ASSERT_TRUE(c->setup());
  std::vector<double> crashes;
  std::size_t restarting = 0;
  Result<RawValue> r = make_error(Errc::failed, "not tried");
  for (std::uint64_t n = 0; n < 400 && crashes.size() < 4; ++n) {
    r = tick(*c, n);
    ASSERT_FALSE(r) << "tick " << n << " has a value from a child that exits at its first tick";
    if (r.error().code == Errc::restarting)
      ++restarting;
    else
      crashes.push_back(monotonic_now());
    sleep_s(0.005);
  }
  ASSERT_EQ(crashes.size(), 4u) << r.error().message;
  EXPECT_GT(restarting, 0u);
  // 0.05 s, then 0.1 s twice (the cap) between the crashes.
  EXPECT_GE(crashes[1] - crashes[0], 0.05);
  EXPECT_GE(crashes[2] - crashes[1], 0.1);
  EXPECT_GE(crashes[3] - crashes[2], 0.1);
  const std::string why = r.error().message;
  EXPECT_NE(why.find("not restarted after 4 crashes within 60 s; last: it closed its stdout"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("exited with status 3"), std::string::npos) << why;
  // From now on every tick fails with that reason (the engine disables the collector).
  sleep_s(0.2);
  auto later = tick(*c, 1000);
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().code, Errc::failed);
  EXPECT_EQ(later.error().message, why);
  // One warning per crash and per restart (each child comes up, then dies at its tick), and the
  // last one says the restarts ended.
  ASSERT_EQ(warnings.size(), 7u);
  EXPECT_NE(warnings[0].find("collector 'crashy': it closed its stdout"), std::string::npos)
      << warnings[0];
  EXPECT_NE(warnings[0].find("crash 1 of at most 4 within 60 s"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("collector 'crashy': restarted (restart 1 of this run)"),
            std::string::npos)
      << warnings[1];
  EXPECT_NE(warnings[6].find("not restarted after 4 crashes"), std::string::npos) << warnings[6];
  c->teardown();
}

TEST(ProcessCollector, ARestartThatCannotStartEndsTheRestarts) {
  const fs::path dir = temp_dir();
  const fs::path copy = dir / "plugin.sh";
  fs::copy_file(kPlugins / "scripted.sh", copy);
  fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  auto c =
      make_exec("[" + copy.string() + ", --exit-at, 1, --remove-on-exit, " + copy.string() + "]");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup()) << "trust rules refused the copy in " << dir;
  EXPECT_EQ(value_of(tick(*c, 0)), 0.0);
  EXPECT_FALSE(tick(*c, 1));  // the crash; the file is gone now
  Result<RawValue> r = make_error(Errc::restarting, "not tried");
  for (std::uint64_t n = 2; n < 100 && !r && r.error().code == Errc::restarting; ++n) {
    sleep_s(0.05);
    r = tick(*c, n);
  }
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::failed);
  EXPECT_NE(r.error().message.find("not restarted: cannot run '" + copy.string()),
            std::string::npos)
      << r.error().message;
  c->teardown();
  fs::remove_all(dir);
}

TEST(ProcessCollector, TeardownLeavesNoProcessBehind) {
  const fs::path dir = temp_dir();
  auto c = make_exec(scripted("--pidfile, " + (dir / "pid").string()));
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  const pid_t pid = read_pid(dir / "pid");
  EXPECT_EQ(value_of(tick(*c, 0)), 0.0);
  c->teardown();
  EXPECT_TRUE(gone(pid));
}

TEST(ProcessCollector, HungChildIsKilledWhenTheCollectorGoes) {
  const fs::path dir = temp_dir();
  auto c = make_exec(scripted("--hang-at, 1, --pidfile, " + (dir / "pid").string()), 0.2);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  const pid_t pid = read_pid(dir / "pid");
  EXPECT_TRUE(tick(*c, 0));
  EXPECT_FALSE(tick(*c, 1));
  EXPECT_FALSE(tick(*c, 2));
  c.reset();  // destroyed without teardown, as the engine does with a disabled collector
  EXPECT_TRUE(gone(pid));
}

// Captures what is written to fd 2 while it lives.
class StderrCapture {
 public:
  StderrCapture() : path_(temp_dir() / "stderr") {
    saved_ = ::dup(STDERR_FILENO);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  fs::path path_;
  int saved_ = -1;
};

TEST(ProcessCollector, StderrIsPassedOnWithTheCollectorsName) {
  std::string text;
  {
    StderrCapture capture;
    auto c = make_exec(scripted("--stderr"), 1.0, "sensors");
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->setup());
    EXPECT_TRUE(tick(*c, 0));
    EXPECT_TRUE(tick(*c, 1));
    c->teardown();
    text = capture.text();
  }
  EXPECT_NE(text.find("[sensors] hello from tick 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[sensors] hello from tick 1\n"), std::string::npos) << text;
}

// ---- the Python bridge ----

class PythonBridge : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
    ::setenv("SONDE_PYTHON_DIR", (kSourceRoot / "python").c_str(), 1);
    ::setenv("PYTHONPATH", kPlugins.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("SONDE_PYTHON_DIR");
    ::unsetenv("PYTHONPATH");
  }
  std::unique_ptr<Collector> make(const std::string& cls, const std::string& kwargs_yaml = "{}",
                                  std::vector<std::string> inject = {},
                                  const std::string& accepts = "scalar") {
    CollectorArgs a = args_for("py", &target_);
    a.handler_accepts = accepts;
    a.deadline_s = 2.0;
    a.inject = std::move(inject);
    a.node = &node_;
    for (const auto& kv : YAML::Load(kwargs_yaml))
      a.raw_kwargs[kv.first.Scalar()] = KwArg{kv.second, {}};
    auto made = python_factory().make("python:sonde_test_plugins." + cls, a);
    EXPECT_TRUE(made) << (made ? "" : made.error().message);
    return made ? std::move(*made) : nullptr;
  }
  TargetInfo target_{static_cast<int>(::getpid()), ::getuid(), std::nullopt};
  NodeInfo node_ = [] {
    NodeInfo n;
    n.num_cpus = 4;
    return n;
  }();
};

TEST_F(PythonBridge, ConstantAtEveryLevel) {
  auto c = make("Constant");
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(c->source(), "python");
  EXPECT_EQ(c->file(), "sonde_test_plugins.Constant");
  for (Level l : {Level::process, Level::user, Level::system}) EXPECT_TRUE(c->supports(l));
  for (std::uint64_t n = 0; n < 3; ++n) {
    Tick t(n);
    c->snapshot(t.ctx);
    for (Level l : {Level::process, Level::user, Level::system}) {
      auto r = c->collect(l, t.ctx);
      ASSERT_TRUE(r) << r.error().message;
      EXPECT_EQ(value_of(r), 42.0);
    }
  }
}

TEST_F(PythonBridge, KwargsAndInjectedValuesReachTheConstructor) {
  auto c = make("NeedsArgs", "{scale: 2, offset: 1}", {"node_info"});
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(value_of(tick(*c, 0, Level::system)), 2 * 4 + 1);
}

TEST_F(PythonBridge, UnknownKwargIsNamedInTheSetupError) {
  auto c = make("Constant", "{value: 1, colour: red}");
  ASSERT_TRUE(c);
  auto ok = c->setup();
  ASSERT_FALSE(ok);
  EXPECT_EQ(ok.error().code, Errc::unavailable);
  EXPECT_NE(ok.error().message.find("'colour'"), std::string::npos) << ok.error().message;
}

TEST_F(PythonBridge, ImportErrorsAndFailingSetupAreUnavailable) {
  auto missing = make("NoSuchClass");
  ASSERT_TRUE(missing);
  auto r1 = missing->setup();
  ASSERT_FALSE(r1);
  EXPECT_NE(r1.error().message.find("no attribute 'NoSuchClass'"), std::string::npos)
      << r1.error().message;

  auto fails = make("FailsSetup");
  ASSERT_TRUE(fails);
  auto r2 = fails->setup();
  ASSERT_FALSE(r2);
  EXPECT_EQ(r2.error().message, "setup(): RuntimeError: no such device");
}

TEST_F(PythonBridge, ExceptionFailsTheTickAndTheRunnerSurvives) {
  auto c = make("Raises");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  EXPECT_EQ(value_of(tick(*c, 0)), 5.0);
  auto raised = tick(*c, 1);
  ASSERT_FALSE(raised);
  EXPECT_EQ(raised.error().message, "RuntimeError: odd tick 1");
  EXPECT_EQ(value_of(tick(*c, 2)), 5.0);
}

TEST_F(PythonBridge, NaNAndWrongTypesFailTheTick) {
  auto nan = make("ReturnsNaN");
  ASSERT_TRUE(nan);
  ASSERT_TRUE(nan->setup());
  auto r1 = tick(*nan, 0);
  ASSERT_FALSE(r1);
  EXPECT_NE(r1.error().message.find("finite"), std::string::npos) << r1.error().message;

  auto str = make("WrongType");
  ASSERT_TRUE(str);
  ASSERT_TRUE(str->setup());
  auto r2 = tick(*str, 0);
  ASSERT_FALSE(r2);
  EXPECT_NE(r2.error().message.find("returned str"), std::string::npos) << r2.error().message;

  // Three counters arrive as counters; the handler then finds them one short (not here).
  auto short_list = make("WrongLength", "{}", {}, "counters");
  ASSERT_TRUE(short_list);
  ASSERT_TRUE(short_list->setup());
  auto r3 = tick(*short_list, 0);
  ASSERT_TRUE(r3) << r3.error().message;
  EXPECT_EQ(std::get<Counters>(*r3).values.size(), 3u);
}

TEST_F(PythonBridge, PrintsDoNotBreakTheProtocol) {
  std::string text;
  {
    StderrCapture capture;
    auto c = make("Prints");
    ASSERT_TRUE(c);
    ASSERT_TRUE(c->setup());
    EXPECT_EQ(value_of(tick(*c, 0)), 1.0);
    EXPECT_EQ(value_of(tick(*c, 1)), 1.0);
    c->teardown();
    text = capture.text();
  }
  EXPECT_NE(text.find("[py] hello from print at tick 0"), std::string::npos) << text;
}

TEST_F(PythonBridge, ContextCarriesThePidsOfEachLevel) {
  auto c = make("ProcessCount");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  EXPECT_TRUE(c->needs().io) << "a collector that reads the context needs the io counters";
  Tick t(0);
  const std::string comm = "x";
  for (int pid : {10, 11, 12}) {
    PidSample s;
    s.pid = pid;
    s.set_comm(comm);
    t.snap.pids.push_back(s);
  }
  t.snap.members[level_index(Level::process)] = {0};
  t.snap.members[level_index(Level::user)] = {0, 1, 2};
  t.snap.total_pids = 250;
  c->snapshot(t.ctx);
  EXPECT_EQ(value_of(c->collect(Level::process, t.ctx)), 1.0);
  EXPECT_EQ(value_of(c->collect(Level::user, t.ctx)), 3.0);
  EXPECT_EQ(value_of(c->collect(Level::system, t.ctx)), 250.0);
}

TEST_F(PythonBridge, OnlyTheLevelsTheEngineAsksForAreRequested) {
  // TickCounter declares the system level only; asking for process gets no value.
  auto c = make("TickCounter");
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->setup());
  EXPECT_FALSE(c->supports(Level::process));
  EXPECT_TRUE(c->supports(Level::system));
  for (std::uint64_t n = 0; n < 3; ++n) {
    auto r = tick(*c, n, Level::system);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(value_of(r), static_cast<double>(n));
  }
}

}  // namespace
}  // namespace sonde::plugins
