// `sonde record --slurm-job ID` (docs/multinode.md): the head of a multi-node recording of a
// running job, with no program of its own; `sonde run --slurm` is in session.cpp.
#include <sys/signalfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/multinode_launcher.hpp"
#include "cli/slurm_queries.hpp"
#include "core/clock.hpp"
#include "core/json_text.hpp"
#include "core/sampler.hpp"
#include "sinks/csv_run_dir.hpp"
#include "sinks/multinode_csv.hpp"
#include "sinks/multinode_sqlite.hpp"
#include "sinks/sqlite.hpp"

namespace sonde::cli {

// ---- record --slurm-job ------------------------------------------------------------------------

int run_multinode_record(const CommonOptions& common, const SessionOptions& so) {
  auto cfg = load(common);
  if (!cfg) return kExitUsage;
  auto split = split_levels(common.levels, true);
  if (auto* s = std::get_if<int>(&split)) return *s;
  const std::vector<Level> levels = std::get<LevelSplit>(split).agents;
  const bool to_sqlite =
      common.format == "sqlite" || (common.format.empty() && is_sqlite_path(common.out));
  auto alloc_r = allocation_of_job(so.slurm_job);
  if (auto* s = std::get_if<int>(&alloc_r)) return *s;
  const SlurmAllocation alloc = std::get<SlurmAllocation>(alloc_r);
  auto launcher_r = find_launcher("record --slurm-job");
  if (auto* s = std::get_if<int>(&launcher_r)) return *s;
  const std::vector<std::string> argv = launcher_argv(std::get<std::string>(launcher_r), alloc,
                                                      cfg->interval_s, levels, common.config_file);

  const std::string dir = !common.out.empty() ? common.out
                          : to_sqlite
                              ? default_sqlite_path(cfg->out_dir)
                              : RunDirSink::default_dir(cfg->out_dir, {"slurm-job-" + alloc.job});
  utsname u{};
  ::uname(&u);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json manifest = {{"command", nlohmann::json::array()},
                             {"mode", "record"},
                             {"start_wallclock", wallclock_now()},
                             {"config_sources", cfg->sources},
                             {"target_pid", nullptr},
                             {"sonde_version", SONDE_VERSION},
                             {"host", host},
                             {"kernel", u.release},
                             {"interval", cfg->interval_s},
                             {"levels", nlohmann::json::array()},
                             {"columns_by_level", nlohmann::json::object()},
                             {"files", nlohmann::json::object()},
                             {"end_wallclock", nullptr},
                             {"exit_status", nullptr},
                             {"complete", false},
                             {"ticks", 0}};
  std::unique_ptr<multinode::Store> store;
  multinode::SqliteStore* sqlite = nullptr;
  if (to_sqlite) {
    auto st = multinode::make_sqlite_store(dir, manifest);
    if (!st) {
      print_error(st.error().message);
      return error_exit_status(st.error());
    }
    sqlite = st->get();
    store = std::move(*st);
  } else {
    auto st = multinode::make_csv_store(dir, {}, manifest);
    if (!st) {
      print_error(st.error().message);
      return error_exit_status(st.error());
    }
    store = std::move(*st);
  }
  multinode::HeadOptions ho;
  ho.job = alloc.job;
  ho.expected_nodes = alloc.nodes;
  ho.hostnames = alloc.hostnames;
  ho.interval_s = cfg->interval_s;
  ho.levels = levels;
  ho.launcher = argv;
  ho.confirm_agent_ends = true;
  multinode::Head head(ho, *store);

  SignalGuard signals(/*with_sigchld=*/false);
  AgentLauncher launcher(head);
  if (!launcher.start(argv, signals.original(), alloc.job)) return kExitFailure;
  bool interrupted = !wait_for_agents(head, signals.fd(), ho.start_grace_s);
  if (head.ready_nodes() == 0 && !interrupted) {
    launcher.stop();
    head.finish(monotonic_now());
    print_error(fmt::format("record --slurm-job {}: no agent started ({}); see the lines above",
                            alloc.job,
                            head.launcher_ended() ? "the launcher ended" : "none said ready"));
    return kExitFailure;
  }

  const double interval = cfg->interval_s;
  const double t0 = monotonic_now();
  std::uint64_t ticks = 0, missed = 0;
  std::uint64_t k = 1;
  while (!interrupted) {
    double slot = t0 + static_cast<double>(k) * interval;
    if (so.duration_s && slot - t0 > *so.duration_s + 1e-9) break;
    const double wait = slot - monotonic_now();
    pollfd p{signals.fd(), POLLIN, 0};
    const int r = ::poll(&p, 1, wait > 0 ? static_cast<int>(std::ceil(wait * 1000)) : 0);
    if (r > 0) {
      signalfd_siginfo si{};
      // The signal is taken off the signalfd; which one does not matter (the loop ends).
      [[maybe_unused]] const ssize_t n = ::read(signals.fd(), &si, sizeof si);
      break;
    }
    const double now = monotonic_now();
    if (now < slot) continue;
    head.tick(now, wallclock_now());
    ++ticks;
    // Skip the slots that passed while this one ran late (counted, never invented).
    const auto next = static_cast<std::uint64_t>(std::floor((monotonic_now() - t0) / interval)) + 1;
    if (next > k + 1) missed += next - k - 1;
    k = std::max(k + 1, next);
    // Agents that end: the job's end (they are complete, the recording ends), or a fault.
    if (head.agents_ending()) {
      const Captured q = slurm_command({"squeue", "-j", alloc.job, "-h", "-o", "%T"});
      if (q.status == Captured::kTimedOut) {
        // Unknown: ask again at the next tick (srun ends with the job, which ends the loop).
        std::cerr << fmt::format("sonde: warning: {}\n", q.err);
        continue;
      }
      const bool running = q.status == 0 && q.out.starts_with("RUNNING");
      head.confirm_ends(running, monotonic_now());
      if (!running) {
        std::cerr << fmt::format("sonde: job {} ended\n", alloc.job);
        break;
      }
    }
    if (head.launcher_ended()) break;  // no agent left
  }
  launcher.stop();
  head.finish(monotonic_now());
  const nlohmann::json summary = head.summary_json();
  std::string where = "run directory " + dir;
  if (sqlite) {
    // The run's row: its end, `complete` (unless a write failed), its summary.
    RunOutcome outcome;
    outcome.run_dir = sqlite->sink().location();
    sqlite->sink().finish(outcome, summary, ticks, missed);
    where = "run " + sqlite->sink().location();
  } else {
    store->set_manifest("ticks", ticks);
    store->set_manifest("ticks_missed", missed);
    store->set_manifest("summary", summary);
    store->set_manifest("end_wallclock", wallclock_now());
    store->set_manifest("complete", !store->failed());
  }
  if (!common.quiet) std::cerr << multinode::Head::summary_text(summary) << "  " << where << "\n";
  if (!common.summary_json.empty()) {
    if (auto ok = write_file_atomic(common.summary_json, json_text(summary, 2) + "\n"); !ok)
      print_error(ok.error().message);
  }
  return kExitOk;
}

}  // namespace sonde::cli
