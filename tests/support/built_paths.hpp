#pragma once
// Paths of this build that the tests need: the sonde binary, the workload, the fake GPU libraries,
// the fixtures, the source tree. Each SONDE_* macro a test uses (SONDE_BINARY, SONDE_FAKE_NVML, …)
// is a compile definition of its executable that names one of these variables, and the variables
// are defined in one small file CMake writes per executable (sonde_test_path in
// tests/CMakeLists.txt). The paths themselves are never in a compile flag: they hold the clone's
// directory, and a flag that differs between clones makes ccache miss every test translation unit
// of a new clone (issue 24, "CI in under 25 minutes").
namespace sonde::test::built {
extern const char* const binary;
extern const char* const workload;
extern const char* const mark_c;
extern const char* const test_scratch;
extern const char* const source_dir;
extern const char* const build_dir;
extern const char* const fixtures_dir;
extern const char* const fake_nvml;
extern const char* const fake_nvml_no_v3;
extern const char* const fake_rocm;
extern const char* const fake_scenarios;
extern const char* const test_plugin_dir;
extern const char* const test_status_plugin_dir;
extern const char* const cmake_command;
extern const char* const cmake_generator;
extern const char* const c_compiler;
extern const char* const cxx_compiler;
}  // namespace sonde::test::built
