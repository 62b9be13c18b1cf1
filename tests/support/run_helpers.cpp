#include "support/run_helpers.hpp"

#include "support/built_paths.hpp"
#include "support/invariants.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace sonde::test {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// The child's environment: ours, minus `unset_env`, with `env` set.
std::vector<std::string> child_environment(const RunOptions& options) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    vars[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  for (const auto& name : options.unset_env) vars.erase(name);
  for (const auto& [name, value] : options.env) vars[name] = value;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [name, value] : vars) out.push_back(name + "=" + value);
  return out;
}

struct Spawned {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
};

// fork + execvpe with stdin from /dev/null and stdout/stderr on pipes, in a new process group.
// Everything the child needs is prepared before fork (only async-signal-safe calls after).
Spawned spawn(const std::vector<std::string>& argv, const RunOptions& options) {
  if (argv.empty()) throw std::invalid_argument("spawn: empty argv");
  std::vector<std::string> env_strings = child_environment(options);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) throw std::runtime_error(errno_text("pipe2"));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    throw std::runtime_error(errno_text("pipe2"));
  }
  const std::string exec_failed = "exec " + argv[0] + " failed: ";

  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    throw std::runtime_error(errno_text("fork"));
  }
  if (pid == 0) {
    setpgid(0, 0);
    // Default dispositions and an empty mask, whatever the test runner had.
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    execvpe(args[0], args.data(), envp.data());
    const char* why = std::strerror(errno);
    (void)!write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    (void)!write(STDERR_FILENO, why, std::strlen(why));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so that the group exists before we signal it
  close(out_pipe[1]);
  close(err_pipe[1]);
  return {pid, out_pipe[0], err_pipe[0]};
}

// Reads what is available from the open fds into the strings, waiting up to timeout_ms for
// the first data; closes and sets to -1 any fd at EOF.
void drain_fds(int& out_fd, std::string& out, int& err_fd, std::string& err, int timeout_ms) {
  pollfd fds[2];
  int n = 0;
  int* owners[2];
  std::string* bufs[2];
  if (out_fd >= 0) {
    fds[n] = {out_fd, POLLIN, 0};
    owners[n] = &out_fd;
    bufs[n++] = &out;
  }
  if (err_fd >= 0) {
    fds[n] = {err_fd, POLLIN, 0};
    owners[n] = &err_fd;
    bufs[n++] = &err;
  }
  if (n == 0) {
    // Nothing to read: the caller is waiting for the process itself; poll it often.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 5)));
    return;
  }
  const int ready = ::poll(fds, static_cast<nfds_t>(n), timeout_ms);
  if (ready <= 0) return;
  for (int i = 0; i < n; ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buf[65536];
    const ssize_t got = read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      bufs[i]->append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(*owners[i]);
      *owners[i] = -1;
    }
  }
}

std::string quote_argv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

}  // namespace

std::string RunResult::describe() const {
  std::string s = "status " + std::to_string(status);
  if (timed_out) s += " (timed out)";
  s += "\n--- stdout ---\n" + out.substr(0, 4000) + "\n--- stderr ---\n" + err.substr(0, 4000);
  return s;
}

RunResult sonde(std::vector<std::string> args, const RunOptions& options) {
  args.insert(args.begin(), sonde_binary());
  return run_command(args, options);
}

RunResult run_command(const std::vector<std::string>& argv, const RunOptions& options) {
  Spawned child = spawn(argv, options);
  RunResult result;
  const auto start = Clock::now();
  int raw_status = 0;
  bool reaped = false;
  while (!reaped || child.out_fd >= 0 || child.err_fd >= 0) {
    if (!reaped) {
      const pid_t got = waitpid(child.pid, &raw_status, WNOHANG);
      if (got == child.pid) reaped = true;
    }
    if (!reaped && !result.timed_out && seconds_since(start) > options.timeout_s) {
      result.timed_out = true;
      ::kill(-child.pid, SIGKILL);
      ::kill(child.pid, SIGKILL);
    }
    // Grandchildren may keep the pipes open after the child exited; do not wait for them long.
    if (reaped && seconds_since(start) > options.timeout_s + 5) break;
    drain_fds(child.out_fd, result.out, child.err_fd, result.err, reaped ? 100 : 20);
  }
  if (child.out_fd >= 0) close(child.out_fd);
  if (child.err_fd >= 0) close(child.err_fd);
  result.status = decode_status(raw_status);
  if (result.status == 127 && result.err.empty())
    result.err = "(no output from " + quote_argv(argv) + ")";
  return result;
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv,
                                     const RunOptions& options) {
  Spawned child = spawn(argv, options);
  pid_ = child.pid;
  out_fd_ = child.out_fd;
  err_fd_ = child.err_fd;
}

