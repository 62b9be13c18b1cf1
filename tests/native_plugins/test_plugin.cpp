// A native test plugin, built several times with TEST_PLUGIN_BEHAVIOUR set to one way of working
// or failing. Columns: a scalar "test_value" (42) at every level.
#include <sonde/sdk.hpp>

#include <chrono>
#include <cmath>
#include <csignal>
#include <stdexcept>
#include <thread>

#define GOOD 0
#define HANG 1
#define CRASH 2
#define THROW 3
#define WRONG_TYPE 4
#define NAN_VALUE 5
#define ABI_MISMATCH 6
#define SLOW 7
#define BAD_ARGS 8

namespace {
using sonde::sdk::Level;
using sonde::sdk::Tick;
using sonde::sdk::Value;

class TestCollector : public sonde::sdk::Collector {
 public:
  explicit TestCollector(const sonde::sdk::Host& host) : Collector(host), host_(host) {
    if (host.string("fail_setup")) throw std::runtime_error("asked to fail in setup");
  }
  Value collect(Level, const Tick& tick) override {
    const bool misbehave = tick.index() >= 2;  // behave for the first ticks, then fail
#if TEST_PLUGIN_BEHAVIOUR == HANG
    if (misbehave)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
#elif TEST_PLUGIN_BEHAVIOUR == CRASH
    if (misbehave) std::raise(SIGSEGV);
#elif TEST_PLUGIN_BEHAVIOUR == THROW
    if (misbehave) throw std::runtime_error("the test plugin throws");
#elif TEST_PLUGIN_BEHAVIOUR == WRONG_TYPE
    if (misbehave) return sonde::sdk::Vector{{ 1, 2, 3 }};
#elif TEST_PLUGIN_BEHAVIOUR == NAN_VALUE
    if (misbehave) return sonde::sdk::Scalar{std::nan("")};
#elif TEST_PLUGIN_BEHAVIOUR == SLOW
    if (misbehave) std::this_thread::sleep_for(std::chrono::milliseconds(400));
#elif TEST_PLUGIN_BEHAVIOUR == BAD_ARGS
    // A broken plugin's calls into the host: NULL keys, handles and outputs. Each is refused
    // (0, -1, NULL or nothing done), none throws into these frames or crashes the run.
    if (misbehave) {
      const sonde_host_api* api = host_.api();
      (void)host_.string(nullptr);
      (void)host_.injected(nullptr);
      (void)api->kwarg_list_item(nullptr, nullptr, 0);
      (void)api->injected(nullptr, nullptr);
      (void)api->node_info(nullptr);
      (void)api->target_pid(nullptr);
      api->log(nullptr, 1, nullptr);
      (void)api->tick_index(nullptr);
      (void)api->level_size(nullptr, SONDE_LEVEL_SYSTEM);
      (void)api->level_pid(nullptr, SONDE_LEVEL_PROCESS, 0);
      (void)api->total_pids(nullptr);
      api->write_scalar(nullptr, 1);
      api->write_vector(nullptr, nullptr, 3);
      api->write_counters(nullptr, nullptr, 3);
      api->set_error(nullptr, nullptr);
      host_.warn("bad arguments survived");
    }
#endif
    (void)misbehave;
    return sonde::sdk::Scalar{42};
  }

 private:
  sonde::sdk::Host host_;
};
}  // namespace

#if TEST_PLUGIN_BEHAVIOUR == ABI_MISMATCH
namespace {
const sonde_plugin kMismatch = {99,      0, sizeof(sonde_plugin), "mismatch", "built for ABI 99", 0,
                                nullptr, {}};
}
SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void) {
  return &kMismatch;
}
#else
SONDE_COLLECTOR_PLUGIN(TestCollector, "test_plugin", "a test plugin", 5,
                       "{handler: {_target_: ScalarHandler, column: test_value}}")
#endif
