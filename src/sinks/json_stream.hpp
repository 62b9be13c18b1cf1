#pragma once
// JUmPER's native-collector protocol: a `ready` line, then one line per level per tick:
// {"level": "...", "wallclock": t, "sample": {"time": t, <column>: value|null, ...}}.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"

namespace sonde {

class JsonStreamV1;

class JsonStreamSink {
 public:
  /// `protocol` 1: each line converted to JUmPER's older protocol (src/sinks/json_stream_v1.hpp).
  explicit JsonStreamSink(int fd, int protocol = 2);
  ~JsonStreamSink();
  JsonStreamSink(const JsonStreamSink&) = delete;
  JsonStreamSink& operator=(const JsonStreamSink&) = delete;
  /// The handshake. Returns false when the output is closed.
  bool ready(const Engine& engine);
  /// {"status":"error","message":...}
  static void error(int fd, const std::string& message);
  /// One line per level. Returns false when the reader went away (EPIPE).
  bool write(const Engine& engine, const Engine::Tick& tick);
  /// Each line with a write() of its own (`sonde agent`: a launcher such as srun --label that
  /// labels what it reads may then never see two lines in one read); default: one per tick.
  void set_write_per_line(bool on) { per_line_ = on; }
  /// Writes `s` (whole lines) to the output. Returns false when the reader went away.
  bool emit(std::string_view s);

 private:
  int fd_;
  bool per_line_ = false;
  std::unique_ptr<JsonStreamV1> v1_;  ///< null: the current protocol
  std::string line_;
};

}  // namespace sonde
