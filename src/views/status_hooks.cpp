// Status hooks: the host side of SONDE_CAP_STATUS. Built-in and native status plugins go through
// the same C table, so the built-ins are also the reference users of the ABI.
#include "views/status_hooks.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "core/threads.hpp"
#include "plugins/plugins.hpp"

struct sonde_status {
  struct Option {
    bool is_flag = false;
    bool flag = false;
    std::string value;
    std::string default_value;
    CLI::Option* cli = nullptr;
  };
  sonde::status::StatusSettings settings;
  CLI::App* app = nullptr;  ///< only during add_options
  std::map<std::string, Option> options;
  sonde::status::StatusData* data = nullptr;
  std::string plugin;  ///< whose hook runs now (log prefix, node fields)
};

namespace sonde::plugins {
Result<const sonde_plugin*> load_native_plugin(const std::string& path);
}

namespace sonde::status {
namespace {

bool valid_option_name(const char* name) {
  if (name == nullptr || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  for (const char* c = name; *c; ++c)
    if (!std::islower(static_cast<unsigned char>(*c)) &&
        !std::isdigit(static_cast<unsigned char>(*c)) && *c != '-')
      return false;
  return true;
}

void api_log(const sonde_status* s, int severity, const char* message) {
  std::cerr << fmt::format("sonde: {}status plugin '{}': {}\n", severity > 0 ? "warning: " : "",
                           s->plugin, message ? message : "");
}

int add_opt(sonde_status* s, const char* name, const char* help, const char* def, bool flag) {
  if (s->app == nullptr) {
    api_log(s, 1, "options can only be added in add_options");
    return 0;
  }
  if (!valid_option_name(name)) {
    api_log(s, 1,
            fmt::format("option name '{}' refused: expected [a-z][a-z0-9-]*", name ? name : "")
                .c_str());
    return 0;
  }
  const std::string long_name = std::string("--") + name;
  if (s->options.count(name) || s->app->get_option_no_throw(long_name) != nullptr) {
    api_log(s, 1, fmt::format("option {} is already taken; not added", long_name).c_str());
    return 0;
  }
  auto& o = s->options[name];
  o.is_flag = flag;
  const std::string text = fmt::format("{} (plugin {})", help ? help : "", s->plugin);
  if (flag) {
    o.cli = s->app->add_flag(long_name, o.flag, text);
  } else {
    o.default_value = def ? def : "";
    o.value = o.default_value;
    o.cli = s->app->add_option(long_name, o.value, text);
  }
  o.cli->group("Plugin options");
  return 1;
}
int api_add_flag(sonde_status* s, const char* name, const char* help) {
  return add_opt(s, name, help, nullptr, true);
}
int api_add_option(sonde_status* s, const char* name, const char* help, const char* def) {
  return add_opt(s, name, help, def, false);
}
int api_option_value(const sonde_status* s, const char* name, const char** value) {
  auto it = s->options.find(name ? name : "");
  if (it == s->options.end() || it->second.is_flag) return 0;
  const bool given = it->second.cli != nullptr && it->second.cli->count() > 0;
  if (!given && it->second.default_value.empty()) return 0;
  *value = it->second.value.c_str();
  return 1;
}
int api_flag_value(const sonde_status* s, const char* name) {
  auto it = s->options.find(name ? name : "");
  return it != s->options.end() && it->second.is_flag && it->second.flag ? 1 : 0;
}
const char* api_command(const sonde_status* s) {
  return s->settings.command.c_str();
}
int api_json(const sonde_status* s) {
  return s->settings.json ? 1 : 0;
}
int api_color(const sonde_status* s) {
  return s->settings.color ? 1 : 0;
}
double api_watch(const sonde_status* s) {
  return s->settings.watch_interval_s;
}
double api_cpu_interval(const sonde_status* s) {
  return s->settings.cpu_interval_s;
}
const char* api_proc_root(const sonde_status* s) {
  return s->settings.proc_root.c_str();
}

Field string_field(const char* key, const char* value) {
  return Field{key ? key : "", value ? value : "", std::nullopt};
}
Field number_field(const char* key, double value) {
  std::string text = std::isfinite(value) && value == std::floor(value) && std::fabs(value) < 1e15
                         ? fmt::format("{}", static_cast<long long>(value))
                         : fmt::format("{:.4g}", value);
  return Field{key ? key : "", text, value};
}
std::vector<Field>* node_fields(sonde_status* s) {
  if (s->data == nullptr) return nullptr;
  for (auto& pf : s->data->node_fields)
    if (pf.plugin == s->plugin) return &pf.fields;
  s->data->node_fields.push_back(PluginFields{s->plugin, {}});
  return &s->data->node_fields.back().fields;
}
void api_set_string(sonde_status* s, const char* key, const char* value) {
  if (key == nullptr || *key == '\0') return;
  if (auto* f = node_fields(s)) set_field(*f, string_field(key, value));
}
void api_set_number(sonde_status* s, const char* key, double value) {
  if (key == nullptr || *key == '\0') return;
  if (auto* f = node_fields(s)) set_field(*f, number_field(key, value));
}

int32_t api_gpu_index(const sonde_status_gpu* g) {
  return g->row->device.index;
}
const char* api_gpu_vendor(const sonde_status_gpu* g) {
  return g->row->device.vendor.c_str();
}
const char* api_gpu_name(const sonde_status_gpu* g) {
  return g->row->device.name.c_str();
}
const char* api_gpu_uuid(const sonde_status_gpu* g) {
  return g->row->device.uuid.c_str();
}
int api_gpu_number(const sonde_status_gpu* g, const char* key, double* value) {
  const gpu::GpuDevice& d = g->row->device;
  const std::string k = key ? key : "";
  std::optional<double> v;
  auto bytes = [](const std::optional<std::uint64_t>& b) {
    return b ? std::optional<double>(static_cast<double>(*b)) : std::nullopt;
  };
  if (k == "temperature_c")
    v = d.temperature_c;
  else if (k == "fan_percent")
    v = d.fan_percent;
  else if (k == "util_gpu_percent")
    v = d.util_gpu;
  else if (k == "util_mem_percent")
    v = d.util_mem;
  else if (k == "mem_used_bytes")
    v = bytes(d.mem_used_bytes);
  else if (k == "mem_total_bytes")
    v = bytes(d.mem_total_bytes);
  else if (k == "power_w")
    v = d.power_w;
  else if (k == "power_limit_w")
    v = d.power_limit_w;
  else if (k == "enc_util_percent")
    v = d.enc_util;
  else if (k == "dec_util_percent")
    v = d.dec_util;
  if (!v) return 0;
  *value = *v;
  return 1;
}
size_t api_gpu_process_count(const sonde_status_gpu* g) {
  return g->row->processes ? g->row->processes->size() : 0;
}
void api_gpu_set_string(sonde_status_gpu* g, const char* key, const char* value) {
  if (key && *key) set_field(g->row->fields, string_field(key, value));
}
void api_gpu_set_number(sonde_status_gpu* g, const char* key, double value) {
  if (key && *key) set_field(g->row->fields, number_field(key, value));
}

int32_t api_process_pid(const sonde_status_process* p) {
  return p->row->pid;
}
const char* api_process_user(const sonde_status_process* p) {
  return p->row->user ? p->row->user->c_str() : "";
}
const char* api_process_command(const sonde_status_process* p) {
  return p->row->command.c_str();
}
int api_process_gpu_memory(const sonde_status_process* p, uint64_t* bytes) {
  if (!p->row->gpu_memory_bytes) return 0;
  *bytes = *p->row->gpu_memory_bytes;
  return 1;
}
void api_process_set_string(sonde_status_process* p, const char* key, const char* value) {
  if (key && *key) set_field(p->row->fields, string_field(key, value));
}
void api_process_set_number(sonde_status_process* p, const char* key, double value) {
  if (key && *key) set_field(p->row->fields, number_field(key, value));
}
const char* api_process_field(const sonde_status_process* p, const char* key) {
  const Field* f = find_field(p->row->fields, key ? key : "");
  return f ? f->text.c_str() : nullptr;
}

const char* api_text_get(const sonde_status_text* t) {
  return t->text.c_str();
}
void api_text_set(sonde_status_text* t, const char* text) {
  t->text = text ? text : "";
}
void api_text_append(sonde_status_text* t, const char* text) {
  if (text) t->text += text;
}

const sonde_status_api kApi = {sizeof(sonde_status_api),
                               SONDE_ABI_MINOR,
                               api_add_flag,
                               api_add_option,
                               api_option_value,
                               api_flag_value,
                               api_command,
                               api_json,
                               api_color,
                               api_watch,
                               api_cpu_interval,
                               api_proc_root,
                               api_log,
                               api_set_string,
                               api_set_number,
                               api_gpu_index,
                               api_gpu_vendor,
                               api_gpu_name,
                               api_gpu_uuid,
                               api_gpu_number,
                               api_gpu_process_count,
                               api_gpu_set_string,
                               api_gpu_set_number,
                               api_process_pid,
                               api_process_user,
                               api_process_command,
                               api_process_gpu_memory,
                               api_process_set_string,
                               api_process_set_number,
                               api_process_field,
                               api_text_get,
                               api_text_set,
                               api_text_append,
                               {}};

}  // namespace

std::vector<StatusPluginRef> find_status_plugins(const std::vector<std::string>& dirs,
                                                 std::vector<std::string>& warnings) {
  std::vector<StatusPluginRef> out;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      if (entry.path().extension() == ".so") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      auto plugin = plugins::load_native_plugin(f.string());
      if (!plugin) {
        warnings.push_back(plugin.error().message);
        continue;
      }
      const sonde_plugin* p = *plugin;
      if (p->abi_minor < 1 || p->capability == nullptr) continue;  // before status hooks
      const auto* table = static_cast<const sonde_status_v1*>(p->capability(SONDE_CAP_STATUS));
      if (table == nullptr) continue;  // a collector
      if (table->struct_size < offsetof(sonde_status_v1, reserved)) {
        warnings.push_back(fmt::format(
            "refusing status plugin {}: its sonde_status_v1 table is too small ({} bytes)",
            f.string(), table->struct_size));
        continue;
      }
      const std::string name = p->name ? p->name : f.stem().string();
      const bool dup = std::any_of(out.begin(), out.end(),
                                   [&](const StatusPluginRef& r) { return r.name == name; });
      if (dup) {
        warnings.push_back(fmt::format(
            "status plugin {}: a plugin named '{}' was already loaded; skipped", f.string(), name));
        continue;
      }
      out.push_back(StatusPluginRef{name, p->description ? p->description : "", p->priority,
                                    f.string(), table, p->abi_minor});
    }
  }
  return out;
}

