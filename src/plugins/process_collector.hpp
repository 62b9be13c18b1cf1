#pragma once
// The collector side of a process plugin: the state machine of docs/plugin-protocol.md over a
// ChildProcess (setup, one tick round trip per tick under the collector's deadline, late replies
// dropped) and the restart policy for a child that dies (docs/writing-collectors.md, "Crashes").
#include <memory>
#include <string>
#include <vector>

#include "core/collector.hpp"
#include "plugins/child_process.hpp"

namespace sonde::plugins {

/// How a process collector restarts a child that died (docs/writing-collectors.md).
struct RestartPolicy {
  double first_backoff_s = 0.5;  ///< delay before the first restart
  double max_backoff_s = 30.0;   ///< the delay doubles with each crash in the window, up to this
  double window_s = 60.0;        ///< crashes older than this are forgotten
  unsigned max_crashes = 5;      ///< this many crashes within the window: no more restarts
};

/// A collector running `spec` as its child. `source` and `file` are what `sonde collectors`
/// shows; `skip_kwargs` are keyword arguments of sonde's own (exec's `command`), not sent.
std::unique_ptr<Collector> make_child_collector(SpawnSpec spec, std::string source,
                                                std::string file, CollectorArgs args,
                                                std::vector<std::string> skip_kwargs,
                                                RestartPolicy policy = {});

}  // namespace sonde::plugins
