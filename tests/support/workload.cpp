// sonde-test-workload: a small program with known behaviour for the integration tests. It uses
// only libc and the standard library (no sonde code), so that what it does is easy to check.
//
// Modes (argv):
//   burn SECONDS          spin one thread until the process used SECONDS of CPU time
//   hold MIB SECONDS      allocate and touch MIB MiB, print "ready", sleep SECONDS
//   outsider MIB SECONDS  same as hold (a same-uid process outside the monitored tree)
//   write MIB PATH        sleep 0.5 s, write MIB MiB to PATH in 1 MiB chunks, fsync, sleep 0.5 s
//   spawn N MS            sleep 0.3 s, fork N children one after the other, each burning MS ms
//                         of its own CPU time, sleep 0.3 s
//   orphans N MS          sleep 0.3 s, then N times: fork a child that forks a grandchild and
//                         exits at once (the grandchild is orphaned: `sonde run` adopts it),
//                         the grandchild burns MS ms and exits; the next one starts when it has
//                         exited; sleep 0.3 s. Each grandchild writes its own rusage line too
//   zombies N MS HOLD     fork N children at once, each burning MS ms; leave them zombies for
//                         HOLD s, reap them all and exit at once (their time reaches the
//                         parent's cutime only at the end)
//   pinned CPU_A A CPU_B B  two threads: the main one pinned to CPU_A burns A s of its own CPU
//                         time, a second one pinned to CPU_B burns B s and exits; then the
//                         main thread waits 0.5 s (so that the exited thread's time is in an
//                         interval where the main thread still runs)
//   share PATH MIB N SECONDS  write a MIB MiB file at PATH, fork N children that each map it
//                         shared and read every page, print "ready" once all have, sleep
//                         SECONDS (shared pages: RSS counts them N times, Pss once)
//   cow MIB SECONDS       allocate and touch MIB MiB, fork one child that only reads them
//                         (copy-on-write: both map the same pages), print "ready", sleep SECONDS
//   exit CODE             exit with CODE
//   kill SIGNUM           raise SIGNUM on itself with the default action
//   sleep SECONDS         sleep
//   trap FILE SECONDS     on SIGINT/SIGTERM/SIGHUP append "INT"/"TERM"/"HUP" and a newline to
//                         FILE, then exit 100+signum (of the first signal) after a short grace
//                         period that records duplicates; exit 0 if no signal came in SECONDS.
//                         Prints "ready" once the handlers are installed.
//   reap PROGRAM ARGS...  run PROGRAM, wait for it and exit with its status (with
//                         $SONDE_WORKLOAD_RUSAGE its rusage line has the program's whole CPU
//                         time: e.g. a `sonde agent` placed in a cgroup by the test)
//
// $SONDE_WORKLOAD_RUSAGE=FILE: at exit, append "MODE CPU_SECONDS" to FILE, the process' own
// getrusage (self and reaped children, µs): a test's truth that does not depend on how fast the
// machine is (touching memory on a fresh VM costs CPU too).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

constexpr int kUsageExit = 2;
constexpr std::size_t kMiB = 1024 * 1024;

int usage(const char* argv0, const char* why) {
  std::fprintf(stderr,
               "%s: %s\n"
               "usage: %s MODE ARGS...\n"
               "  burn SECONDS          spin on CPU for SECONDS of process CPU time\n"
               "  hold MIB SECONDS      allocate and touch MIB MiB, sleep SECONDS\n"
               "  outsider MIB SECONDS  same as hold\n"
               "  write MIB PATH        write MIB MiB to PATH (1 MiB chunks), fsync\n"
               "  spawn N MS            fork N children in turn, each burning MS ms of CPU\n"
               "  orphans N MS          N orphaned grandchildren in turn, each burning MS ms\n"
               "  zombies N MS HOLD     N children burning MS ms, reaped after HOLD s\n"
               "  pinned CPU_A A CPU_B B  threads pinned to two CPUs burn A and B s\n"
               "  share PATH MIB N SECONDS  N children map one MIB MiB file, SECONDS\n"
               "  cow MIB SECONDS       MIB MiB shared copy-on-write with a forked child\n"
               "  exit CODE             exit with CODE (0..255)\n"
               "  kill SIGNUM           raise SIGNUM on itself\n"
               "  sleep SECONDS         sleep SECONDS\n"
               "  trap FILE SECONDS     record SIGINT/SIGTERM/SIGHUP in FILE, exit 100+signum\n"
               "  reap PROGRAM ARGS...  run PROGRAM, wait for it, exit with its status\n",
               argv0, why, argv0);
  return kUsageExit;
}

std::optional<double> parse_seconds(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v) || v < 0)
    return std::nullopt;
  return v;
}

std::optional<long> parse_int(std::string_view s, long lo, long hi) {
  long v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) return std::nullopt;
  return v;
}