StatusHooks::StatusHooks(std::vector<StatusPluginRef> plugins, StatusSettings settings)
    : status_(std::make_unique<sonde_status>()) {
  status_->settings = std::move(settings);
  std::stable_sort(plugins.begin(), plugins.end(),
                   [](const StatusPluginRef& a, const StatusPluginRef& b) {
                     return a.priority != b.priority ? a.priority < b.priority : a.name < b.name;
                   });
  for (auto& ref : plugins) {
    Instance in{ref, nullptr};
    if (ref.table->create != nullptr) {
      char err[512] = {0};
      status_->plugin = ref.name;
      in.self = ref.table->create(&kApi, status_.get(), err, sizeof err);
      if (in.self == nullptr) {
        std::cerr << fmt::format("sonde: warning: status plugin '{}' ({}) left out: {}\n", ref.name,
                                 ref.source, err[0] ? err : "create() failed");
        continue;
      }
    }
    instances_.push_back(std::move(in));
  }
}

StatusHooks::~StatusHooks() {
  // A plugin whose hook did not return is never destroyed: its thread may still be inside it.
  for (auto& in : instances_)
    if (in.self != nullptr && !in.hung && in.ref.table->destroy != nullptr)
      in.ref.table->destroy(in.self);
}

StatusSettings& StatusHooks::settings() {
  return status_->settings;
}

