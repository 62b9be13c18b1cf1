/* sonde-test-mark-c NAME: marks a phase through include/sonde/mark.h (C99, libc only), as a C
 * program would; exits 0 when the mark was written, 3 outside `sonde run`, 1 on an error. */
#include <stdio.h>
#include <string.h>

#include "sonde/mark.h"

int main(int argc, char** argv) {
  int r;
  if (argc != 2) {
    fprintf(stderr, "usage: %s NAME\n", argv[0]);
    return 2;
  }
  r = sonde_mark(argv[1]);
  if (r < 0) {
    perror("sonde_mark");
    return 1;
  }
  return r == 1 ? 0 : 3;
}
