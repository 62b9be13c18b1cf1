// `sonde agent`: one per node of a multi-node run, started by the head through srun
// (docs/multinode.md). Records the job's processes on this node (the slurm level: the job's
// cgroup where there is one, else SLURM_JOB_ID; never the agent itself) and the node, and prints
// the JSON lines of src/sinks/multinode_agent.hpp on stdout.
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <cerrno>
#include <charconv>
#include <iostream>
#include <string_view>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/engine.hpp"
#include "core/sampler.hpp"
#include "core/slurm_job.hpp"
#include "core/threads.hpp"
#include "sinks/json_stream.hpp"
#include "sinks/multinode_agent.hpp"
#include "sinks/sink.hpp"

namespace sonde::cli {

int cmd_agent(const CommonOptions& common, const AgentOptions& agent) {
  auto fail = [&](const std::string& msg, int status) {
    print_error("agent: " + msg);
    JsonStreamSink::error(STDOUT_FILENO, msg);
    return status;
  };
  if (!is_plain_job_id(agent.job))
    return fail(fmt::format("--job: '{}' is not a Slurm job id (digits expected)", agent.job),
                kExitUsage);
  auto cfg = load(common);
  if (!cfg) return fail("invalid configuration", kExitUsage);
  std::vector<Level> levels = {Level::slurm, Level::system};
  if (!common.levels.empty()) {
    auto parsed = parse_levels(common.levels);
    if (!parsed) return fail(parsed.error().message, kExitUsage);
    for (Level l : *parsed)
      if (l != Level::slurm && l != Level::system)
        return fail(
            fmt::format("--levels: an agent records slurm and system, not {}", level_name(l)),
            kExitUsage);
    levels = *parsed;
  }

  // The target is the job: no process of its own; the agent and its helper children are never
  // counted in it.
  TargetInfo target;
  target.pid = 0;
  target.uid = ::getuid();
  target.slurm_job = agent.job;
  target.exclude_pid = ::getpid();
  if (const auto colon = agent.head.rfind(':'); colon != std::string::npos) {
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    int pid = 0;
    const std::string_view pid_text = std::string_view(agent.head).substr(colon + 1);
    if (std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid).ec ==
            std::errc() &&
        agent.head.substr(0, colon) == host)
      target.exclude_single_pid = pid;
  }
  EngineOptions eo;
  eo.roots = roots_from_env();
  eo.target = target;
  eo.levels = levels;
  // Before the engine starts any thread (core/threads.hpp has the rule for the threads).
  SignalGuard signals(/*with_sigchld=*/false);
  const Registry registry = make_registry();
  auto engine_r = Engine::create(*cfg, eo, registry);
  if (!engine_r) return fail(engine_r.error().message, error_exit_status(engine_r.error()));
  Engine& engine = **engine_r;

  AgentIdentity id;
  id.node = !agent.node_name.empty() ? agent.node_name : engine.node_info().hostname;
  id.job = agent.job;
  auto sink = make_agent_sink(STDOUT_FILENO, engine, id);
  AgentSink& agent_sink = *sink;
  SinkSet sinks;
  sinks.add(std::move(sink));

  SamplerOptions sampling;
  sampling.on_signal = SamplerOptions::OnSignal::stop;
  sampling.hangup_fd = STDOUT_FILENO;
  sampling.duration_s = agent.duration_s;
  Sampler sampler(engine, sampling, &signals);
  if (!sinks.begin(RunStart{})) return kExitOk;  // the head is gone
  // The head ends its agents by closing their stdin (srun --input=all passes the end on).
  std::atomic<bool> done{false};
  std::thread stdin_watch;
  if (agent.end_on_stdin_eof)
    stdin_watch = start_thread([&] {
      char buf[256];
      while (!done.load()) {
        pollfd p{STDIN_FILENO, POLLIN, 0};
        if (::poll(&p, 1, 200) <= 0) continue;
        const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
          sampler.request_stop();
          return;
        }
      }
    });
  const Sampler::Stop why = sampler.run(sinks);
  done = true;
  if (stdin_watch.joinable()) stdin_watch.join();
  agent_sink.set_end_reason(why == Sampler::Stop::signal     ? "signal"
                            : why == Sampler::Stop::duration ? "duration"
                            : why == Sampler::Stop::listener ? "stdout closed"
                            : why == Sampler::Stop::requested
                                ? "stdin closed (the head ended the run)"
                                : "stopped");
  RunEnd end;
  end.ticks = engine.ticks();
  end.ticks_missed = sampler.missed();
  sinks.end(end);
  return kExitOk;
}

}  // namespace sonde::cli
