// `sonde plugin-host FILE.so`: what `isolate: true` runs. Loads one native plugin in this child
// process and serves it over the JSON-lines protocol of docs/plugin-protocol.md on stdin/stdout,
// so that a crash or hang inside the plugin costs that collector only. The parent
// (ProcessCollector) enforces the deadline and restarts this process when it dies.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <iostream>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "core/trust.hpp"
#include "plugins/plugins.hpp"
#include "plugins/protocol.hpp"

namespace sonde::plugins {
namespace {

using json = nlohmann::json;

// One native collector and what it was built with (CollectorArgs points into this).
struct Hosted {
  Roots roots;
  TargetInfo target;
  NodeInfo node;
  CollectorArgs args;
  std::unique_ptr<Collector> collector;
  protocol::TickRequest tick;
};

json setup(const std::string& path, const json& msg, Hosted& h) {
  if (const char* p = program_env("SONDE_PROC_ROOT")) h.roots.proc = p;
  if (const char* s = program_env("SONDE_SYS_ROOT")) h.roots.sys = s;
  CollectorArgs& a = h.args;
  a.name = msg.value("name", std::string("plugin"));
  a.roots = &h.roots;
  a.target = &h.target;
  const Origin origin{fmt::format("<setup request of '{}'>", a.name), 0, 0};
  if (auto kw = msg.find("kwargs"); kw != msg.end() && kw->is_object())
    for (const auto& [key, value] : kw->items())
      a.raw_kwargs[key] = KwArg{protocol::json_to_yaml(value), origin};
  if (auto inj = msg.find("inject"); inj != msg.end() && inj->is_object()) {
    for (const auto& [key, value] : inj->items()) {
      a.inject.push_back(key);
      if (key == "node_info") {
        h.node = protocol::node_info_from_json(value);
        a.node = &h.node;
      } else if ((key == "pid" || key == "process") && value.is_number_integer()) {
        h.target.pid = value.get<int>();
      } else if (key == "uid" && value.is_number_unsigned()) {
        h.target.uid = value.get<std::uint32_t>();
      } else if (key == "slurm_job" && value.is_string()) {
        h.target.slurm_job = value.get<std::string>();
      }
    }
  }
  a.interval_s = msg.value("interval", 0.5);
  a.deadline_s = msg.value("deadline", a.interval_s / 2);
  if (auto hd = msg.find("handler"); hd != msg.end() && hd->is_object()) {
    a.handler_accepts = hd->value("accepts", std::string());
    a.handler_metrics = hd->value("metrics", std::vector<std::string>());
  }
  a.warn = [name = a.name](const std::string& m) {
    std::cerr << fmt::format("sonde: warning: collector '{}': {}\n", name, m);
  };
  auto levels = protocol::parse_levels(msg);
  if (!levels) return {{"ok", false}, {"error", levels.error().message}};

  auto made = make_native_collector(path, a);
  if (!made) return {{"ok", false}, {"error", made.error().message}};
  h.collector = std::move(*made);
  if (auto ok = h.collector->setup(); !ok) {
    h.collector.reset();
    return {{"ok", false}, {"error", ok.error().message}};
  }
  json devices = json::object();
  for (Level l : *levels)
    if (h.collector->supports(l)) devices[std::string(level_name(l))] = h.collector->devices(l);
  // The pid context is what a native collector reads through the host API: always ask for it.
  return {
      {"ok", true}, {"devices", devices}, {"context", true}, {"priority", h.collector->priority()}};
}

json tick(const json& msg, Hosted& h) {
  const std::uint64_t n = msg.value("tick", std::uint64_t{0});
  if (!h.collector)
    return {{"ok", false}, {"tick", n}, {"error", "tick before a successful setup"}};
  if (auto ok = protocol::parse_tick_request(msg, h.tick); !ok)
    return {{"ok", false}, {"tick", n}, {"error", ok.error().message}};
  TickContext& ctx = h.tick.ctx;
  ctx.node = &h.node;
  ctx.target = &h.target;
  ctx.roots = &h.roots;
  h.collector->snapshot(ctx);
  json values = json::object();
  for (Level l : h.tick.levels) {
    auto r = h.collector->collect(l, ctx);
    values[std::string(level_name(l))] =
        r ? protocol::raw_to_json(r.value()) : json{{"error", r.error().message}};
  }
  return {{"ok", true}, {"tick", n}, {"values", std::move(values)}};
}

}  // namespace

int run_plugin_host(const std::string& path) {
  // The protocol owns the real stdout; whatever the plugin prints goes to stderr, which the
  // parent passes on with the collector's name.
  const int out = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (out < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    std::cerr << "sonde plugin-host: cannot set up stdout\n";
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);  // a parent that went away is seen as EPIPE

  Hosted h;
  protocol::LineBuffer in;
  char chunk[65536];
  for (;;) {
    auto line = in.next();
    if (!line) {
      if (in.overflow()) {
        std::cerr << "sonde plugin-host: request line too long\n";
        break;
      }
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the parent closed our stdin
      in.feed(std::string_view(chunk, static_cast<std::size_t>(n)));
      continue;
    }
    json reply;
    const json msg = json::parse(*line, nullptr, false);
    if (msg.is_discarded() || !msg.is_object()) {
      reply = {{"ok", false}, {"error", "malformed request (expected a JSON object on one line)"}};
    } else {
      try {
        const std::string op = msg.value("op", std::string());
        if (op == "shutdown") break;
        if (op == "setup")
          reply = setup(path, msg, h);
        else if (op == "tick")
          reply = tick(msg, h);
        else
          reply = {{"ok", false}, {"error", fmt::format("unknown op '{}'", op)}};
      } catch (const std::exception& e) {
        reply = {{"ok", false}, {"error", e.what()}};
        if (auto t = msg.find("tick"); t != msg.end() && t->is_number_unsigned())
          reply["tick"] = *t;
      }
    }
    if (!write_all(out, json_text(reply) + "\n")) break;
  }
  if (h.collector) h.collector->teardown();
  return 0;
}

}  // namespace sonde::plugins