std::vector<std::string> StatusHooks::names() const {
  std::vector<std::string> out;
  for (const auto& in : instances_) out.push_back(in.ref.name);
  return out;
}

/// Everything one hook call may touch, so that a call that overruns its deadline keeps writing
/// into its own copy (kept alive by its thread) and never into the command's data.
struct StatusHooks::HookArgs {
  sonde_status status;  ///< the plugin's view of the command; data points to `data`
  StatusData data;      ///< node_fields only (what set_string/set_number write)
  GpuRow gpu;
  ProcessRow process;
  std::vector<ProcessRow> processes;  ///< host_processes: every process of top's table
  sonde_status_text text;
  sonde_status_gpu g;
  sonde_status_process p;
  std::vector<sonde_status_process> ps;  ///< handles of `processes` (no GPU)
  std::vector<sonde_status_process*> pps;
  int rc = 0;  ///< configure()'s answer
  std::string error;

  explicit HookArgs(const sonde_status& s) : status(s) { link(); }
  HookArgs(const HookArgs& o)
      : status(o.status),
        data(o.data),
        gpu(o.gpu),
        process(o.process),
        processes(o.processes),
        text(o.text),
        rc(o.rc),
        error(o.error) {
    link();
  }
  HookArgs& operator=(HookArgs&& o) noexcept {
    status = std::move(o.status);
    data = std::move(o.data);
    gpu = std::move(o.gpu);
    process = std::move(o.process);
    processes = std::move(o.processes);
    text = std::move(o.text);
    rc = o.rc;
    error = std::move(o.error);
    link();
    return *this;
  }
  void link() {
    status.data = &data;
    g.row = &gpu;
    p.gpu = &gpu;
    p.row = &process;
    ps.resize(processes.size());
    pps.resize(processes.size());
    for (std::size_t k = 0; k < processes.size(); ++k) {
      ps[k] = sonde_status_process{nullptr, &processes[k]};
      pps[k] = &ps[k];
    }
  }
};

