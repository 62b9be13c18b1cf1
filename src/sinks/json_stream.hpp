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

 private:
  bool emit(std::string_view s);
  int fd_;
  std::unique_ptr<JsonStreamV1> v1_;  ///< null: the current protocol
  std::string line_;
};

}  // namespace sonde
