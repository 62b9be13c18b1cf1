#include "sinks/sink.hpp"

#include <exception>
#include <iostream>

#include <fmt/format.h>

namespace sonde {

void SinkSet::add(std::unique_ptr<Sink> sink) {
  sinks_.push_back({std::move(sink), true});
}

template <class F>
SinkStatus SinkSet::guarded(Entry& e, const char* what, F&& call) {
  try {
    const SinkStatus s = call(*e.sink);
    if (s == SinkStatus::failed) e.enabled = false;
    return s;
  } catch (const std::exception& ex) {
    std::cerr << fmt::format(
        "sonde: error: {}: {} failed: {}; this output is disabled, the program keeps running and "
        "what was already written stays valid\n",
        e.sink->name(), what, ex.what());
  } catch (...) {
    std::cerr << fmt::format(
        "sonde: error: {}: {} failed; this output is disabled, the program keeps running and "
        "what was already written stays valid\n",
        e.sink->name(), what);
  }
  e.enabled = false;
  return SinkStatus::failed;
}

bool SinkSet::begin(const RunStart& start) {
  bool open = true;
  for (Entry& e : sinks_)
    if (e.enabled &&
        guarded(e, "starting", [&](Sink& s) { return s.begin(start); }) == SinkStatus::closed)
      open = false;
  return open;
}

bool SinkSet::on_sample(const Engine::Tick& tick) {
  bool open = true;
  for (Entry& e : sinks_)
    if (e.enabled && guarded(e, "writing a sample", [&](Sink& s) { return s.write(tick); }) ==
                         SinkStatus::closed)
      open = false;
  return open;
}

void SinkSet::end(const RunEnd& end) {
  for (Entry& e : sinks_)
    guarded(e, "finishing", [&](Sink& s) {
      s.end(end);
      return SinkStatus::ok;
    });
}

std::string SinkSet::location() const {
  for (const Entry& e : sinks_)
    if (std::string l = e.sink->location(); !l.empty()) return l;
  return {};
}

}  // namespace sonde
