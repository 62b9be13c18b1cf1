/* c_loadavg: the node's load averages as a sonde collector, in plain C99.
 *
 * Raw value: a per-device vector of three entries at the system level, the 1, 5 and 15 minute
 * load averages of /proc/loadavg in that order; no value at the process, user and slurm levels
 * (a load average belongs to the node, not to a set of processes). A collector returns one raw
 * value per level, so the three averages travel as one vector and the default handler,
 * PerDeviceAggregateHandler with prefix `loadavg_`, gives the columns loadavg_0 (1 min),
 * loadavg_1 (5 min), loadavg_2 (15 min) and loadavg_avg, loadavg_min, loadavg_max.
 *
 * Keyword argument: `path` (string, default "/proc/loadavg"), the file to read.
 *
 * Everything crosses the ABI as C types through the host's functions (<sonde/plugin.h>): kwargs
 * are read with api->kwarg_string, values written with api->write_vector, failures reported with
 * api->set_error (that tick's values are then NaN and the failure is counted).
 */
#define _POSIX_C_SOURCE 200809L /* open, read, O_CLOEXEC */

#include <sonde/plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOADAVG_DEFAULT_PATH "/proc/loadavg"
#define LOADAVG_COUNT 3

typedef struct loadavg_collector {
  const sonde_host_api* api;
  const char* path; /* a kwarg string (valid for the life of the instance) or the default */
} loadavg_collector;

/* Parses an unsigned decimal number ("12", "0.52") at *p and advances *p past it. Written by hand
 * rather than with strtod, which follows the process's LC_NUMERIC locale. Returns 0 when *p does
 * not start with a digit. */
static int parse_decimal(const char** p, double* value) {
  const char* s = *p;
  double v = 0.0;
  double scale = 1.0;
  if (*s < '0' || *s > '9') return 0;
  while (*s >= '0' && *s <= '9') v = v * 10.0 + (double)(*s++ - '0');
  if (*s == '.') {
    ++s;
    while (*s >= '0' && *s <= '9') {
      scale /= 10.0;
      v += scale * (double)(*s++ - '0');
    }
  }
  *value = v;
  *p = s;
  return 1;
}

/* Parses the text of /proc/loadavg ("0.52 0.58 0.59 1/467 12345"). On failure returns 0 and
 * writes why, naming `path`, into err. */
static int parse_loadavg(const char* text, const char* path, double values[LOADAVG_COUNT],
                         char* err, size_t err_size) {
  const char* p = text;
  int i;
  for (i = 0; i < LOADAVG_COUNT; ++i) {
    while (*p == ' ' || *p == '\t') ++p;
    if (!parse_decimal(&p, &values[i])) {
      snprintf(err, err_size, "%s: expected three load averages, found \"%.40s\"", path, text);
      return 0;
    }
  }
  return 1;
}

/* Reads and parses `path`. On failure returns 0 and writes why into err. The file is opened
 * close-on-exec: sonde starts child processes from other threads while collectors run. */
static int read_loadavg(const char* path, double values[LOADAVG_COUNT], char* err,
                        size_t err_size) {
  char text[256];
  ssize_t n;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, err_size, "cannot open %s: %s", path, strerror(errno));
    return 0;
  }
  do {
    n = read(fd, text, sizeof text - 1);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    snprintf(err, err_size, "cannot read %s: %s", path, strerror(errno));
    close(fd);
    return 0;
  }
  close(fd);
  text[n] = '\0';
  return parse_loadavg(text, path, values, err, err_size);
}

static void* loadavg_create(const sonde_host_api* api, const sonde_host* host, char* err,
                            size_t err_size) {
  const char* path = LOADAVG_DEFAULT_PATH;
  double values[LOADAVG_COUNT];
  loadavg_collector* self;
  /* A host of ABI major 1 has every function used here; api->struct_size and api->abi_minor only
   * matter for functions that a later minor version adds. */
  switch (api->kwarg_string(host, "path", &path)) {
    case 1: break;
    case 0: path = LOADAVG_DEFAULT_PATH; break;
    default: snprintf(err, err_size, "keyword argument 'path': expected a string"); return NULL;
  }
  /* Unreadable here (no procfs in this container?): the collector is unavailable, which sonde
   * reports without failing the run. */
  if (!read_loadavg(path, values, err, err_size)) return NULL;

  self = (loadavg_collector*)calloc(1, sizeof *self);
  if (self == NULL) {
    snprintf(err, err_size, "out of memory");
    return NULL;
  }
  self->api = api;
  self->path = path;
  return self;
}

static int64_t loadavg_devices(void* self, sonde_level level) {
  (void)self;
  return level == SONDE_LEVEL_SYSTEM ? LOADAVG_COUNT : -1;
}

static void loadavg_collect(void* self_, sonde_level level, const sonde_tick* tick,
                            sonde_out* out) {
  const loadavg_collector* self = (const loadavg_collector*)self_;
  double values[LOADAVG_COUNT];
  char err[512];
  (void)level; /* only called for the system level: devices() is -1 elsewhere */
  (void)tick;
  if (read_loadavg(self->path, values, err, sizeof err))
    self->api->write_vector(out, values, LOADAVG_COUNT);
  else
    self->api->set_error(out, err);
}

static void loadavg_destroy(void* self) {
  free(self);
}

static const sonde_collector_v1 loadavg_table = {
    .struct_size = sizeof(sonde_collector_v1),
    .default_entry_yaml =
        "{inject: [], handler: {_target_: PerDeviceAggregateHandler, prefix: loadavg_}}",
    .create = loadavg_create,
    .devices = loadavg_devices,
    .snapshot = NULL, /* no shared per-tick work */
    .collect = loadavg_collect,
    .destroy = loadavg_destroy,
};

static const void* loadavg_capability(uint32_t id) {
  return id == SONDE_CAP_COLLECTOR ? &loadavg_table : NULL;
}

static const sonde_plugin loadavg_plugin = {
    .abi_major = SONDE_ABI_MAJOR,
    .abi_minor = SONDE_ABI_MINOR,
    .struct_size = sizeof(sonde_plugin),
    .name = "loadavg",
    .description = "load averages of the node (1, 5, 15 min) from /proc/loadavg",
    .priority = 10,
    .capability = loadavg_capability,
};

SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void) {
  return &loadavg_plugin;
}
