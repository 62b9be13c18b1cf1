#pragma once
// Status hooks (include/sonde/plugin.h, SONDE_CAP_STATUS): the built-in status plugins and those
// found in the plugin directories, ordered by priority, called at the points of a status query.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sonde/plugin.h>

#include "core/result.hpp"
#include "views/status.hpp"

namespace CLI {
class App;
}

// The host's view of the opaque status types.
struct sonde_status;
struct sonde_status_gpu {
  sonde::status::GpuRow* row = nullptr;
};
struct sonde_status_process {
  sonde::status::GpuRow* gpu = nullptr;
  sonde::status::ProcessRow* row = nullptr;
};
struct sonde_status_text {
  std::string text;
};

namespace sonde::status {

/// One status plugin: built in (source "builtin") or a library from a plugin directory.
struct StatusPluginRef {
  std::string name;
  std::string description;
  int priority = 0;
  std::string source;  ///< "builtin" or the library's path
  const sonde_status_v1* table = nullptr;
  unsigned abi_minor = SONDE_ABI_MINOR;  ///< what the plugin was built with (its hooks' slots)
};

/// The built-in status plugins (src/views/status_plugins/): host, slurm, container.
std::vector<StatusPluginRef> builtin_status_plugins();

/// Status plugins in `dirs` (native libraries whose table has SONDE_CAP_STATUS). Libraries that
/// are refused or broken are reported through `warn`; collector-only libraries are skipped.
std::vector<StatusPluginRef> find_status_plugins(const std::vector<std::string>& dirs,
                                                 std::vector<std::string>& warnings);

/// What the hooks can ask about the command.
struct StatusSettings {
  std::string command = "status";  ///< or "gpustat"
  bool json = false;
  bool color = false;
  double watch_interval_s = 0;
  double cpu_interval_s = 0.1;
  std::string proc_root = "/proc";
  /// How long one hook of a plugin from a plugin directory may take before the plugin is left
  /// out for the rest of the command ($SONDE_STATUS_HOOK_TIMEOUT). Built-in plugins have none.
  double hook_timeout_s = 2.0;
  /// Built-in plugins whose get_process_info is not called (sonde top reads every process's
  /// job and container itself, once per process, and shows them in columns of their own).
  std::vector<std::string> skip_process_info;
};

/// The plugins of one command, created and ordered (priority, then name).
class StatusHooks {
 public:
  StatusHooks(std::vector<StatusPluginRef> plugins, StatusSettings settings);
  ~StatusHooks();
  StatusHooks(const StatusHooks&) = delete;
  StatusHooks& operator=(const StatusHooks&) = delete;

  StatusSettings& settings();
  /// The plugins that were created, in hook order.
  std::vector<std::string> names() const;

  /// add_options: the plugins' options become options of `app`.
  void add_options(CLI::App& app);
  /// configure: after parsing; an error is a usage error.
  Result<void> configure();
  void before_query(StatusData& data);
  void query_device(StatusData& data, GpuRow& gpu);
  void get_process_info(StatusData& data, GpuRow& gpu, ProcessRow& process);
  void after_query(StatusData& data);
  /// host_processes (ABI 1.2, `sonde top`): whether a plugin has the hook, and the call: every
  /// process of top's table at once; what the plugins set lands in each row's `fields`.
  bool has_host_processes() const;
  void host_processes(StatusData& data, std::vector<ProcessRow>& processes);
  /// Text hooks: the line as sonde made it in, as the plugins left it out.
  std::string repr_gpu(const GpuRow& gpu, std::string line);
  std::string repr_process(const GpuRow& gpu, const ProcessRow& process, std::string line);
  std::string print_header();
  std::string print_footer();

 private:
  struct Instance {
    StatusPluginRef ref;
    void* self = nullptr;
    bool hung = false;  ///< a hook overran its deadline: never called or destroyed again
  };
  struct HookArgs;
  /// Calls `f(table, self, args)` for each plugin in hook order; a plugin from a plugin directory
  /// on a thread of its own, under the deadline, on a copy of `args` taken back when it returns.
  /// `only`: that plugin alone.
  template <class F>
  void each(const char* hook, HookArgs& args, F&& f, Instance* only = nullptr);
  std::unique_ptr<sonde_status> status_;
  std::vector<Instance> instances_;
};

}  // namespace sonde::status
