#pragma once
// Shared by the fuzz targets (tests/fuzz/*_fuzz.cpp): an invariant check that fails loudly under
// libFuzzer and in the corpus replay tests alike, and a private scratch directory for the targets
// whose reader takes a path (run directories, zip files, SQLite databases).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace sonde::fuzz {

/// Aborts with a message when `ok` is false: libFuzzer saves the input as a crash, the replay
/// driver's test fails.
inline void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    std::abort();
  }
}

/// A directory of this process's own under $TMPDIR (or /tmp), created once and removed at exit.
const std::string& scratch_dir();

/// Writes `data` to `path` (replacing it); aborts on an I/O error (not the parser's fault).
void write_file(const std::string& path, std::string_view data);

/// Removes `path` and everything under it (errors ignored).
void remove_tree(const std::string& path);

}  // namespace sonde::fuzz
