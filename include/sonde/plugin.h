/* sonde native plugin ABI (plain C; usable from C and C++).
 *
 * A plugin is a shared library that exports one function, `sonde_plugin_entry`, returning a
 * pointer to a const, static `sonde_plugin` table. The host checks `abi_major` (must equal
 * SONDE_ABI_MAJOR) and `struct_size`, then asks for capabilities by id (SONDE_CAP_COLLECTOR gives a
 * `sonde_collector_v1`). New hooks get new capability ids; existing structs never change, they only
 * grow at the end (use `struct_size` to tell which fields exist), so an old plugin keeps working
 * with a newer host of the same major version.
 *
 * Nothing but C types crosses the boundary: values are read through host functions
 * (`sonde_host_api`) and written through host functions; a plugin must not throw or longjmp out of
 * any function. Strings passed by the host are valid for the duration of the call only unless said
 * otherwise. All functions of one collector instance are called from one thread at a time.
 */
#ifndef SONDE_PLUGIN_H
#define SONDE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SONDE_ABI_MAJOR 1u
#define SONDE_ABI_MINOR 2u /* 1.1: SONDE_CAP_STATUS; 1.2: sonde_status_v1.host_processes */

/** Name of the exported entry function. */
#define SONDE_PLUGIN_ENTRY_NAME "sonde_plugin_entry"

/** Capability ids for sonde_plugin.capability(). */
#define SONDE_CAP_COLLECTOR 1u
#define SONDE_CAP_STATUS 2u /**< sonde_status_v1 (ABI 1.1) */

/** Levels: docs/configuration.md (`levels`) and docs/tour.md. */
typedef enum sonde_level {
  SONDE_LEVEL_PROCESS = 0,
  SONDE_LEVEL_USER = 1,
  SONDE_LEVEL_SLURM = 2,
  SONDE_LEVEL_SYSTEM = 3
} sonde_level;

/** Opaque host objects. */
typedef struct sonde_host sonde_host; /**< one collector instance's configuration */
typedef struct sonde_tick sonde_tick; /**< one tick's context */
typedef struct sonde_out sonde_out;   /**< where one collect call writes its raw value */

/** One process of a level at this tick (from the engine's single /proc scan). */
typedef struct sonde_pid_info {
  uint32_t struct_size; /**< sizeof(sonde_pid_info) of the host */
  int32_t pid;
  int32_t ppid;
  uint32_t uid;             /**< real uid */
  double cpu_s;             /**< utime + stime, seconds */
  double child_cpu_s;       /**< cutime + cstime, seconds */
  double cpu_delta_s;       /**< own CPU seconds since the previous tick */
  double child_cpu_delta_s; /**< growth of child_cpu_s since the previous tick */
  uint64_t rss_bytes;       /**< resident set size, bytes */
  int32_t io_valid;         /**< 1 when the io fields below were readable */
  int32_t processor;        /**< CPU last run on */
  uint64_t read_bytes;      /**< storage bytes read, cumulative */
  uint64_t write_bytes;     /**< storage bytes written, cumulative */
  uint64_t syscr;           /**< read syscalls, cumulative */
  uint64_t syscw;           /**< write syscalls, cumulative */
  int64_t num_threads;
  const char* comm; /**< command name, valid during the call */
} sonde_pid_info;

/** What the node and the target may use (given only to collectors that inject node_info). */
typedef struct sonde_node_info {
  uint32_t struct_size;
  int32_t num_system_cpus;
  double num_cpus;            /**< CPUs available to the target (affinity, cgroup quota) */
  const int32_t* cpu_handles; /**< CPU ids the target may run on */
  size_t num_cpu_handles;
  uint64_t mem_total_bytes;
  uint64_t memory_limit_bytes[4]; /**< per sonde_level */
  int32_t num_gpus;
  const char* gpu_name; /**< "" when there is no GPU */
  double gpu_memory_gib;
  const char* hostname;
} sonde_node_info;

