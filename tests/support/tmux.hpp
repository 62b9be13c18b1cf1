#pragma once
// A tmux server of the test's own (its socket in the test's scratch directory) for tests of
// full-screen views: `sonde status -i` and `sonde top` run in window "w", whose screen is read
// back as text. The server is killed when the object goes.
#include <string>
#include <utility>
#include <vector>

#include "support/run_helpers.hpp"

namespace sonde::test {

class Tmux {
 public:
  /// `env`: set for every tmux client call (LANG=C.UTF-8 to read the screen back as UTF-8).
  explicit Tmux(const fs::path& dir, std::vector<std::pair<std::string, std::string>> env = {})
      : socket_((dir / "tmux.sock").string()), env_(std::move(env)) {}
  ~Tmux() { run({"kill-server"}); }
  Tmux(const Tmux&) = delete;
  Tmux& operator=(const Tmux&) = delete;

  RunResult run(const std::vector<std::string>& args) const {
    std::vector<std::string> argv{"tmux", "-S", socket_};
    argv.insert(argv.end(), args.begin(), args.end());
    RunOptions o;
    o.env = env_;
    o.timeout_s = 20;
    return run_command(argv, o);
  }
  /// The screen of window "w", as text.
  std::string capture() const { return run({"capture-pane", "-p", "-t", "w"}).out; }
  /// A tmux format of window "w" (e.g. "#{cursor_flag}"), without its newline.
  std::string format(const std::string& f) const {
    auto out = run({"display-message", "-p", "-t", "w", f}).out;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

 private:
  std::string socket_;
  std::vector<std::pair<std::string, std::string>> env_;
};

}  // namespace sonde::test
