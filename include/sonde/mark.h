/* Marks inside a run, for C and C++ programs: sonde_mark("train") begins the phase "train" of the
 * `sonde run` this process belongs to; the summary and the report show each phase. Header only,
 * libc only: no link to sonde. Outside `sonde run` ($SONDE_MARKS not set) it does nothing and
 * returns 0, so a program marks its phases whether or not it is monitored.
 *
 * A mark is one line "<unix time> <name>\n" appended with one write(2) to the file $SONDE_MARKS
 * names (docs/compare.md, "Marks"). Returns 1 when written, 0 outside `sonde run`, -1 with errno
 * set when the name is empty (EINVAL) or the file cannot be written. Names longer than 200 bytes
 * are cut; sonde replaces control characters and invalid UTF-8. */
#ifndef SONDE_MARK_H
#define SONDE_MARK_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline int sonde_mark(const char* name) {
  const char* path = getenv("SONDE_MARKS");
  char line[256];
  struct timespec now;
  size_t len = name ? strlen(name) : 0;
  int fd, n;
  ssize_t w;
  if (len == 0) {
    errno = EINVAL;
    return -1;
  }
  if (path == NULL || *path == '\0') return 0;
  if (len > 200) len = 200;
  clock_gettime(CLOCK_REALTIME, &now);
  n = snprintf(line, sizeof line, "%lld.%06ld %.*s\n", (long long)now.tv_sec,
               (long)(now.tv_nsec / 1000), (int)len, name);
  if (n < 0 || (size_t)n >= sizeof line) {
    errno = EINVAL;
    return -1;
  }
  fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  do {
    w = write(fd, line, (size_t)n);
  } while (w < 0 && errno == EINTR);
  close(fd);
  return w == n ? 1 : -1;
}

#endif /* SONDE_MARK_H */