/** Functions the host gives to a plugin. Valid for the life of the collector instance. */
typedef struct sonde_host_api {
  uint32_t struct_size; /**< sizeof(sonde_host_api) of the host */
  uint32_t abi_minor;   /**< the host's SONDE_ABI_MINOR */

  /* Keyword arguments of the collector's YAML entry. Return 1 when found, 0 when absent, -1 when
   * present with another type. Strings stay valid for the life of the instance. */
  int (*kwarg_string)(const sonde_host* host, const char* key, const char** value);
  int (*kwarg_number)(const sonde_host* host, const char* key, double* value);
  int (*kwarg_bool)(const sonde_host* host, const char* key, int* value);
  /** Length of a list of strings, or -1 when absent or not such a list. */
  int64_t (*kwarg_list_size)(const sonde_host* host, const char* key);
  const char* (*kwarg_list_item)(const sonde_host* host, const char* key, size_t index);

  /* Injected values (docs/configuration.md "Inject keys"); only what the YAML entry's `inject`
     asked for. */
  int (*injected)(const sonde_host* host, const char* key);    /**< 1 when `key` was asked for */
  const sonde_node_info* (*node_info)(const sonde_host* host); /**< NULL unless node_info */
  int32_t (*target_pid)(const sonde_host* host);               /**< 0 without a target */
  uint32_t (*target_uid)(const sonde_host* host);
  const char* (*slurm_job)(const sonde_host* host); /**< NULL outside a Slurm job */
  /** Writes a line to sonde's log, prefixed with the collector's name. severity: 0 info, 1 warning.
   */
  void (*log)(const sonde_host* host, int severity, const char* message);

  /* The tick's context. */
  uint64_t (*tick_index)(const sonde_tick* tick);
  double (*tick_time_s)(const sonde_tick* tick);      /**< CLOCK_MONOTONIC seconds */
  double (*tick_wallclock_s)(const sonde_tick* tick); /**< epoch seconds */
  double (*tick_dt_s)(const sonde_tick* tick); /**< since the previous tick, 0 at the first */
  size_t (*level_size)(const sonde_tick* tick, sonde_level level); /**< pids in the level */
  /** The index-th pid of a level (not the system level: use total_pids). */
  const sonde_pid_info* (*level_pid)(const sonde_tick* tick, sonde_level level, size_t index);
  size_t (*total_pids)(const sonde_tick* tick); /**< every pid on the node */

  /* The raw value of one collect call: call exactly one writer (the last call wins). */
  void (*write_scalar)(sonde_out* out, double value);
  void (*write_vector)(sonde_out* out, const double* values, size_t count);
  /** `num_metrics` vectors of `count` values each, in the handler's metric order. */
  void (*write_vectors)(sonde_out* out, const double* const* vectors, size_t num_metrics,
                        size_t count);
  void (*write_counters)(sonde_out* out, const double* values, size_t count);
  void (*write_none)(sonde_out* out);
  /** Marks this collect as failed: the tick's values are NaN and the failure is counted. */
  void (*set_error)(sonde_out* out, const char* message);

  void* reserved[16];
} sonde_host_api;

/** Capability SONDE_CAP_COLLECTOR. */
typedef struct sonde_collector_v1 {
  uint32_t struct_size; /**< sizeof(sonde_collector_v1) of the plugin */
  /** YAML used when the plugin is found in a plugin directory without a `collectors:` entry,
   * e.g. "{handler: {_target_: ScalarHandler, column: load1}, inject: []}". May be NULL. */
  const char* default_entry_yaml;
  /** Creates an instance. On failure returns NULL and writes why into err (the collector is then
   * "unavailable", which is not an error of the run). */
  void* (*create)(const sonde_host_api* api, const sonde_host* host, char* err, size_t err_size);
  /** Entries of per-device values at a level (1 for scalars and counters); -1 when the collector
   * has no value at this level. May be NULL: 1 at every level. */
  int64_t (*devices)(void* self, sonde_level level);
  /** Shared per-tick work, before this tick's collect calls. May be NULL. */
  void (*snapshot)(void* self, const sonde_tick* tick);
  /** Writes the raw value for one level through the api's writers. */
  void (*collect)(void* self, sonde_level level, const sonde_tick* tick, sonde_out* out);
  void (*destroy)(void* self);
  void* reserved[8];
} sonde_collector_v1;

