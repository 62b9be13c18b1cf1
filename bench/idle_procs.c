/* idle_procs.c - put N extra idle processes on the node, and take them away again.
 *
 * Usage: idle_procs N [--forkers F] [--no-stdin]
 *
 * Creates exactly N processes (not counting itself) that sleep in pause(), prints
 * "ready N" on stdout once all of them exist, then waits.  It kills every one of
 * them and exits when it receives SIGTERM, SIGINT or SIGHUP, or when its stdin
 * reaches end of file (the parent closed the pipe or died) - unless --no-stdin.
 *
 * Layout: this process (the manager) forks F "forkers"; each forker forks its
 * share of leaves, then pauses itself (forkers count towards N).  F defaults to
 * ceil(N / 500), at most 64, so 10,000 processes are made in well under a second.
 *
 * No strays:
 *  - every forker and leaf lives in one fresh process group G (the first forker's
 *    pid); the manager is outside G, so kill(-G, SIGKILL) removes all of them and
 *    nothing else;
 *  - the manager is a child subreaper (PR_SET_CHILD_SUBREAPER): leaves orphaned by
 *    the death of their forker are re-parented to it, and it reaps until ECHILD, so
 *    no zombie is left either;
 *  - safety net: forkers and leaves set PR_SET_PDEATHSIG(SIGKILL), so if the
 *    manager is killed with SIGKILL the forkers die, and then their leaves.
 *
 * Memory: build it statically (few mappings, small page tables); leaves touch no
 * memory after fork, so each costs only its kernel structures and a few pages.
 * Limits: N + the processes already there must stay below kernel.pid_max and
 * RLIMIT_NPROC (ignored for root); the manager says so if a fork fails.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested = 0;
static void on_stop(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void close_all_fds_from(int lowest) {
  if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0) return;
  long max = sysconf(_SC_OPEN_MAX); /* kernels before 5.9 */
  if (max < 0 || max > 65536) max = 65536;
  for (int fd = lowest; fd < max; ++fd) close(fd);
}

/* In a fresh child: default signal dispositions, nothing blocked, die with the parent. */
static void child_setup(pid_t expected_parent) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGPIPE, &sa, NULL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != expected_parent) _exit(1); /* parent already gone */
}

static void idle_forever(void) {
  for (;;) pause();
}

/* A forker: make `leaves` leaves, report how many were made, then idle. */
static void forker_main(pid_t manager, pid_t group, int report_fd, long leaves) {
  child_setup(manager);
  if (setpgid(0, group) != 0 && getpgrp() != group) _exit(1);
  prctl(PR_SET_NAME, "idle_forker");
  pid_t self = getpid();
  long made = 0;
  for (; made < leaves; ++made) {
    pid_t p = fork();
    if (p < 0) {
      fprintf(stderr, "idle_procs: fork failed after %ld leaves: %s\n", made, strerror(errno));
      break;
    }
    if (p == 0) {
      child_setup(self);
      prctl(PR_SET_NAME, "idle_leaf");
      close_all_fds_from(0);
      idle_forever();
    }
  }
  ssize_t w;
  do w = write(report_fd, &made, sizeof made);
  while (w < 0 && errno == EINTR);
  close_all_fds_from(0);
  idle_forever();
}

static long parse_count(const char* s) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 0) {
    fprintf(stderr, "idle_procs: bad number '%s'\n", s);
    exit(2);
  }
  return v;
}

static pid_t group = 0;
static long reaped = 0;

static void kill_all_and_reap(void) {
  if (group > 0) kill(-group, SIGKILL);
  for (;;) {
    pid_t p = waitpid(-1, NULL, 0);
    if (p > 0) {
      ++reaped;
      continue;
    }
    if (errno == EINTR) continue;
    break; /* ECHILD: nobody left, orphans included (we are their subreaper) */
  }
}

int main(int argc, char** argv) {
  long n = -1, forkers = -1;
  int use_stdin = 1;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--forkers") && i + 1 < argc)
      forkers = parse_count(argv[++i]);
    else if (!strcmp(argv[i], "--no-stdin"))
      use_stdin = 0;
    else if (n < 0 && argv[i][0] != '-')
      n = parse_count(argv[i]);
    else {
      fprintf(stderr, "usage: idle_procs N [--forkers F] [--no-stdin]\n");
      return 2;
    }
  }
  if (n < 0) {
    fprintf(stderr, "usage: idle_procs N [--forkers F] [--no-stdin]\n");
    return 2;
  }
  if (forkers < 0) {
    forkers = (n + 499) / 500;
    if (forkers > 64) forkers = 64;
  }
  if (forkers > n) forkers = n;
  if (n > 0 && forkers < 1) forkers = 1;

  /* Signals stay blocked except while waiting in ppoll. */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);
  sigset_t blocked, old;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGHUP);
  sigprocmask(SIG_BLOCK, &blocked, &old);

  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    perror("idle_procs: PR_SET_CHILD_SUBREAPER");
    return 1;
  }

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    perror("idle_procs: pipe");
    return 1;
  }
  pid_t manager = getpid();
  long base = forkers ? (n - forkers) / forkers : 0, extra = forkers ? (n - forkers) % forkers : 0;
  long started = 0;
  int failed = 0;
  for (long i = 0; i < forkers; ++i) {
    long leaves = base + (i < extra ? 1 : 0);
    pid_t p = fork();
    if (p < 0) {
      fprintf(stderr, "idle_procs: fork of forker %ld failed: %s\n", i, strerror(errno));
      failed = 1;
      break;
    }
    if (p == 0) {
      close(report[0]);
      forker_main(manager, group ? group : getpid(), report[1], leaves);
    }
    if (!group) group = p;
    /* Both sides call setpgid, so G exists before the next forker joins it. */
    if (setpgid(p, group) != 0 && errno != EACCES) {
      fprintf(stderr, "idle_procs: setpgid: %s\n", strerror(errno));
      failed = 1;
      ++started;
      break;
    }
    ++started;
  }
  close(report[1]);

  long made = started;
  for (long i = 0; i < started; ++i) {
    long leaves = 0;
    ssize_t r;
    do r = read(report[0], &leaves, sizeof leaves);
    while (r < 0 && errno == EINTR);
    if (r != (ssize_t)sizeof leaves) { /* a forker died before reporting */
      failed = 1;
      break;
    }
    made += leaves;
  }
  close(report[0]);
  if (failed || made != n) {
    fprintf(stderr,
            "idle_procs: made %ld of %ld processes (pid_max, RLIMIT_NPROC or memory?); "
            "cleaning up\n",
            made, n);
    kill_all_and_reap();
    return 1;
  }
  printf("ready %ld\n", n);
  fflush(stdout);

  /* Wait for a stop signal or end of file on stdin. */
  sigset_t waitmask = old;
  sigdelset(&waitmask, SIGTERM);
  sigdelset(&waitmask, SIGINT);
  sigdelset(&waitmask, SIGHUP);
  char junk[256];
  while (!stop_requested) {
    struct pollfd pfd = {.fd = 0, .events = POLLIN};
    int rc = ppoll(use_stdin ? &pfd : NULL, use_stdin ? 1 : 0, NULL, &waitmask);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (use_stdin && (pfd.revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL))) {
      if (pfd.revents & POLLNVAL) break;
      ssize_t r = read(0, junk, sizeof junk);
      if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) break;
    }
  }
  kill_all_and_reap();
  if (reaped < n) fprintf(stderr, "idle_procs: reaped %ld of %ld processes\n", reaped, n);
  return 0;
}
