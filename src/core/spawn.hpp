#pragma once
// Starting programs with posix_spawn: the command sonde monitors, the agents' launcher (srun),
// and the Slurm client commands whose output sonde reads. Plugin children are forked instead
// (plugins/child_process.cpp): they need PR_SET_PDEATHSIG and execveat on a checked descriptor,
// which posix_spawn cannot do.
#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace sonde {

/// How a program is started. Every field's default leaves that part as sonde has it.
struct SpawnOptions {
  /// The file executed; "" searches argv[0] in $PATH as posix_spawnp does (the user's own
  /// command; sonde's helpers are found with search_program, which AT_SECURE restricts).
  std::string program;
  /// Its environment ("NAME=value" each); null: sonde's.
  const std::vector<std::string>* env = nullptr;
  /// Descriptors put at 0, 1 and 2 (dup2); -1 leaves sonde's.
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  bool stdin_null = false;  ///< stdin from /dev/null (over stdin_fd)
  /// A process group of its own, so that killing the group ends what it started too.
  bool own_process_group = false;
  /// The child's signal mask (sonde's threads block the asynchronous signals); with it, SIGINT,
  /// SIGTERM, SIGHUP, SIGCHLD and SIGPIPE are reset to their default action.
  const sigset_t* sigmask = nullptr;
  /// Open cgroup.procs files the child writes itself into before it executes the program
  /// (cgroup::RunGroup): everything it runs is charged to those cgroups from its first
  /// instruction. Non-empty: the child is started with fork, not posix_spawn.
  std::vector<int> cgroup_procs;
};

/// Starts `argv` (not empty); 0 with `pid` set, or the errno of the failure.
int spawn_program(const std::vector<std::string>& argv, const SpawnOptions& options, pid_t& pid);

/// What run_captured got from a program.
struct Captured {
  /// exit status, 128+N when killed, -1 when it could not start, kTimedOut past its deadline
  int status = -1;
  static constexpr int kTimedOut = -2;
  std::string out, err;  ///< its stdout and stderr, each cut at 1 MiB
};

/// Runs `argv` with the executable `program` (stdin /dev/null, in a process group of its own)
/// and captures its stdout and stderr through pipes. Past `timeout_s` the process group is
/// killed and the result is kTimedOut, with the reason in `err`. The child is a helper child
/// (core/helper_children.hpp) while it runs. An empty `program` is "not found" (status -1).
Captured run_captured(const std::vector<std::string>& argv, const std::string& program,
                      double timeout_s);

}  // namespace sonde