/* ---- Status hooks (ABI 1.1): `sonde status` and `sonde gpustat` ------------------------------
 *
 * Capability SONDE_CAP_STATUS gives a `sonde_status_v1`: hooks after gpustat's plugin proposal.
 * Every hook may be NULL. Plugins run in priority order (lower first; sonde's built-in status
 * plugins have priority 0; ties in name order), each hook over all plugins before the next:
 *
 *   add_options, configure            once per command
 *   before_query                      once per query (once one-shot, every refresh in watch mode)
 *   query_device                      once per GPU, after sonde filled the record
 *   get_process_info                  once per GPU process, after sonde filled the record
 *   after_query                       once per query
 *   print_header, repr_gpu, repr_process, print_footer   text output only (not with --json)
 *
 * Values cross only as C types through `sonde_status_api`. Fields a plugin adds to a GPU or a
 * process record (or to the node, under the plugin's name) appear in the text of `sonde status`
 * and in the `--json` of both commands. All calls happen on one thread.
 */
typedef struct sonde_status sonde_status;                 /**< one status command */
typedef struct sonde_status_gpu sonde_status_gpu;         /**< one GPU record */
typedef struct sonde_status_process sonde_status_process; /**< one process of a GPU */
typedef struct sonde_status_text sonde_status_text;       /**< text being built by a print hook */

/** Functions the host gives to a status plugin; valid for the life of the command. */
typedef struct sonde_status_api {
  uint32_t struct_size; /**< sizeof(sonde_status_api) of the host */
  uint32_t abi_minor;   /**< the host's SONDE_ABI_MINOR */

  /* Command-line options (add_options only). `name` is the long option without dashes
   * ([a-z0-9-]+); an option already taken is refused (returns 0 and logs why). */
  int (*add_flag)(sonde_status* s, const char* name, const char* help);
  int (*add_option)(sonde_status* s, const char* name, const char* help, const char* default_value);
  /* Option values (configure and later): 1 when given (or defaulted), 0 when absent. */
  int (*option_value)(const sonde_status* s, const char* name, const char** value);
  int (*flag_value)(const sonde_status* s, const char* name); /**< 1 when set */
  /** "status" or "gpustat". */
  const char* (*command)(const sonde_status* s);
  int (*json_output)(const sonde_status* s); /**< 1 with --json */
  int (*use_color)(const sonde_status* s);   /**< 1 when the text has ANSI colours */
  /** Seconds between refreshes in watch mode, 0 one-shot. */
  double (*watch_interval_s)(const sonde_status* s);
  /** Seconds the query measures CPU over (--cpu-interval). */
  double (*cpu_interval_s)(const sonde_status* s);
  /** The proc root (normally "/proc"). */
  const char* (*proc_root)(const sonde_status* s);
  /** A line in sonde's log (stderr), prefixed with the plugin's name. severity: 0 info, 1 warning.
   */
  void (*log)(const sonde_status* s, int severity, const char* message);
  /* Fields of the node, shown under the plugin's name in --json ("<plugin>": {key: value}). */
  void (*set_string)(sonde_status* s, const char* key, const char* value);
  void (*set_number)(sonde_status* s, const char* key, double value);

  /* A GPU record. Numbers: 1 when supported (value written), 0 when not. Keys: "temperature_c",
   * "fan_percent", "util_gpu_percent", "util_mem_percent", "mem_used_bytes", "mem_total_bytes",
   * "power_w", "power_limit_w", "enc_util_percent", "dec_util_percent". */
  int32_t (*gpu_index)(const sonde_status_gpu* g);
  const char* (*gpu_vendor)(const sonde_status_gpu* g); /**< "nvidia" or "amd" */
  const char* (*gpu_name)(const sonde_status_gpu* g);
  const char* (*gpu_uuid)(const sonde_status_gpu* g);
  int (*gpu_number)(const sonde_status_gpu* g, const char* key, double* value);
  size_t (*gpu_process_count)(const sonde_status_gpu* g);
  /** Adds (or replaces) a field of the GPU record. */
  void (*gpu_set_string)(sonde_status_gpu* g, const char* key, const char* value);
  void (*gpu_set_number)(sonde_status_gpu* g, const char* key, double value);

  /* A process record. */
  int32_t (*process_pid)(const sonde_status_process* p);
  const char* (*process_user)(const sonde_status_process* p);    /**< "" when unknown */
  const char* (*process_command)(const sonde_status_process* p); /**< basename of argv[0] */
  /** GPU memory in bytes: 1 when the driver says, 0 when not. */
  int (*process_gpu_memory)(const sonde_status_process* p, uint64_t* bytes);
  void (*process_set_string)(sonde_status_process* p, const char* key, const char* value);
  void (*process_set_number)(sonde_status_process* p, const char* key, double value);
  /** A field of the record (set by sonde or a plugin that ran before), as text; NULL if absent. */
  const char* (*process_field)(const sonde_status_process* p, const char* key);

  /* Text hooks. repr_* receive the line sonde (and plugins before) made: read it with
   * text_get, replace it with text_set, or add to it with text_append. print_header/print_footer
   * append lines (each text_append may hold several lines; end them with '\n'). */
  const char* (*text_get)(const sonde_status_text* t);
  void (*text_set)(sonde_status_text* t, const char* text);
  void (*text_append)(sonde_status_text* t, const char* text);

  void* reserved[16];
} sonde_status_api;