BackgroundProcess::~BackgroundProcess() {
  if (running()) kill_and_wait();
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

void BackgroundProcess::signal(int sig) const {
  if (running()) ::kill(pid_, sig);
}

void BackgroundProcess::signal_group(int sig) const {
  if (running()) ::kill(-pid_, sig);
}

void BackgroundProcess::drain(int timeout_ms) {
  drain_fds(out_fd_, out_, err_fd_, err_, timeout_ms);
}

std::optional<std::string> BackgroundProcess::read_line(double timeout_s) {
  const auto start = Clock::now();
  for (;;) {
    const auto nl = out_.find('\n');
    if (nl != std::string::npos) {
      std::string line = out_.substr(0, nl);
      out_.erase(0, nl + 1);
      return line;
    }
    if (out_fd_ < 0) return std::nullopt;  // EOF (or closed): no further complete line
    const double left = timeout_s - seconds_since(start);
    if (left <= 0) return std::nullopt;
    drain(static_cast<int>(std::min(left, 0.1) * 1000) + 1);
  }
}

void BackgroundProcess::close_stdout() {
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}

std::optional<int> BackgroundProcess::poll() {
  if (status_) return status_;
  int raw = 0;
  const pid_t got = waitpid(pid_, &raw, WNOHANG);
  if (got == pid_) {
    status_ = decode_status(raw);
    drain(0);
  }
  return status_;
}

std::optional<int> BackgroundProcess::wait(double timeout_s) {
  const auto start = Clock::now();
  for (;;) {
    if (poll()) return status_;
    if (seconds_since(start) > timeout_s) return std::nullopt;
    drain(20);
  }
}

int BackgroundProcess::kill_and_wait() {
  if (status_) return *status_;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  int raw = 0;
  while (waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
  }
  status_ = decode_status(raw);
  drain(0);
  return *status_;
}

void sleep_for(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

std::optional<OtherUser> other_user() {
  if (::geteuid() != 0) return std::nullopt;
  for (int attempt = 0; attempt < 5; ++attempt) {
    if (const struct passwd* pw = ::getpwnam(kOtherUser)) return OtherUser{pw->pw_uid, pw->pw_gid};
    // Another test may be adding it at the same time (useradd then fails on the lock): retry.
    run_command({"useradd", "-M", "-r", "-U", "-s", "/usr/sbin/nologin", kOtherUser});
    if (const struct passwd* pw = ::getpwnam(kOtherUser)) return OtherUser{pw->pw_uid, pw->pw_gid};
    sleep_for(0.2);
  }
  return std::nullopt;
}

std::vector<std::string> as_user(const OtherUser& u, std::vector<std::string> argv) {
  std::vector<std::string> out = {"setpriv", "--reuid=" + std::to_string(u.uid),
                                  "--regid=" + std::to_string(u.gid), "--clear-groups", "--"};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

fs::path scratch_dir(const std::string& tag) {
  std::string name = "test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info())
    name = std::string(info->test_suite_name()) + "." + info->name();
  if (!tag.empty()) name += "." + tag;
  std::replace_if(
      name.begin(), name.end(),
      [](char c) {
        return !(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_');
      },
      '_');
  const fs::path dir = fs::path(SONDE_TEST_SCRATCH) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

double workload_rusage_cpu(const fs::path& file) {
  std::ifstream in(file);
  std::string mode;
  double cpu = 0, last = 0;
  while (in >> mode >> cpu) last = cpu;
  return last;
}

nlohmann::json report_data(const fs::path& html_file) {
  const std::string html = read_file(html_file);
  const std::string open = "<script id=\"sonde-data\" type=\"application/json\">";
  const auto from = html.find(open);
  if (from == std::string::npos) return nullptr;
  const auto to = html.find("</script>", from);
  if (to == std::string::npos) return nullptr;
  return nlohmann::json::parse(html.substr(from + open.size(), to - from - open.size()), nullptr,
                               false);
}

bool CsvTable::has_column(const std::string& name) const {
  return std::find(header.begin(), header.end(), name) != header.end();
}

std::size_t CsvTable::index(const std::string& name) const {
  const auto it = std::find(header.begin(), header.end(), name);
  if (it == header.end()) {
    std::string all;
    for (const auto& h : header) all += (all.empty() ? "" : ",") + h;
    throw std::runtime_error("CSV has no column '" + name + "' (header: " + all + ")");
  }
  return static_cast<std::size_t>(it - header.begin());
}

std::vector<double> CsvTable::numbers(const std::string& name) const {
  const std::size_t col = index(name);
  std::vector<double> out;
  out.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::string& cell = rows[r][col];
    if (cell.empty()) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    double v = 0;
    const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
    if (ec != std::errc() || end != cell.data() + cell.size())
      throw std::runtime_error("CSV column '" + name + "', row " + std::to_string(r + 1) +
                               ": not a number: '" + cell + "'");
    out.push_back(v);
  }
  return out;
}

std::vector<std::string> CsvTable::numbered_columns(const std::string& prefix) const {
  std::vector<std::pair<long, std::string>> found;
  for (const auto& h : header) {
    if (h.size() <= prefix.size() || h.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string_view rest = std::string_view(h).substr(prefix.size());
    long n = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
    if (ec == std::errc() && end == rest.data() + rest.size()) found.emplace_back(n, h);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [n, h] : found) out.push_back(std::move(h));
  return out;
}

namespace {

// Splits one CSV line (RFC 4180 quoting, no embedded newlines).
std::vector<std::string> split_csv_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

}  // namespace

CsvTable read_csv(const fs::path& path, const CsvReadOptions& options) {
  if (!fs::exists(path)) throw std::runtime_error(path.string() + ": no such file");
  const std::string text = read_file(path);
  CsvTable table;
  std::size_t pos = 0;
  std::size_t line_no = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    const bool complete = nl != std::string::npos;
    const std::string_view line =
        std::string_view(text).substr(pos, complete ? nl - pos : std::string::npos);
    pos = complete ? nl + 1 : text.size();
    ++line_no;
    std::vector<std::string> cells = split_csv_line(line);
    if (line_no == 1) {
      if (!complete) throw std::runtime_error(path.string() + ": header line is incomplete");
      table.header = std::move(cells);
      continue;
    }
    if (cells.size() != table.header.size()) {
      if (!complete && options.allow_incomplete_last_line) {
        table.dropped_incomplete_last_line = true;
        break;
      }
      throw std::runtime_error(path.string() + ":" + std::to_string(line_no) + ": " +
                               std::to_string(cells.size()) + " cells, header has " +
                               std::to_string(table.header.size()) + ": '" + std::string(line) +
                               "'");
    }
    table.rows.push_back(std::move(cells));
  }
  if (table.header.empty()) throw std::runtime_error(path.string() + ": no header line");
  return table;
}

nlohmann::json read_json(const fs::path& path) {
  if (!fs::exists(path)) throw std::runtime_error(path.string() + ": no such file");
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": invalid JSON: " + e.what());
  }
}

fs::path run_dir(const fs::path& out) {
  const fs::path found = find_run_dir(out);
  check_invariants(found);
  return found;
}

fs::path find_run_dir(const fs::path& out) {
  if (fs::exists(out / "manifest.json")) return out;
  std::vector<fs::path> found;
  if (fs::is_directory(out))
    for (const auto& entry : fs::directory_iterator(out))
      if (entry.is_directory() && fs::exists(entry.path() / "manifest.json"))
        found.push_back(entry.path());
  if (found.size() != 1)
    throw std::runtime_error(out.string() +
                             ": expected manifest.json in it (or in one of its "
                             "subdirectories), found " +
                             std::to_string(found.size()));
  return found.front();
}

void check_invariants(const fs::path& run) {
  std::vector<std::string> violations;
  try {
    violations = run_invariant_violations(run);
  } catch (const std::exception&) {
    return;  // not a readable run (a test of broken runs): the test itself reads it
  }
  if (violations.empty()) return;
  std::string msg =
      run.string() + ": " + std::to_string(violations.size()) + " physical invariant(s) violated:";
  for (std::size_t i = 0; i < violations.size() && i < 12; ++i) msg += "\n  " + violations[i];
  throw std::runtime_error(msg);
}

double integrate(const std::vector<double>& time, const std::vector<double>& values) {
  if (time.size() != values.size()) throw std::invalid_argument("integrate: size mismatch");
  double sum = 0;
  for (std::size_t i = 1; i < time.size(); ++i) {
    const double dt = time[i] - time[i - 1];
    if (std::isnan(values[i]) || std::isnan(dt)) continue;
    sum += values[i] * dt;
  }
  return sum;
}

double max_value(const std::vector<double>& values) {
  double best = std::numeric_limits<double>::quiet_NaN();
  for (double v : values)
    if (!std::isnan(v) && (std::isnan(best) || v > best)) best = v;
  return best;
}

std::size_t count_nan(const std::vector<double>& values) {
  return static_cast<std::size_t>(
      std::count_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }));
}

}  // namespace sonde::test
