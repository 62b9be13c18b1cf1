#pragma once
// The child process of a process plugin: spawned in its own process group with pipes to its
// stdin, stdout and stderr; every wait bounded by a deadline (poll, no thread); ended politely,
// then by SIGTERM, then by SIGKILL; reaped. Its stderr is passed on to sonde's, line by line,
// prefixed with the collector's name. The protocol spoken over the pipes is process_collector's.
#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/fs.hpp"
#include "core/result.hpp"
#include "plugins/protocol.hpp"

namespace sonde::plugins {

struct SpawnSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  ///< set or replaced in the child's environment
  std::string name;                        ///< prefix of its stderr lines
};

// One running child with pipes to its stdin, stdout and stderr, in its own process group.
class ChildProcess {
 public:
  enum class Io { ok, timeout, closed, error };

  /// Resolves argv[0] in PATH, checks it against the trust rules, forks and execs it; an exec
  /// failure is reported here ("cannot run 'x': No such file or directory").
  static Result<std::unique_ptr<ChildProcess>> start(const SpawnSpec& spec);
  ~ChildProcess() { stop(false); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  double started_at() const { return started_at_; }

  /// Writes all of `data` by `deadline` (monotonic seconds).
  Io write(std::string_view data, double deadline);
  /// The next line of the child's stdout by `deadline`; passes stderr on meanwhile.
  Io read_line(std::string& line, double deadline);
  /// Passes on what the child wrote to stderr so far (no waiting).
  void pump_stderr();
  /// Ends the child: `polite` sends {"op":"shutdown"} and closes its stdin, then waits up to 1 s;
  /// then SIGTERM to its group, up to 1 s; then SIGKILL. Blocks up to 2 s; idempotent.
  void stop(bool polite);
  /// For a child whose protocol is over (it closed its stdout, or the stream is corrupt): waits
  /// at most `wait_s` for it to exit by itself, then SIGKILL to its group. Reaps it if it can
  /// without waiting longer; `reap_later` finishes the job.
  void kill_now(double wait_s);
  /// Reaps the child when it has exited; true once it is reaped.
  bool reap_later();
  /// How it ended, once reaped ("exited with status 1").
  const std::string& how_it_ended() const { return ended_; }

 private:
  ChildProcess() = default;
  bool try_reap();
  void forward(std::string_view line);

  pid_t pid_ = -1;
  bool reaped_ = true;
  UniqueFd in_, out_, err_;
  bool out_eof_ = false;
  protocol::LineBuffer out_buf_, err_buf_;
  std::string name_;
  std::string ended_;
  double started_at_ = 0;
};

}  // namespace sonde::plugins
