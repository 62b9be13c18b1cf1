/* noop: the smallest native collector in plain C (C ABI, no SDK): a constant scalar at every
 * level. Its own work is a function call and one write, so what a tick spends on it beyond the
 * run without it is the plugin boundary's cost (bench/plugin_overhead). */
#include <sonde/plugin.h>

#include <stddef.h>

static void* noop_create(const sonde_host_api* api, const sonde_host* host, char* err,
                         size_t err_size) {
  (void)host;
  (void)err;
  (void)err_size;
  return (void*)api;
}

static void noop_collect(void* self, sonde_level level, const sonde_tick* tick, sonde_out* out) {
  const sonde_host_api* api = (const sonde_host_api*)self;
  (void)level;
  (void)tick;
  api->write_scalar(out, 42.0);
}

static void noop_destroy(void* self) {
  (void)self; /* nothing allocated: self is the host's api table */
}

static const sonde_collector_v1 noop_table = {
    .struct_size = sizeof(sonde_collector_v1),
    .default_entry_yaml = "{inject: [], handler: {_target_: ScalarHandler, column: noop}}",
    .create = noop_create,
    .devices = NULL,
    .snapshot = NULL,
    .collect = noop_collect,
    .destroy = noop_destroy,
};

static const void* noop_capability(uint32_t id) {
  return id == SONDE_CAP_COLLECTOR ? &noop_table : NULL;
}

static const sonde_plugin noop_plugin = {
    .abi_major = SONDE_ABI_MAJOR,
    .abi_minor = SONDE_ABI_MINOR,
    .struct_size = sizeof(sonde_plugin),
    .name = "noop",
    .description = "a constant (bench/plugin_overhead)",
    .priority = 10,
    .capability = noop_capability,
};

SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void) {
  return &noop_plugin;
}
