#include "core/spawn.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include <fmt/format.h>

#include "core/clock.hpp"
#include "core/helper_children.hpp"

extern char** environ;

namespace sonde {
namespace {

// posix_spawn with a step of its own before exec: the child writes itself into its cgroups.
// Between fork and exec the child of a threaded process may only make async-signal-safe calls:
// everything it needs is prepared before the fork; execvpe searches $PATH on the stack.
int fork_program(char* const* args, char* const* env, const SpawnOptions& o, pid_t& pid) {
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) return errno;
  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    ::close(report[0]);
    ::close(report[1]);
    return err;
  }
  if (child == 0) {
    int err = 0;
    for (int fd : o.cgroup_procs)
      if (err == 0 && ::write(fd, "0", 1) != 1) err = errno;
    if (err == 0 && o.own_process_group && ::setpgid(0, 0) != 0) err = errno;
    if (err == 0 && o.stdout_fd >= 0 && ::dup2(o.stdout_fd, 1) < 0) err = errno;
    if (err == 0 && o.stderr_fd >= 0 && ::dup2(o.stderr_fd, 2) < 0) err = errno;
    if (err == 0 && o.stdin_null) {
      const int fd = ::open("/dev/null", O_RDONLY);
      if (fd < 0 || ::dup2(fd, 0) < 0) err = errno;
      if (fd > 0) ::close(fd);
    } else if (err == 0 && o.stdin_fd >= 0 && ::dup2(o.stdin_fd, 0) < 0) {
      err = errno;
    }
    if (err == 0 && o.sigmask) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::sigaction(s, &dfl, nullptr);
      ::sigprocmask(SIG_SETMASK, o.sigmask, nullptr);
    }
    if (err == 0) {
      if (o.program.empty())
        ::execvpe(args[0], args, env);
      else
        ::execve(o.program.c_str(), args, env);
      err = errno;
    }
    (void)!::write(report[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(report[1]);
  int err = 0;
  ssize_t n;
  while ((n = ::read(report[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {  // it did not get to exec: as posix_spawn, no child
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    return err;
  }
  pid = child;
  return 0;
}

}  // namespace

int spawn_program(const std::vector<std::string>& argv, const SpawnOptions& o, pid_t& pid) {
  if (argv.empty()) return EINVAL;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  if (o.env) {
    for (const auto& e : *o.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  char** env = o.env ? envp.data() : environ;
  if (!o.cgroup_procs.empty()) return fork_program(args.data(), env, o, pid);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (o.stdout_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.stdout_fd, 1);
  if (o.stderr_fd >= 0) posix_spawn_file_actions_adddup2(&fa, o.stderr_fd, 2);
  if (o.stdin_null)
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  else if (o.stdin_fd >= 0)
    posix_spawn_file_actions_adddup2(&fa, o.stdin_fd, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  short flags = 0;
  if (o.own_process_group) {
    posix_spawnattr_setpgroup(&attr, 0);
    flags |= POSIX_SPAWN_SETPGROUP;
  }
  if (o.sigmask) {
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) sigaddset(&defaults, s);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, o.sigmask);
    flags |= POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  }
  posix_spawnattr_setflags(&attr, flags);
  const int rc = o.program.empty()
                     ? ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), env)
                     : ::posix_spawn(&pid, o.program.c_str(), &fa, &attr, args.data(), env);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  return rc;
}

Captured run_captured(const std::vector<std::string>& argv, const std::string& program,
                      double timeout_s) {
  Captured c;
  if (argv.empty()) return c;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return c;
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return c;
  }
  SpawnOptions o;
  o.program = program;
  o.stdout_fd = out[1];
  o.stderr_fd = err[1];
  o.stdin_null = true;
  // Its own process group, so that a deadline kills what it started too (they hold the pipes).
  o.own_process_group = true;
  pid_t pid = -1;
  const int rc = program.empty() ? ENOENT : spawn_program(argv, o, pid);
  ::close(out[1]);
  ::close(err[1]);
  if (rc == 0) {
    note_helper_child(pid);
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    int open = 2;
    char buf[4096];
    const double deadline = monotonic_now() + timeout_s;
    bool timed_out = false;
    while (open > 0) {
      const double left = deadline - monotonic_now();
      if (left <= 0) {
        timed_out = true;
        ::kill(-pid, SIGKILL);
        break;
      }
      const int ms = static_cast<int>(std::min(left * 1000 + 1, 60000.0));
      if (::poll(fds, 2, ms) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          std::string& dst = i == 0 ? c.out : c.err;
          if (dst.size() < (std::size_t{1} << 20)) dst.append(buf, static_cast<std::size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          fds[i].fd = -1;
          --open;
        }
      }
    }
    int ws = 0;
    while (::waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    forget_helper_child(pid);
    c.status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
    if (timed_out) {
      c.status = Captured::kTimedOut;
      c.err = fmt::format("{} did not answer within {:g} s", argv[0], timeout_s);
    }
  }
  ::close(out[0]);
  ::close(err[0]);
  return c;
}

}  // namespace sonde