double clock_s(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Sleeps for the whole duration even when signal handlers interrupt nanosleep.
void sleep_s(double seconds) {
  const double until = clock_s(CLOCK_MONOTONIC) + seconds;
  for (;;) {
    const double left = until - clock_s(CLOCK_MONOTONIC);
    if (left <= 0) return;
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(left);
    ts.tv_nsec = static_cast<long>((left - static_cast<double>(ts.tv_sec)) * 1e9);
    nanosleep(&ts, nullptr);
  }
}

// Spins until this process has used `seconds` of CPU time (a fresh child starts at 0).
void burn_cpu(double seconds) {
  const double start = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  volatile std::uint64_t sink = 0;
  while (clock_s(CLOCK_PROCESS_CPUTIME_ID) - start < seconds) {
    for (int i = 0; i < 10000; ++i) sink = sink * 6364136223846793005ULL + 1442695040888963407ULL;
  }
}

// Spins until the calling thread has used `seconds` of CPU time.
void burn_thread_cpu(double seconds) {
  const double start = clock_s(CLOCK_THREAD_CPUTIME_ID);
  volatile std::uint64_t sink = 0;
  while (clock_s(CLOCK_THREAD_CPUTIME_ID) - start < seconds) {
    for (int i = 0; i < 10000; ++i) sink = sink * 6364136223846793005ULL + 1442695040888963407ULL;
  }
}

bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;  // 0: the calling thread
}

int mode_pinned(int cpu_a, double a, int cpu_b, double b) {
  if (!pin_to(cpu_a)) {
    std::fprintf(stderr, "workload: cannot pin to CPU %d: %s\n", cpu_a, std::strerror(errno));
    return 1;
  }
  bool ok = true;
  std::thread other([&] {
    ok = pin_to(cpu_b);
    if (ok) burn_thread_cpu(b);
  });
  burn_thread_cpu(a);
  other.join();
  if (!ok) {
    std::fprintf(stderr, "workload: cannot pin to CPU %d\n", cpu_b);
    return 1;
  }
  sleep_s(0.5);
  return 0;
}

void say_ready() {
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
}

int mode_burn(double seconds) {
  burn_cpu(seconds);
  return 0;
}

int mode_hold(long mib, double seconds) {
  const std::size_t bytes = static_cast<std::size_t>(mib) * kMiB;
  void* mem = bytes
                  ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                  : nullptr;
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "workload: mmap of %ld MiB failed: %s\n", mib, std::strerror(errno));
    return 1;
  }
  if (bytes) std::memset(mem, 0x5a, bytes);
  say_ready();
  sleep_s(seconds);
  if (bytes) {
    // Read the memory back so that nothing can treat the pages as unused.
    volatile unsigned char check = static_cast<unsigned char*>(mem)[bytes - 1];
    (void)check;
    munmap(mem, bytes);
  }
  return 0;
}

int mode_write(long mib, const char* path) {
  sleep_s(0.5);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    std::fprintf(stderr, "workload: cannot open %s: %s\n", path, std::strerror(errno));
    return 1;
  }
  std::string chunk(kMiB, 'w');
  for (long i = 0; i < mib; ++i) {
    std::size_t done = 0;
    while (done < chunk.size()) {
      const ssize_t n = write(fd, chunk.data() + done, chunk.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::fprintf(stderr, "workload: write to %s failed: %s\n", path, std::strerror(errno));
        close(fd);
        return 1;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    std::fprintf(stderr, "workload: fsync/close of %s failed: %s\n", path, std::strerror(errno));
    return 1;
  }
  sleep_s(0.5);
  return 0;
}

int mode_spawn(long n, long ms) {
  sleep_s(0.3);
  for (long i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "workload: fork failed: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      burn_cpu(static_cast<double>(ms) / 1000.0);
      _exit(0);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "workload: child %d failed (status %d)\n", static_cast<int>(pid),
                   status);
      return 1;
    }
  }
  sleep_s(0.3);
  return 0;
}

int mode_orphans(long n, long ms) {
  sleep_s(0.3);
  for (long i = 0; i < n; ++i) {
    int done[2];
    if (pipe(done) != 0) return 1;
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      close(done[0]);
      if (fork() == 0) {
        burn_cpu(static_cast<double>(ms) / 1000.0);
        std::exit(0);  // writes its rusage line; the pipe closes when it is gone
      }
      _exit(0);
    }
    close(done[1]);
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    char c = 0;
    while (read(done[0], &c, 1) != 0 && errno == EINTR) {
    }
    close(done[0]);
  }
  sleep_s(0.3);
  return 0;
}

int mode_zombies(long n, long ms, double hold) {
  for (long i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      burn_cpu(static_cast<double>(ms) / 1000.0);
      _exit(0);
    }
  }
  sleep_s(hold);
  for (long i = 0; i < n; ++i)
    while (wait(nullptr) < 0 && errno == EINTR) {
    }
  return 0;
}

