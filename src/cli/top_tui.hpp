#pragma once
// `sonde top`'s full-screen terminal front end (curses): draws the lines of src/views/top_render
// and answers the keys (h or ? lists them). The terminal is restored on every way out: q/F10,
// SIGINT, SIGTERM, SIGHUP (through the SignalGuard's signalfd), an exception.
#include "views/top_collect.hpp"
#include "views/top_model.hpp"

namespace sonde::cli {

struct TopTuiOptions {
  double interval_s = 1.0;
  bool readonly = false;  ///< the k key is refused
  bool color = true;
};

/// Runs until quit; the exit status.
int run_top_tui(top::Collector& collector, top::ViewState view, const TopTuiOptions& options);

}  // namespace sonde::cli
