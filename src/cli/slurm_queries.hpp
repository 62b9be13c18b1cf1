#pragma once
// What the multi-node head asks Slurm (docs/multinode.md): the allocation it runs in or the job
// it records (squeue, scontrol, each within a timeout), and where the launcher (srun) is.
#include <string>
#include <variant>
#include <vector>

#include "core/spawn.hpp"

namespace sonde::cli {

struct SlurmAllocation {
  std::string job;
  int nodes = 0;
  std::vector<std::string> hostnames;  ///< in task order, when scontrol could tell
  std::string user;
};

/// `run --slurm`: the allocation sonde runs in (SLURM_JOB_ID, SLURM_JOB_NUM_NODES/SLURM_NNODES),
/// or the exit status (2, the error printed).
std::variant<SlurmAllocation, int> allocation_from_environment();
/// `record --slurm-job ID`: a running job of the caller's (root: anyone's), from
/// `squeue -j ID -h -o '%N %u %T'` and `scontrol show hostnames`, or 2 (the error printed).
std::variant<SlurmAllocation, int> allocation_of_job(const std::string& job);
/// The launcher's program (${SONDE_SRUN:-srun}) as found on PATH, or 2 (the error printed).
std::variant<std::string, int> find_launcher(const char* what);

/// Runs a Slurm client command (squeue, scontrol) and captures its output (a few KiB expected),
/// within $SONDE_SLURM_COMMAND_TIMEOUT seconds ((0, 3600]; 10 s by default): slurmctld that does
/// not answer makes them wait for minutes, and the head must go on sampling (and end) without
/// them.
Captured slurm_command(const std::vector<std::string>& argv);

}  // namespace sonde::cli