// Reads one byte per page of [p, p + bytes) so that every page is resident and mapped.
unsigned touch_read(const void* p, std::size_t bytes) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  unsigned sum = 0;
  for (std::size_t off = 0; off < bytes; off += page)
    sum += static_cast<const volatile unsigned char*>(p)[off];
  return sum;
}

// Waits for `pid`; false (with a message) unless it exited 0.
bool reap_ok(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  std::fprintf(stderr, "workload: child %d failed (status %d)\n", static_cast<int>(pid), status);
  return false;
}

int mode_share(const char* path, long mib, long n, double seconds) {
  const std::size_t bytes = static_cast<std::size_t>(mib) * kMiB;
  const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::fprintf(stderr, "workload: cannot create %s: %s\n", path, std::strerror(errno));
    return 1;
  }
  // Written through write(2), not a hole: the pages are the file's, in the page cache.
  std::string chunk(kMiB, 's');
  for (long i = 0; i < mib; ++i)
    if (pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(i) * static_cast<off_t>(kMiB)) !=
        static_cast<ssize_t>(chunk.size())) {
      std::fprintf(stderr, "workload: write to %s failed: %s\n", path, std::strerror(errno));
      return 1;
    }
  int ready[2];
  if (pipe(ready) != 0) return 1;
  std::vector<pid_t> children;
  for (long i = 0; i < n; ++i) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::fprintf(stderr, "workload: fork failed: %s\n", std::strerror(errno));
      return 1;
    }
    if (pid == 0) {
      close(ready[0]);
      void* mem = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (mem == MAP_FAILED) _exit(1);
      (void)touch_read(mem, bytes);
      (void)!write(ready[1], "r", 1);
      sleep_s(seconds);
      (void)touch_read(mem, bytes);
      _exit(0);
    }
    children.push_back(pid);
  }
  close(ready[1]);
  char c = 0;
  for (long got = 0; got < n && read(ready[0], &c, 1) == 1;) ++got;
  say_ready();
  bool ok = true;
  for (pid_t pid : children) ok = reap_ok(pid) && ok;
  close(fd);
  unlink(path);
  return ok ? 0 : 1;
}

int mode_cow(long mib, double seconds) {
  const std::size_t bytes = static_cast<std::size_t>(mib) * kMiB;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::fprintf(stderr, "workload: mmap of %ld MiB failed: %s\n", mib, std::strerror(errno));
    return 1;
  }
  std::memset(mem, 0x5a, bytes);
  const pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    (void)touch_read(mem, bytes);  // reads only: the pages stay shared with the parent
    sleep_s(seconds);
    (void)touch_read(mem, bytes);
    _exit(0);
  }
  say_ready();
  sleep_s(seconds);
  (void)touch_read(mem, bytes);
  return reap_ok(pid) ? 0 : 1;
}

int mode_kill(long signum) {
  // No core files from the test suite.
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  const int sig = static_cast<int>(signum);
  signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  std::fprintf(stderr, "workload: signal %d did not terminate the process\n", sig);
  return 1;
}

// State of the trap mode, touched by the signal handler (async-signal-safe only).
volatile sig_atomic_t g_first_signal = 0;
int g_trap_fd = -1;

void trap_handler(int sig) {
  const char* name = sig == SIGINT ? "INT\n" : sig == SIGTERM ? "TERM\n" : "HUP\n";
  const int saved = errno;
  (void)!write(g_trap_fd, name, std::strlen(name));
  errno = saved;
  if (g_first_signal == 0) g_first_signal = sig;
}

int mode_trap(const char* path, double seconds) {
  g_trap_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (g_trap_fd < 0) {
    std::fprintf(stderr, "workload: cannot open %s: %s\n", path, std::strerror(errno));
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = trap_handler;
  sigfillset(&sa.sa_mask);  // one handler at a time: lines never interleave
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  say_ready();

  const double deadline = clock_s(CLOCK_MONOTONIC) + seconds;
  while (g_first_signal == 0 && clock_s(CLOCK_MONOTONIC) < deadline) {
    timespec ts{0, 10'000'000};
    nanosleep(&ts, nullptr);
  }
  if (g_first_signal == 0) return 0;
  // Stay a little longer so that a duplicate delivery would be recorded too.
  sleep_s(0.3);
  close(g_trap_fd);
  return 100 + g_first_signal;
}

}  // namespace

