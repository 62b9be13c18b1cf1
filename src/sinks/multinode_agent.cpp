#include "sinks/multinode_agent.hpp"

#include <unistd.h>

#include "core/json_text.hpp"
#include "sinks/format.hpp"
#include "sinks/json_stream.hpp"

namespace sonde {
namespace {

class Agent final : public AgentSink {
 public:
  Agent(int fd, const Engine& engine, AgentIdentity id)
      : stream_(fd), engine_(engine), id_(std::move(id)) {
    stream_.set_write_per_line(true);
  }
  std::string name() const override { return "the agent's stdout"; }
  void set_end_reason(std::string reason) override { reason_ = std::move(reason); }

  SinkStatus begin(const RunStart&) override {
    nlohmann::ordered_json j;
    j["status"] = "ready";
    j["protocol"] = 1;
    j["node"] = id_.node;
    j["job"] = id_.job;
    j["pid"] = static_cast<long>(::getpid());
    j["interval"] = engine_.interval_s();
    j["levels"] = levels_json(engine_);
    j["columns_by_level"] = columns_by_level_json(engine_);
    j["node_info"] = node_info_json(engine_);
    j["sonde_version"] = SONDE_VERSION;
    // Stamped last, right before the write: the head bounds this node's clock offset with it.
    j["monotonic"] = monotonic_now();
    j["wallclock"] = wallclock_now();
    return stream_.emit(json_text(j) + "\n") ? SinkStatus::ok : SinkStatus::closed;
  }

  SinkStatus write(const Engine::Tick& tick) override {
    if (tick.ctx.tick == 0) return SinkStatus::ok;
    ++rows_;
    return stream_.write(engine_, tick) ? SinkStatus::ok : SinkStatus::closed;
  }

  void end(const RunEnd& end) override {
    nlohmann::ordered_json j;
    j["status"] = "end";
    j["node"] = id_.node;
    j["reason"] = reason_;
    j["rows"] = rows_;
    j["ticks_missed"] = end.ticks_missed;
    // Where each level's figures came from (the slurm level: the job's cgroup, less the agent's
    // own time when it runs inside it; or why not).
    j["level_sources"] = level_sources_json(engine_, "");
    j["monotonic"] = monotonic_now();
    j["wallclock"] = wallclock_now();
    (void)stream_.emit(json_text(j) + "\n");
  }

 private:
  JsonStreamSink stream_;
  const Engine& engine_;
  AgentIdentity id_;
  std::string reason_;
  std::uint64_t rows_ = 0;
};

}  // namespace

std::unique_ptr<AgentSink> make_agent_sink(int fd, const Engine& engine, AgentIdentity id) {
  return std::make_unique<Agent>(fd, engine, std::move(id));
}

}  // namespace sonde