namespace {

/// Runs `work` on a thread of its own and waits up to `timeout_s` for it. True when it returned;
/// false when it is still running (its thread is then left to finish on its own: `work` must own
/// everything it touches).
bool run_with_deadline(std::function<void()> work, double timeout_s) {
  struct Done {
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
  };
  auto d = std::make_shared<Done>();
  std::thread t = start_thread([d, w = std::move(work)] {
    try {
      w();
    } catch (...) {  // from sonde's side of the ABI (allocation); the plugin's C frames are done
    }
    std::lock_guard lock(d->m);
    d->done = true;
    d->cv.notify_all();
  });
  std::unique_lock lock(d->m);
  const bool done =
      d->cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return d->done; });
  lock.unlock();
  if (done)
    t.join();
  else
    t.detach();
  return done;
}

}  // namespace

template <class F>
void StatusHooks::each(const char* hook, HookArgs& args, F&& f, Instance* only) {
  for (auto& in : instances_) {
    if (in.hung || (only != nullptr && &in != only)) continue;
    args.status.plugin = in.ref.name;
    if (in.ref.source == "builtin") {  // sonde's own code: no thread, no deadline
      f(*in.ref.table, in.self, args);
      continue;
    }
    // A plugin from a plugin directory: its own thread and a deadline, on a copy of the arguments.
    auto box = std::make_shared<HookArgs>(args);
    const sonde_status_v1* table = in.ref.table;
    void* self = in.self;
    const double timeout = status_->settings.hook_timeout_s;
    if (run_with_deadline([box, table, self, f] { f(*table, self, *box); }, timeout)) {
      args = std::move(*box);
      continue;
    }
    in.hung = true;
    std::cerr << fmt::format(
        "sonde: warning: status plugin '{}' ({}): its {} hook did not return within {} s; the "
        "plugin is left out from now on\n",
        in.ref.name, in.ref.source, hook, timeout);
  }
}

void StatusHooks::add_options(CLI::App& app) {
  status_->app = &app;
  for (auto& in : instances_) {
    status_->plugin = in.ref.name;
    if (in.ref.table->add_options) in.ref.table->add_options(in.self, status_.get());
  }
  status_->app = nullptr;
}

Result<void> StatusHooks::configure() {
  for (auto& in : instances_) {
    if (in.ref.table->configure == nullptr) continue;
    HookArgs args(*status_);
    each(
        "configure", args,
        [](const sonde_status_v1& t, void* self, HookArgs& a) {
          char err[512] = {0};
          a.rc = t.configure(self, &a.status, err, sizeof err);
          a.error = err;
        },
        &in);
    if (!in.hung && args.rc != 0)
      return make_error(Errc::config,
                        fmt::format("status plugin '{}': {}", in.ref.name,
                                    args.error.empty() ? "configure() failed" : args.error));
  }
  return {};
}

