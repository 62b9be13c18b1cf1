#pragma once
// The fake Slurm of tests/multinode (an srun that starts the agents on this machine, squeue and
// scontrol answering for one job), and job ids unique to this test process, for the multi-node
// integration tests.
#include <unistd.h>

#include <string>

#include "support/built_paths.hpp"

namespace sonde::test {

inline const std::string kFakeSrun = std::string(SONDE_SOURCE_DIR) + "/tests/multinode/fake_srun";
inline const std::string kFakeSlurm = std::string(SONDE_SOURCE_DIR) + "/tests/multinode/fake_slurm";

/// A job id of this test process (agents of two tests never count each other's workloads).
inline std::string job_id() {
  static int n = 0;
  return std::to_string(4'000'000 + ::getpid() * 10 + n++);
}

}  // namespace sonde::test