namespace {
std::string g_rusage_mode;

void write_rusage() {
  const char* path = std::getenv("SONDE_WORKLOAD_RUSAGE");
  if (path == nullptr || *path == '\0') return;
  double cpu = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    rusage ru{};
    getrusage(who, &ru);
    cpu += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
  }
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %.6f\n", g_rusage_mode.c_str(), cpu);
    std::fclose(f);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const char* argv0 = argc > 0 ? argv[0] : "sonde-test-workload";
  if (argc < 2) return usage(argv0, "missing MODE");
  const std::string_view mode = argv[1];
  g_rusage_mode = std::string(mode);
  std::atexit(write_rusage);
  auto want_args = [&](int n) { return argc == 2 + n; };

  if (mode == "burn" && want_args(1)) {
    const auto s = parse_seconds(argv[2]);
    if (!s) return usage(argv0, "burn: SECONDS must be a non-negative number");
    return mode_burn(*s);
  }
  if ((mode == "hold" || mode == "outsider") && want_args(2)) {
    const auto mib = parse_int(argv[2], 0, 1L << 20);
    const auto s = parse_seconds(argv[3]);
    if (!mib || !s) return usage(argv0, "hold/outsider: expected MIB (integer) and SECONDS");
    return mode_hold(*mib, *s);
  }
  if (mode == "write" && want_args(2)) {
    const auto mib = parse_int(argv[2], 0, 1L << 20);
    if (!mib || argv[3][0] == '\0') return usage(argv0, "write: expected MIB (integer) and PATH");
    return mode_write(*mib, argv[3]);
  }
  if (mode == "spawn" && want_args(2)) {
    const auto n = parse_int(argv[2], 0, 1'000'000);
    const auto ms = parse_int(argv[3], 0, 3'600'000);
    if (!n || !ms) return usage(argv0, "spawn: expected N and MS (integers)");
    return mode_spawn(*n, *ms);
  }
  if (mode == "orphans" && want_args(2)) {
    const auto n = parse_int(argv[2], 0, 100'000);
    const auto ms = parse_int(argv[3], 0, 3'600'000);
    if (!n || !ms) return usage(argv0, "orphans: expected N and MS (integers)");
    return mode_orphans(*n, *ms);
  }
  if (mode == "zombies" && want_args(3)) {
    const auto n = parse_int(argv[2], 0, 10'000);
    const auto ms = parse_int(argv[3], 0, 3'600'000);
    const auto hold = parse_seconds(argv[4]);
    if (!n || !ms || !hold) return usage(argv0, "zombies: expected N, MS (integers) and HOLD");
    return mode_zombies(*n, *ms, *hold);
  }
  if (mode == "pinned" && want_args(4)) {
    const auto cpu_a = parse_int(argv[2], 0, 4095);
    const auto a = parse_seconds(argv[3]);
    const auto cpu_b = parse_int(argv[4], 0, 4095);
    const auto b = parse_seconds(argv[5]);
    if (!cpu_a || !a || !cpu_b || !b) return usage(argv0, "pinned: expected CPU_A A CPU_B B");
    return mode_pinned(static_cast<int>(*cpu_a), *a, static_cast<int>(*cpu_b), *b);
  }
  if (mode == "share" && want_args(4)) {
    const auto mib = parse_int(argv[3], 1, 1L << 20);
    const auto n = parse_int(argv[4], 1, 1024);
    const auto s = parse_seconds(argv[5]);
    if (argv[2][0] == '\0' || !mib || !n || !s)
      return usage(argv0, "share: expected PATH, MIB and N (integers) and SECONDS");
    return mode_share(argv[2], *mib, *n, *s);
  }
  if (mode == "cow" && want_args(2)) {
    const auto mib = parse_int(argv[2], 1, 1L << 20);
    const auto s = parse_seconds(argv[3]);
    if (!mib || !s) return usage(argv0, "cow: expected MIB (integer) and SECONDS");
    return mode_cow(*mib, *s);
  }
  if (mode == "exit" && want_args(1)) {
    const auto code = parse_int(argv[2], 0, 255);
    if (!code) return usage(argv0, "exit: CODE must be an integer in 0..255");
    return static_cast<int>(*code);
  }
  if (mode == "kill" && want_args(1)) {
    const auto sig = parse_int(argv[2], 1, 64);
    if (!sig) return usage(argv0, "kill: SIGNUM must be an integer in 1..64");
    return mode_kill(*sig);
  }
  if (mode == "sleep" && want_args(1)) {
    const auto s = parse_seconds(argv[2]);
    if (!s) return usage(argv0, "sleep: SECONDS must be a non-negative number");
    sleep_s(*s);
    return 0;
  }
  if (mode == "reap" && argc >= 3) {
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      execvp(argv[2], argv + 2);
      _exit(127);
    }
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  if (mode == "trap" && want_args(2)) {
    const auto s = parse_seconds(argv[3]);
    if (argv[2][0] == '\0' || !s) return usage(argv0, "trap: expected FILE and SECONDS");
    return mode_trap(argv[2], *s);
  }
  return usage(argv0, "unknown MODE or wrong number of arguments");
}
