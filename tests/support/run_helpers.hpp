#pragma once
// Helpers for the integration tests: run the real `sonde` binary and the test workload as child
// processes, and read what they wrote (CSV, JSON). Failures to read or parse throw
// std::runtime_error with a message naming the file, so that GoogleTest reports them.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/built_paths.hpp"

namespace sonde::test {

namespace fs = std::filesystem;

/// The `sonde` binary and the workload under test (absolute paths from the build).
/// SONDE_TEST_BINARY overrides the binary (e.g. to show that a test fails on an older build).
inline const char* sonde_binary() {
  const char* other = std::getenv("SONDE_TEST_BINARY");
  return other && *other ? other : SONDE_BINARY;
}
inline const char* workload_binary() {
  return SONDE_WORKLOAD;
}

struct RunOptions {
  /// Variables set (or replaced) in the child's environment.
  std::vector<std::pair<std::string, std::string>> env;
  /// Variables removed from the child's environment.
  std::vector<std::string> unset_env;
  /// After this the child's process group is killed and `timed_out` is set.
  double timeout_s = 120;
};

struct RunResult {
  int status = -1;  ///< exit code, or 128+N when killed by signal N
  std::string out;  ///< everything written to stdout
  std::string err;  ///< everything written to stderr
  bool timed_out = false;
  /// "status N; stderr: ..." for assertion messages.
  std::string describe() const;
};

/// Runs argv[0] (searched in PATH) with stdin from /dev/null, capturing stdout and stderr.
/// The child runs in its own process group.
RunResult run_command(const std::vector<std::string>& argv, const RunOptions& options = {});

/// Runs the sonde binary under test with `args` (run_command's rules).
RunResult sonde(std::vector<std::string> args, const RunOptions& options = {});

/// A child process running in the background (in its own process group), with stdout and stderr
/// captured through pipes that are drained whenever the object waits. Killed (SIGKILL to the
/// group) and reaped by the destructor when still running.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const RunOptions& options = {});
  ~BackgroundProcess();
  BackgroundProcess(const BackgroundProcess&) = delete;
  BackgroundProcess& operator=(const BackgroundProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// Sends `sig` to the process (not its group).
  void signal(int sig) const;
  /// Sends `sig` to the process group.
  void signal_group(int sig) const;

  /// Next complete stdout line (without the newline), or nullopt at EOF or after `timeout_s`.
  std::optional<std::string> read_line(double timeout_s);
  /// Closes our read end of the child's stdout (the child then gets EPIPE/SIGPIPE).
  void close_stdout();

  /// Reaps the child if it has exited, draining the pipes; its status as in RunResult.
  std::optional<int> poll();
  /// Waits up to `timeout_s` for the child to exit; nullopt when it is still running.
  std::optional<int> wait(double timeout_s);
  /// SIGKILL to the group, then reap.
  int kill_and_wait();

  bool running() const { return !status_.has_value(); }
  /// Output captured so far (stdout not yet consumed by read_line, and all of stderr).
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  /// Reads whatever is available on the pipes, waiting at most `timeout_ms` for something.
  void drain(int timeout_ms);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  std::optional<int> status_;
};

/// A second, unprivileged user of this machine (sonde-test-other) for tests of what one user can
/// do to another; created when missing. nullopt unless the tests run as root.
struct OtherUser {
  uid_t uid;
  gid_t gid;
};
inline constexpr const char* kOtherUser = "sonde-test-other";
std::optional<OtherUser> other_user();
/// `argv` run as that user (setpriv, no supplementary groups).
std::vector<std::string> as_user(const OtherUser& u, std::vector<std::string> argv);

/// Sleeps for `seconds`.
void sleep_for(double seconds);

/// A fresh, empty directory under SONDE_TEST_SCRATCH named after the running test (and `tag`).
fs::path scratch_dir(const std::string& tag = "");

/// Reads a whole file ("" when missing).
std::string read_file(const fs::path& path);

/// `text` split at its newlines (no newline kept; a last line without one counts).
std::vector<std::string> lines_of(const std::string& text);
/// `s` in single quotes for sh -c, a quote inside it closed and reopened.
std::string shell_quote(const std::string& s);
/// The CPU seconds (user + system, its own rusage) of the last workload process that wrote
/// "MODE CPU_SECONDS" to the file SONDE_WORKLOAD_RUSAGE named; 0 when none did.
double workload_rusage_cpu(const fs::path& file);
/// The data `sonde report` embeds in its page (summary, manifest, rows): the JSON of its
/// <script id="sonde-data"> element, or null when the page has none. The page's text also holds
/// every tag's name in its style sheet, so a tag is looked for here, never in the whole page.
nlohmann::json report_data(const fs::path& html_file);

/// A CSV file: header and rows of cells (an empty cell is a missing value).
struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  /// True when the last line lacked its newline and was ignored (allowed by CsvReadOptions).
  bool dropped_incomplete_last_line = false;

  bool has_column(const std::string& name) const;
  /// Index of a column; throws when absent.
  std::size_t index(const std::string& name) const;
  /// A column as numbers, NaN for empty cells; throws when absent or a cell is not a number.
  std::vector<double> numbers(const std::string& name) const;
  /// Columns named `prefix` followed by digits only (e.g. cpu_util_0..N-1), in index order.
  std::vector<std::string> numbered_columns(const std::string& prefix) const;
};

struct CsvReadOptions {
  /// Accept (and ignore) a last line without a trailing newline that has the wrong number of
  /// cells (what a writer killed mid-line leaves behind).
  bool allow_incomplete_last_line = false;
};

/// Reads a CSV file; throws unless every row has the header's number of cells.
CsvTable read_csv(const fs::path& path, const CsvReadOptions& options = {});

/// Parses a JSON file; throws with the file name on error.
nlohmann::json read_json(const fs::path& path);

/// The run directory inside `out`: `out` itself when it holds manifest.json, otherwise the one
/// subdirectory that does; throws when there is none, or when the run breaks one of the physical
/// invariants of tests/support/invariants.hpp (every integration test's run goes through here).
fs::path run_dir(const fs::path& out);
/// The same without the invariant check.
fs::path find_run_dir(const fs::path& out);
/// Throws std::runtime_error listing the violated invariants of a readable run.
void check_invariants(const fs::path& run);

/// Σ values[i] · (time[i] − time[i−1]) for i ≥ 1 (the first row contributes 0), skipping NaN.
double integrate(const std::vector<double>& time, const std::vector<double>& values);

/// Largest non-NaN value (NaN when there is none).
double max_value(const std::vector<double>& values);

/// Number of NaN entries.
std::size_t count_nan(const std::vector<double>& values);

}  // namespace sonde::test