void StatusHooks::before_query(StatusData& data) {
  HookArgs args(*status_);
  args.data.node_fields = data.node_fields;
  each("before_query", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.before_query) t.before_query(self, &a.status);
  });
  data.node_fields = std::move(args.data.node_fields);
}

void StatusHooks::query_device(StatusData& data, GpuRow& gpu) {
  HookArgs args(*status_);
  args.data.node_fields = data.node_fields;
  args.gpu = gpu;
  each("query_device", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.query_device) t.query_device(self, &a.status, &a.g);
  });
  data.node_fields = std::move(args.data.node_fields);
  gpu.fields = std::move(args.gpu.fields);
}

void StatusHooks::get_process_info(StatusData& data, GpuRow& gpu, ProcessRow& process) {
  HookArgs args(*status_);
  args.data.node_fields = data.node_fields;
  args.gpu.device = gpu.device;
  args.gpu.fields = gpu.fields;
  args.process = process;
  auto call = [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.get_process_info) t.get_process_info(self, &a.status, &a.g, &a.p);
  };
  const auto& skip = status_->settings.skip_process_info;
  if (skip.empty()) {
    each("get_process_info", args, call);
  } else {
    for (auto& in : instances_)
      if (in.ref.source != "builtin" ||
          std::find(skip.begin(), skip.end(), in.ref.name) == skip.end())
        each("get_process_info", args, call, &in);
  }
  data.node_fields = std::move(args.data.node_fields);
  gpu.fields = std::move(args.gpu.fields);
  process = std::move(args.process);
}

void StatusHooks::after_query(StatusData& data) {
  HookArgs args(*status_);
  args.data.node_fields = data.node_fields;
  each("after_query", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.after_query) t.after_query(self, &a.status);
  });
  data.node_fields = std::move(args.data.node_fields);
}

bool StatusHooks::has_host_processes() const {
  return std::any_of(instances_.begin(), instances_.end(), [](const Instance& in) {
    return !in.hung && in.ref.abi_minor >= 2 && in.ref.table->host_processes != nullptr;
  });
}

void StatusHooks::host_processes(StatusData& data, std::vector<ProcessRow>& processes) {
  HookArgs args(*status_);
  args.data.node_fields = data.node_fields;
  args.processes = std::move(processes);
  args.link();
  for (auto& in : instances_) {
    if (in.ref.abi_minor < 2 || in.ref.table->host_processes == nullptr) continue;
    each(
        "host_processes", args,
        [](const sonde_status_v1& t, void* self, HookArgs& a) {
          t.host_processes(self, &a.status, a.pps.data(), a.pps.size());
        },
        &in);
  }
  data.node_fields = std::move(args.data.node_fields);
  processes = std::move(args.processes);
}

std::string StatusHooks::repr_gpu(const GpuRow& gpu, std::string line) {
  HookArgs args(*status_);
  args.gpu = gpu;
  args.text.text = std::move(line);
  each("repr_gpu", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.repr_gpu) t.repr_gpu(self, &a.status, &a.g, &a.text);
  });
  return std::move(args.text.text);
}

std::string StatusHooks::repr_process(const GpuRow& gpu, const ProcessRow& process,
                                      std::string line) {
  HookArgs args(*status_);
  args.gpu.device = gpu.device;
  args.gpu.fields = gpu.fields;
  args.process = process;
  args.text.text = std::move(line);
  each("repr_process", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.repr_process) t.repr_process(self, &a.status, &a.g, &a.p, &a.text);
  });
  return std::move(args.text.text);
}

std::string StatusHooks::print_header() {
  HookArgs args(*status_);
  each("print_header", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.print_header) t.print_header(self, &a.status, &a.text);
  });
  return std::move(args.text.text);
}

std::string StatusHooks::print_footer() {
  HookArgs args(*status_);
  each("print_footer", args, [](const sonde_status_v1& t, void* self, HookArgs& a) {
    if (t.print_footer) t.print_footer(self, &a.status, &a.text);
  });
  return std::move(args.text.text);
}

}  // namespace sonde::status
