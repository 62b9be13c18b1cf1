#pragma once
// JUmPER's native-collector protocol: a `ready` line, then one line per level per tick:
// {"level": "...", "wallclock": t, "sample": {"time": t, <column>: value|null, ...}}.
#include <string>

#include <nlohmann/json.hpp>

#include "core/engine.hpp"

namespace sonde {

class JsonStreamSink {
 public:
  explicit JsonStreamSink(int fd) : fd_(fd) {}
  /// The handshake. Returns false when the output is closed.
  bool ready(const Engine& engine);
  /// {"status":"error","message":...}
  static void error(int fd, const std::string& message);
  /// One line per level. Returns false when the reader went away (EPIPE).
  bool write(const Engine& engine, const Engine::Tick& tick);

 private:
  bool emit(std::string_view s);
  int fd_;
  std::string line_;
};

}  // namespace sonde
