// SinkSet's error policy: a failing sink is disabled (and still finished), the others go on; a
// closed one stops sampling; exceptions are caught and name the sink.
#include <gtest/gtest.h>

#include <stdexcept>

#include "sinks/sink.hpp"

namespace sonde {
namespace {

struct Calls {
  int begin = 0, write = 0, end = 0;
};

class FakeSink final : public Sink {
 public:
  enum class Fail { never, status_on_second, throw_on_second, closed_on_second };
  FakeSink(std::string name, Calls& calls, Fail fail = Fail::never)
      : name_(std::move(name)), calls_(calls), fail_(fail) {}
  std::string name() const override { return name_; }
  SinkStatus begin(const RunStart&) override {
    ++calls_.begin;
    return SinkStatus::ok;
  }
  SinkStatus write(const Engine::Tick&) override {
    ++calls_.write;
    if (calls_.write < 2) return SinkStatus::ok;
    switch (fail_) {
      case Fail::status_on_second: return SinkStatus::failed;
      case Fail::throw_on_second: throw std::runtime_error("No space left on device");
      case Fail::closed_on_second: return SinkStatus::closed;
      case Fail::never: break;
    }
    return SinkStatus::ok;
  }
  void end(const RunEnd&) override { ++calls_.end; }
  std::string location() const override { return name_ == "dir" ? "/runs/x" : ""; }

 private:
  std::string name_;
  Calls& calls_;
  Fail fail_;
};

TEST(SinkSet, AFailedSinkIsDisabledAndStillFinishedWhileTheOthersGoOn) {
  Calls failing, thrower, healthy;
  SinkSet set;
  set.add(std::make_unique<FakeSink>("db", failing, FakeSink::Fail::status_on_second));
  set.add(std::make_unique<FakeSink>("stream", thrower, FakeSink::Fail::throw_on_second));
  set.add(std::make_unique<FakeSink>("dir", healthy));
  ASSERT_TRUE(set.begin(RunStart{}));
  const Engine::Tick tick;
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(set.on_sample(tick));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(failing.write, 2);  // not called after its failure
  EXPECT_EQ(thrower.write, 2);
  EXPECT_EQ(healthy.write, 5);
  EXPECT_NE(err.find("stream: writing a sample failed: No space left on device"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("db"), std::string::npos) << "a sink returning failed reported itself";
  set.end(RunEnd{});
  EXPECT_EQ(failing.end, 1);
  EXPECT_EQ(healthy.end, 1);
  EXPECT_EQ(set.location(), "/runs/x");
}

TEST(SinkSet, AClosedSinkStopsSampling) {
  Calls closing, healthy;
  SinkSet set;
  set.add(std::make_unique<FakeSink>("stream", closing, FakeSink::Fail::closed_on_second));
  set.add(std::make_unique<FakeSink>("dir", healthy));
  const Engine::Tick tick;
  EXPECT_TRUE(set.on_sample(tick));
  EXPECT_FALSE(set.on_sample(tick));
  EXPECT_EQ(healthy.write, 2);  // the tick is still written everywhere else
}

}  // namespace
}  // namespace sonde
