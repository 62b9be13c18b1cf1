/* floor.c - the reference cost of reading /proc naively.
 *
 * Each tick: list /proc with readdir, and for every numeric entry open, read
 * (one read(2) into a 4 KiB buffer) and close /proc/<pid>/stat,
 * /proc/<pid>/statm and /proc/<pid>/io.  Nothing is parsed.  Ticks run on an
 * absolute CLOCK_MONOTONIC schedule; a tick that overruns the interval is
 * followed immediately by the next one (no tick is skipped).
 *
 * The CPU time per tick is getrusage(RUSAGE_SELF) utime+stime, measured from
 * the end of the warm-up ticks (default 1: the first tick creates the kernel's
 * dentries and inodes for every /proc/<pid>, which later ticks reuse) to the
 * end of the last tick, divided by the number of measured ticks.
 *
 * Output: one line of key=value pairs on stdout, e.g.
 *   floor ticks=200 warmup=1 interval=0.05 pids=1072 files_per_tick=3216 cpu_us_per_tick=31234.5
 *         cpu_us_per_pid=29.13 wall_us_per_tick=31890.2 late_ticks=0
 *
 * Usage: floor [--ticks N] [--interval S] [--warmup N] [--once]
 *              [--with-system-files] [--read-to-eof] [--stat-only] [--times FILE]
 *   --once               one tick, no warm-up: the cost of a one-shot scan
 *   --with-system-files  also read /proc/stat, /proc/meminfo, /proc/diskstats
 *                        and /proc/net/dev each tick (what a system level adds)
 *   --read-to-eof        read each file until read(2) returns 0 (stdio-style),
 *                        instead of a single read
 *   --stat-only          read only /proc/<pid>/stat of every pid (the least a
 *                        per-process path reads: bench/run_cgroup)
 *   --times FILE         after the run, write the CLOCK_MONOTONIC start time of
 *                        every tick (warm-up included), one per line in seconds,
 *                        to FILE (kept in memory while running: sampling fidelity)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const char* const per_pid_files[] = {"stat", "statm", "io"};
static const char* const system_files[] = {"/proc/stat", "/proc/meminfo", "/proc/diskstats",
                                           "/proc/net/dev"};

static int read_to_eof = 0;
static size_t per_pid_count = sizeof per_pid_files / sizeof *per_pid_files;
static char buf[4096];

static long read_file(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1; /* vanished or not permitted: normal */
  long total = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    total += n;
    if (!read_to_eof) break;
  }
  close(fd);
  return total;
}

static int is_pid_name(const char* s) {
  if (*s < '1' || *s > '9') return 0;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* One tick. Returns the number of pids seen; adds the files read to *files. */
static long tick(int with_system, long* files) {
  long pids = 0;
  char path[300];
  if (with_system)
    for (size_t i = 0; i < sizeof system_files / sizeof *system_files; ++i)
      if (read_file(system_files[i]) >= 0) ++*files;
  DIR* d = opendir("/proc");
  if (!d) {
    perror("floor: opendir /proc");
    exit(1);
  }
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (!is_pid_name(e->d_name)) continue;
    ++pids;
    for (size_t i = 0; i < per_pid_count; ++i) {
      snprintf(path, sizeof path, "/proc/%s/%s", e->d_name, per_pid_files[i]);
      if (read_file(path) >= 0) ++*files;
    }
  }
  closedir(d);
  return pids;
}

static double cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
         (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static double mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void usage(void) {
  fprintf(stderr,
          "usage: floor [--ticks N] [--interval S] [--warmup N] [--once] "
          "[--with-system-files] [--read-to-eof] [--stat-only] [--times FILE]\n");
  exit(2);
}

int main(int argc, char** argv) {
  long ticks = 100, warmup = 1;
  double interval = 0.05;
  int once = 0, with_system = 0;
  const char* times_path = NULL;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--ticks") && i + 1 < argc)
      ticks = atol(argv[++i]);
    else if (!strcmp(a, "--interval") && i + 1 < argc)
      interval = atof(argv[++i]);
    else if (!strcmp(a, "--warmup") && i + 1 < argc)
      warmup = atol(argv[++i]);
    else if (!strcmp(a, "--once"))
      once = 1;
    else if (!strcmp(a, "--with-system-files"))
      with_system = 1;
    else if (!strcmp(a, "--read-to-eof"))
      read_to_eof = 1;
    else if (!strcmp(a, "--stat-only"))
      per_pid_count = 1; /* per_pid_files[0] is "stat" */
    else if (!strcmp(a, "--times") && i + 1 < argc)
      times_path = argv[++i];
    else
      usage();
  }
  if (once) {
    ticks = 1;
    warmup = 0;
  }
  if (ticks < 1 || warmup < 0 || !(interval > 0)) usage();
  double* starts = NULL;
  if (times_path) {
    starts = calloc((size_t)(warmup + ticks), sizeof *starts);
    if (!starts) {
      perror("floor: calloc");
      return 1;
    }
  }

  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  long long step_ns = (long long)(interval * 1e9 + 0.5);
  double cpu0 = cpu_us(), busy_us = 0;
  long pids = 0, files = 0, late = 0;
  for (long t = 0; t < warmup + ticks; ++t) {
    if (t == warmup) {
      cpu0 = cpu_us();
      busy_us = 0;
      files = 0;
    }
    double start = mono_us();
    if (starts) starts[t] = start;
    pids = tick(with_system, &files);
    busy_us += mono_us() - start;
    if (t + 1 == warmup + ticks) break;
    long long ns = next.tv_nsec + step_ns;
    next.tv_sec += (time_t)(ns / 1000000000LL);
    next.tv_nsec = (long)(ns % 1000000000LL);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
      if (t >= warmup) ++late;
      continue; /* overran: the next tick starts now, none is skipped */
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) == EINTR) {
    }
  }
  double cpu = cpu_us() - cpu0;
  printf(
      "floor ticks=%ld warmup=%ld interval=%g pids=%ld files_per_tick=%ld cpu_us_per_tick=%.1f "
      "cpu_us_per_pid=%.2f wall_us_per_tick=%.1f late_ticks=%ld\n",
      ticks, warmup, interval, pids, files / ticks, cpu / (double)ticks,
      pids ? cpu / (double)ticks / (double)pids : 0.0, busy_us / (double)ticks, late);
  if (starts) {
    FILE* f = fopen(times_path, "w");
    if (!f) {
      perror("floor: --times");
      return 1;
    }
    for (long t = 0; t < warmup + ticks; ++t) fprintf(f, "%.6f\n", starts[t] / 1e6);
    fclose(f);
    free(starts);
  }
  return 0;
}
