#pragma once
// The multi-node head's process side (docs/multinode.md): the launcher (`${SONDE_SRUN:-srun} …
// sonde agent`) as a child process in its own process group, the thread that reads its output
// into a multinode::Head (src/core/multinode_head.hpp), and the sink that ticks the head.
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "cli/slurm_queries.hpp"
#include "core/fs.hpp"
#include "core/level.hpp"
#include "core/multinode_head.hpp"
#include "sinks/sink.hpp"

namespace sonde::cli {

/// The agents' levels (slurm, system) and the head's own (process, user) from --levels.
struct LevelSplit {
  std::vector<Level> agents, local;
};
std::variant<LevelSplit, int> split_levels(const std::string& levels, bool record);

/// The launcher's argv for `alloc`.
std::vector<std::string> launcher_argv(const std::string& program, const SlurmAllocation& alloc,
                                       double interval_s, const std::vector<Level>& levels,
                                       const std::string& config_file);

/// The launcher as a child process and the thread that reads it.
class AgentLauncher {
 public:
  explicit AgentLauncher(multinode::Head& head) : head_(head) {}
  ~AgentLauncher();
  AgentLauncher(const AgentLauncher&) = delete;
  AgentLauncher& operator=(const AgentLauncher&) = delete;
  /// Starts it (its own process group; `marker_job` in its environment marks it and the agents
  /// as sonde's, never counted in the job). Errors are printed.
  bool start(const std::vector<std::string>& argv, const sigset_t& mask,
             const std::string& marker_job);
  /// Ends it: closes its stdin (the agents end, with their end lines) and waits up to `grace_s`,
  /// then SIGTERM to its process group, then SIGKILL. Joins the reader.
  void stop(double grace_s = 5);
  bool running() const { return pid_ > 0 && !exited_.load(); }

 private:
  void read_loop(int out_fd, int err_fd);
  void reader_failed(const std::string& what);  ///< on the reader thread: ends srun
  multinode::Head& head_;
  pid_t pid_ = -1;
  UniqueFd stdin_;  ///< the write end of the launcher's stdin: closed to end the agents
  std::thread reader_;
  std::atomic<bool> exited_{false};
};

/// Waits until every agent said ready (or failed), the launcher ended or `timeout_s` passed,
/// polling the head. Returns false when a signal of `signal_fd` came (the run is interrupted).
bool wait_for_agents(multinode::Head& head, int signal_fd, double timeout_s);

/// The Sink that places the agents' rows on the head's grid at every tick of the head's run.
std::unique_ptr<Sink> make_head_sink(multinode::Head& head);

}  // namespace sonde::cli
