// A status plugin for the tests (tests/integration/status_test.cpp), built twice with different
// names, priorities and option names. It adds a command-line option (--STATUS_OPTION) and
// - a field of each GPU process ("STATUS_OPTION" = the option's value, or "none"),
// - a field of each GPU ("seen_by_NAME" = its number of processes),
// - a header line "[NAME] header" and a footer line "[NAME] footer",
// - " NAME" at the end of each gpustat process entry (repr_process),
// - in `sonde top` (host_processes, ABI 1.2), "NAME_pid" = the pid of every process whose pid is
//   listed in $SONDE_TEST_STATUS_PIDS (comma-separated), GPU or not,
// and appends "NAME HOOK" to the file named by $SONDE_TEST_STATUS_TRACE at every hook, so the
// tests can check the order of the hooks and of the plugins. configure() refuses the value "bad".
// $SONDE_TEST_STATUS_HANG (below) makes one hook hang.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sonde/sdk.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#ifndef STATUS_NAME
#error STATUS_NAME
#endif

namespace {

// $SONDE_TEST_STATUS_HANG = "NAME:HOOK": that hook of that plugin never returns (a plugin stuck
// in a driver call), for the hook deadline's tests.
void maybe_hang(const char* hook) {
  const char* h = std::getenv("SONDE_TEST_STATUS_HANG");
  if (h == nullptr || std::string(h) != std::string(STATUS_NAME) + ":" + hook) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void trace(const char* hook) {
  maybe_hang(hook);
  const char* path = std::getenv("SONDE_TEST_STATUS_TRACE");
  if (path == nullptr || *path == '\0') return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %s\n", STATUS_NAME, hook);
    std::fclose(f);
  }
}

class TestStatus : public sonde::sdk::StatusPlugin {
 public:
  explicit TestStatus(sonde::sdk::Status& s) : StatusPlugin(s) { trace("create"); }
  void add_options(sonde::sdk::Status& s) override {
    trace("add_options");
    s.add_option(STATUS_OPTION, "a value shown as a process field", "");
  }
  void configure(sonde::sdk::Status& s) override {
    trace("configure");
    value_ = s.option(STATUS_OPTION).value_or("none");
    if (value_ == "bad") throw std::invalid_argument("--" STATUS_OPTION ": 'bad' is refused");
  }
  void before_query(sonde::sdk::Status&) override { trace("before_query"); }
  void query_device(sonde::sdk::Status&, sonde::sdk::Gpu& g) override {
    trace("query_device");
    g.set("seen_by_" STATUS_NAME, static_cast<double>(g.process_count()));
  }
  void get_process_info(sonde::sdk::Status&, sonde::sdk::Gpu&, sonde::sdk::Process& p) override {
    trace("get_process_info");
    p.set(STATUS_OPTION, value_);
  }
  void after_query(sonde::sdk::Status&) override { trace("after_query"); }
  void repr_gpu(sonde::sdk::Status&, const sonde::sdk::Gpu&, sonde::sdk::Text&) override {
    trace("repr_gpu");
  }
  void repr_process(sonde::sdk::Status& s, const sonde::sdk::Gpu&, const sonde::sdk::Process&,
                    sonde::sdk::Text& t) override {
    trace("repr_process");
    if (s.command() == "gpustat") t.append(" " STATUS_NAME);
  }
  void host_processes(sonde::sdk::Status&, std::vector<sonde::sdk::Process>& ps) override {
    trace("host_processes");
    const char* pids = std::getenv("SONDE_TEST_STATUS_PIDS");
    if (pids == nullptr) return;
    const std::string list = std::string(",") + pids + ",";
    for (auto& p : ps)
      if (list.find("," + std::to_string(p.pid()) + ",") != std::string::npos)
        p.set(STATUS_NAME "_pid", static_cast<double>(p.pid()));
  }
  void print_header(sonde::sdk::Status&, sonde::sdk::Text& t) override {
    trace("print_header");
    t.append("[" STATUS_NAME "] header\n");
  }
  void print_footer(sonde::sdk::Status&, sonde::sdk::Text& t) override {
    trace("print_footer");
    t.append("[" STATUS_NAME "] footer\n");
  }

 private:
  std::string value_;
};

}  // namespace

SONDE_STATUS_PLUGIN(TestStatus, STATUS_NAME, "test status plugin", STATUS_PRIORITY)
