// Fuzz target: the zipped run reader (a run directory in a zip file, `sonde report run.zip`; the
// zip reader of src/sinks/run_data.cpp with zlib). The input is written to RUN.zip in a scratch
// directory and read with read_run, as the command line does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "run_checks.hpp"
#include "sinks/run_data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace sonde::fuzz;
  const std::string zip = scratch_dir() + "/run.zip";
  write_file(zip, std::string_view(reinterpret_cast<const char*>(data), size));
  if (auto run = sonde::read_run(zip); run.ok()) check_run(*run);
  return 0;
}