/** Capability SONDE_CAP_STATUS. */
typedef struct sonde_status_v1 {
  uint32_t struct_size; /**< sizeof(sonde_status_v1) of the plugin */
  /** Creates the plugin's state for one command (NULL hooks get a NULL self). On failure returns
   * NULL and writes why into err: the plugin is then left out with a warning. May be NULL. */
  void* (*create)(const sonde_status_api* api, sonde_status* s, char* err, size_t err_size);
  void (*destroy)(void* self);
  void (*add_options)(void* self, sonde_status* s);
  /** Returns 0 when the options are fine, else writes why into err (sonde exits with status 2). */
  int (*configure)(void* self, sonde_status* s, char* err, size_t err_size);
  void (*before_query)(void* self, sonde_status* s);
  void (*query_device)(void* self, sonde_status* s, sonde_status_gpu* gpu);
  void (*get_process_info)(void* self, sonde_status* s, sonde_status_gpu* gpu,
                           sonde_status_process* process);
  void (*after_query)(void* self, sonde_status* s);
  void (*repr_gpu)(void* self, sonde_status* s, const sonde_status_gpu* gpu,
                   sonde_status_text* text);
  void (*repr_process)(void* self, sonde_status* s, const sonde_status_gpu* gpu,
                       const sonde_status_process* process, sonde_status_text* text);
  void (*print_header)(void* self, sonde_status* s, sonde_status_text* text);
  void (*print_footer)(void* self, sonde_status* s, sonde_status_text* text);
  /** ABI 1.2, `sonde top`: once per refresh, with every process of its table (GPU or not, in no
   * particular order), so the plugin can add fields to any process (process_set_*; they appear as
   * columns). Read a process with process_pid/user/command/field; process_gpu_memory answers 0
   * for a process that holds no GPU memory. Called after get_process_info of the GPU processes.
   * Keep it cheap: `top` may list 10,000 processes each second. The host calls it only for a
   * plugin whose abi_minor is 2 or more (before 1.2 this slot was reserved). May be NULL. */
  void (*host_processes)(void* self, sonde_status* s, sonde_status_process* const* processes,
                         size_t count);
  void* reserved[7];
} sonde_status_v1;

/** The table returned by the entry function. Static and const: the host never frees it. */
typedef struct sonde_plugin {
  uint32_t abi_major;   /**< SONDE_ABI_MAJOR the plugin was built with */
  uint32_t abi_minor;   /**< SONDE_ABI_MINOR the plugin was built with */
  uint32_t struct_size; /**< sizeof(sonde_plugin) of the plugin */
  const char* name;     /**< short name, [A-Za-z0-9_-]+ */
  const char* description;
  int32_t priority; /**< order of hooks; core is 0, lower runs first */
  /** Returns the table for a capability id, or NULL when the plugin lacks it. */
  const void* (*capability)(uint32_t id);
  void* reserved[8];
} sonde_plugin;

typedef const sonde_plugin* (*sonde_plugin_entry_fn)(void);

#if defined(__GNUC__)
#define SONDE_PLUGIN_VISIBLE __attribute__((visibility("default")))
#else
#define SONDE_PLUGIN_VISIBLE
#endif

/** Declares the entry function: `SONDE_PLUGIN_EXPORT const sonde_plugin* sonde_plugin_entry(void)`.
 */
#ifdef __cplusplus
#define SONDE_PLUGIN_EXPORT extern "C" SONDE_PLUGIN_VISIBLE
#else
#define SONDE_PLUGIN_EXPORT SONDE_PLUGIN_VISIBLE
#endif

#ifdef __cplusplus
}
#endif

#endif /* SONDE_PLUGIN_H */
