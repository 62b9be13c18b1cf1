#pragma once
// `sonde agent`'s output (docs/multinode.md, "Agent protocol"): on stdout, a ready line
// {"status":"ready","node":…,"job":…,"node_info":…,"columns_by_level":…,"wallclock":t,
// "monotonic":t,…}, then the `sonde stream` v2 lines {"level":…,"wallclock":…,"sample":{…}}, one
// per level per tick and each with one write(), and at the end {"status":"end",…}.
#include <memory>
#include <string>

#include "core/engine.hpp"
#include "sinks/sink.hpp"

namespace sonde {

struct AgentIdentity {
  std::string node;  ///< the node's name (its hostname, or --node-name)
  std::string job;   ///< the Slurm job id
};

class AgentSink : public Sink {
 public:
  virtual ~AgentSink() = default;
  /// Why sampling ended ("signal", "stdout closed", "duration"), for the end line.
  virtual void set_end_reason(std::string reason) = 0;
};

/// The agent's lines on `fd`. The engine's first tick (a baseline, rates undefined) is not
/// written. A reader that went away is SinkStatus::closed.
std::unique_ptr<AgentSink> make_agent_sink(int fd, const Engine& engine, AgentIdentity id);

}  // namespace sonde
