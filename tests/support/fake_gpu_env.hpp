#pragma once
// Points sonde's GPU backends at libraries (the fakes of tests/fakes or none) and a fake scenario
// for one test, and back afterwards.
#include <cstdlib>
#include <string>

#include "support/built_paths.hpp"

namespace sonde::test {

class FakeGpuEnv {
 public:
  /// `scenario`: a file in SONDE_FAKE_SCENARIOS; `pids`: the fakes' process ids, comma-separated.
  FakeGpuEnv(const char* nvml_library, const char* rocm_library, const std::string& scenario,
             const char* pids) {
    setenv("SONDE_NVML_LIBRARY", nvml_library, 1);
    setenv("SONDE_ROCM_SMI_LIBRARY", rocm_library, 1);
    setenv("SONDE_FAKE_GPU_SCENARIO", (std::string(SONDE_FAKE_SCENARIOS) + "/" + scenario).c_str(),
           1);
    setenv("SONDE_FAKE_GPU_PIDS", pids, 1);
  }
  ~FakeGpuEnv() {
    for (const char* v : {"SONDE_NVML_LIBRARY", "SONDE_ROCM_SMI_LIBRARY", "SONDE_FAKE_GPU_SCENARIO",
                          "SONDE_FAKE_GPU_PIDS", "SONDE_FAKE_NVML_SCENARIO"})
      unsetenv(v);
  }
  FakeGpuEnv(const FakeGpuEnv&) = delete;
  FakeGpuEnv& operator=(const FakeGpuEnv&) = delete;
};

}  // namespace sonde::test
