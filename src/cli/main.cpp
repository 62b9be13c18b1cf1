#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>

#include "cli/commands.hpp"
#include "core/watchdog.hpp"

// The last line of defence: an exception that escaped a command (a bug; input errors are
// reported where they are found) ends sonde with a one-line error and exit 1 after unwinding, so
// that every sink's destructor closes what it wrote. Without it std::terminate aborts without
// unwinding: a run directory without its manifest, a SQLite run left open.
//
// Every output is closed by then. If a watchdog worker abandoned in a stuck driver call is still
// inside it, sonde ends with _Exit: the exit handlers (the driver library's destructors among
// them) would tear down the state that call is using, a crash after a complete run.
int main(int argc, char** argv) {
  int status = 1;
  try {
    status = sonde::cli::run_cli(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sonde: error: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "sonde: error: internal error (an unknown exception)\n";
  }
  if (sonde::Watchdog::abandoned_still_inside() > 0) {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(status);
  }
  return status;
}
