#include <exception>
#include <iostream>

#include "cli/commands.hpp"

// The last line of defence: an exception that escaped a command (a bug; input errors are
// reported where they are found) ends sonde with a one-line error and exit 1 after unwinding, so
// that every sink's destructor closes what it wrote. Without it std::terminate aborts without
// unwinding: a run directory without its manifest, a SQLite run left open.
int main(int argc, char** argv) {
  try {
    return sonde::cli::run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sonde: error: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "sonde: error: internal error (an unknown exception)\n";
  }
  return 1;
}
