// Native plugins: a shared library with the C ABI of include/sonde/plugin.h, loaded with dlopen
// after the trust checks, called through its const function table. Plugin code runs under the
// engine's watchdog (core/watchdog.hpp: deadline per call, no hand-off per call), or in a child
// process with isolate: true.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <iostream>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sonde/plugin.h>

#include "core/fs.hpp"
#include "plugins/plugins.hpp"

// The host's view of the opaque types.
struct sonde_host {
  sonde::CollectorArgs args;
  std::string name;
  sonde_node_info node{};
  std::vector<int32_t> cpu_handles;
};

struct sonde_tick {
  const sonde::TickContext* ctx = nullptr;
  std::array<std::vector<sonde_pid_info>, sonde::kNumLevels> pids;
  std::array<bool, sonde::kNumLevels> filled{};
};

struct sonde_out {
  sonde::RawValue value;
  bool written = false;
  std::optional<std::string> error;
};

namespace sonde::plugins {
namespace {

// ---- the host API ----
// Every entry is noexcept and checks its arguments: a plugin's C frames are between the host and
// any exception, and a NULL key or output from a broken plugin must be a refused call (0, -1 or
// NULL as the header documents), never a std::string built from nullptr or a crash of the run.

const YAML::Node* kwarg(const sonde_host* h, const char* key) noexcept {
  if (h == nullptr || key == nullptr) return nullptr;
  try {
    auto it = h->args.raw_kwargs.find(key);
    return it == h->args.raw_kwargs.end() ? nullptr : &it->second.value;
  } catch (...) {
    return nullptr;
  }
}

int api_kwarg_string(const sonde_host* h, const char* key, const char** value) noexcept {
  const YAML::Node* n = kwarg(h, key);
  if (!n) return 0;
  if (value == nullptr || !n->IsScalar()) return -1;
  *value = n->Scalar().c_str();
  return 1;
}
int api_kwarg_number(const sonde_host* h, const char* key, double* value) noexcept {
  const YAML::Node* n = kwarg(h, key);
  if (!n) return 0;
  double v = 0;
  if (value == nullptr || !n->IsScalar() || !YAML::convert<double>::decode(*n, v)) return -1;
  *value = v;
  return 1;
}
int api_kwarg_bool(const sonde_host* h, const char* key, int* value) noexcept {
  const YAML::Node* n = kwarg(h, key);
  if (!n) return 0;
  bool v = false;
  if (value == nullptr || !n->IsScalar() || !YAML::convert<bool>::decode(*n, v)) return -1;
  *value = v ? 1 : 0;
  return 1;
}
int64_t api_kwarg_list_size(const sonde_host* h, const char* key) noexcept {
  const YAML::Node* n = kwarg(h, key);
  if (!n || !n->IsSequence()) return -1;
  for (const auto& item : *n)
    if (!item.IsScalar()) return -1;
  return static_cast<int64_t>(n->size());
}
const char* api_kwarg_list_item(const sonde_host* h, const char* key, size_t index) noexcept {
  const YAML::Node* n = kwarg(h, key);
  try {
    if (!n || !n->IsSequence() || index >= n->size() || !(*n)[index].IsScalar()) return nullptr;
    return (*n)[index].Scalar().c_str();
  } catch (...) {
    return nullptr;
  }
}
int api_injected(const sonde_host* h, const char* key) noexcept {
  if (h == nullptr || key == nullptr) return 0;
  for (const auto& k : h->args.inject)
    if (k == key) return 1;
  return 0;
}
const sonde_node_info* api_node_info(const sonde_host* h) noexcept {
  return h != nullptr && h->args.node != nullptr ? &h->node : nullptr;
}
int32_t api_target_pid(const sonde_host* h) noexcept {
  return h != nullptr && h->args.target ? h->args.target->pid : 0;
}
uint32_t api_target_uid(const sonde_host* h) noexcept {
  return h != nullptr && h->args.target ? h->args.target->uid : 0;
}
const char* api_slurm_job(const sonde_host* h) noexcept {
  return h != nullptr && h->args.target && h->args.target->slurm_job
             ? h->args.target->slurm_job->c_str()
             : nullptr;
}
void api_log(const sonde_host* h, int severity, const char* message) noexcept {
  if (h == nullptr) return;
  try {
    std::cerr << fmt::format("sonde: {}collector '{}': {}\n", severity > 0 ? "warning: " : "",
                             h->name, message ? message : "");
  } catch (...) {
  }
}
uint64_t api_tick_index(const sonde_tick* t) noexcept {
  return t != nullptr ? t->ctx->tick : 0;
}
double api_tick_time(const sonde_tick* t) noexcept {
  return t != nullptr ? t->ctx->time_s : 0;
}
double api_tick_wallclock(const sonde_tick* t) noexcept {
  return t != nullptr ? t->ctx->wallclock_s : 0;
}
double api_tick_dt(const sonde_tick* t) noexcept {
  return t != nullptr ? t->ctx->dt_s : 0;
}
bool valid_level(sonde_level l) {
  return l >= SONDE_LEVEL_PROCESS && l <= SONDE_LEVEL_SYSTEM;
}
size_t api_level_size(const sonde_tick* t, sonde_level l) noexcept {
  if (t == nullptr || !valid_level(l)) return 0;
  return t->ctx->procs->members[static_cast<std::size_t>(l)].size();
}
const sonde_pid_info* api_level_pid(const sonde_tick* ct, sonde_level l, size_t index) noexcept {
  if (ct == nullptr || !valid_level(l)) return nullptr;
  auto* t = const_cast<sonde_tick*>(ct);  // the per-tick cache is filled lazily
  const auto li = static_cast<std::size_t>(l);
  const auto& members = t->ctx->procs->members[li];
  if (index >= members.size()) return nullptr;
  if (!t->filled[li]) try {
      auto& out = t->pids[li];
      out.clear();
      out.reserve(members.size());
      for (auto i : members) {
        const PidSample& p = t->ctx->procs->pids[i];
        sonde_pid_info info{};
        info.struct_size = sizeof(sonde_pid_info);
        info.pid = p.pid;
        info.ppid = p.ppid;
        info.uid = p.uid;
        info.cpu_s = p.cpu_s;
        info.child_cpu_s = p.child_cpu_s;
        info.cpu_delta_s = p.cpu_delta_s;
        info.child_cpu_delta_s = p.child_cpu_delta_s;
        info.rss_bytes = p.rss_bytes;
        info.io_valid = p.io_valid ? 1 : 0;
        info.processor = p.processor;
        info.read_bytes = p.io.read_bytes;
        info.write_bytes = p.io.write_bytes;
        info.syscr = p.io.syscr;
        info.syscw = p.io.syscw;
        info.num_threads = p.num_threads;
        info.comm = p.comm_c_str();
        out.push_back(info);
      }
      t->filled[li] = true;
    } catch (...) {  // out of memory: the plugin sees no process
      t->pids[li].clear();
      return nullptr;
    }
  return &t->pids[li][index];
}
size_t api_total_pids(const sonde_tick* t) noexcept {
  return t != nullptr ? t->ctx->procs->total_pids : 0;
}

void api_write_scalar(sonde_out* o, double v) noexcept {
  if (o == nullptr) return;
  o->value = Scalar{v};
  o->written = true;
}
// A write the host cannot keep (a NULL array with a count, no memory) is an error of the tick.
void refuse(sonde_out* o, const char* why) noexcept {
  try {
    o->error = why;
  } catch (...) {
  }
}
void api_write_vector(sonde_out* o, const double* values, size_t count) noexcept {
  if (o == nullptr) return;
  if (values == nullptr && count > 0) return refuse(o, "write_vector: NULL values");
  try {
    o->value = PerDevice{std::vector<double>(values, values + count), std::nullopt};
    o->written = true;
  } catch (...) {
    refuse(o, "write_vector: out of memory");
  }
}
void api_write_vectors(sonde_out* o, const double* const* vectors, size_t metrics,
                       size_t count) noexcept {
  if (o == nullptr) return;
  if (vectors == nullptr && metrics > 0) return refuse(o, "write_vectors: NULL vectors");
  for (size_t i = 0; i < metrics; ++i)
    if (vectors[i] == nullptr && count > 0) return refuse(o, "write_vectors: a NULL vector");
  try {
    MultiPerDevice m;
    for (size_t i = 0; i < metrics; ++i) m.metrics.emplace_back(vectors[i], vectors[i] + count);
    o->value = std::move(m);
    o->written = true;
  } catch (...) {
    refuse(o, "write_vectors: out of memory");
  }
}
void api_write_counters(sonde_out* o, const double* values, size_t count) noexcept {
  if (o == nullptr) return;
  if (values == nullptr && count > 0) return refuse(o, "write_counters: NULL values");
  try {
    o->value = Counters{std::vector<double>(values, values + count)};
    o->written = true;
  } catch (...) {
    refuse(o, "write_counters: out of memory");
  }
}
void api_write_none(sonde_out* o) noexcept {
  if (o == nullptr) return;
  o->value = NoValue{};
  o->written = true;
}
void api_set_error(sonde_out* o, const char* message) noexcept {
  if (o == nullptr) return;
  refuse(o, message ? message : "error");
}

const sonde_host_api kHostApi = {sizeof(sonde_host_api),
                                 SONDE_ABI_MINOR,
                                 api_kwarg_string,
                                 api_kwarg_number,
                                 api_kwarg_bool,
                                 api_kwarg_list_size,
                                 api_kwarg_list_item,
                                 api_injected,
                                 api_node_info,
                                 api_target_pid,
                                 api_target_uid,
                                 api_slurm_job,
                                 api_log,
                                 api_tick_index,
                                 api_tick_time,
                                 api_tick_wallclock,
                                 api_tick_dt,
                                 api_level_size,
                                 api_level_pid,
                                 api_total_pids,
                                 api_write_scalar,
                                 api_write_vector,
                                 api_write_vectors,
                                 api_write_counters,
                                 api_write_none,
                                 api_set_error,
                                 {}};

// ---- the library ----

// A dlopen handle: closed on destruction unless released (a loaded plugin stays loaded).
class DlHandle {
 public:
  explicit DlHandle(void* h) : h_(h) {}
  ~DlHandle() {
    if (h_ != nullptr) ::dlclose(h_);
  }
  DlHandle(const DlHandle&) = delete;
  DlHandle& operator=(const DlHandle&) = delete;
  void* get() const { return h_; }
  void* release() { return std::exchange(h_, nullptr); }
  void reset() {
    if (h_ != nullptr) ::dlclose(std::exchange(h_, nullptr));
  }

 private:
  void* h_;
};

struct Library {
  // Plugins are never unloaded (no dlclose): a worker abandoned inside the plugin or a thread the
  // plugin started may still run its code.
  void* handle = nullptr;
  // The checked file stays open while the library is loaded: glibc identifies a loaded library
  // by the name given to dlopen, and a reused /proc/self/fd/N name would alias another plugin.
  UniqueFd fd;
  std::string path;
  const sonde_plugin* plugin = nullptr;
  const sonde_collector_v1* collector = nullptr;
};

// Checks what the library's entry point returns; an error says why it is refused.
Result<void> check_plugin(Library& lib) {
  const std::string& path = lib.path;
  ::dlerror();
  void* sym = ::dlsym(lib.handle, SONDE_PLUGIN_ENTRY_NAME);
  if (sym == nullptr) {
    const char* why = ::dlerror();
    return make_error(Errc::unavailable,
                      fmt::format("plugin {} does not export {}(): {}", path,
                                  SONDE_PLUGIN_ENTRY_NAME, why ? why : "no such symbol"));
  }
  auto entry = reinterpret_cast<sonde_plugin_entry_fn>(sym);
  lib.plugin = entry();
  if (lib.plugin == nullptr)
    return make_error(Errc::unavailable,
                      fmt::format("plugin {}: {}() returned NULL", path, SONDE_PLUGIN_ENTRY_NAME));
  if (lib.plugin->abi_major != SONDE_ABI_MAJOR)
    return make_error(
        Errc::unavailable,
        fmt::format("refusing plugin {}: it was built for sonde plugin ABI {}.{}, this "
                    "sonde speaks ABI {}.{}; rebuild it against this sonde's headers",
                    path, lib.plugin->abi_major, lib.plugin->abi_minor, SONDE_ABI_MAJOR,
                    SONDE_ABI_MINOR));
  if (lib.plugin->struct_size < offsetof(sonde_plugin, reserved))
    return make_error(Errc::unavailable,
                      fmt::format("refusing plugin {}: its sonde_plugin table is "
                                  "too small ({} bytes)",
                                  path, lib.plugin->struct_size));
  const void* cap = lib.plugin->capability ? lib.plugin->capability(SONDE_CAP_COLLECTOR) : nullptr;
  // A library with status hooks only (SONDE_CAP_STATUS, src/views/status_hooks.cpp) has no
  // collector: it loads, and the collector factory refuses it.
  const void* status_cap = lib.plugin->capability && lib.plugin->abi_minor >= 1
                               ? lib.plugin->capability(SONDE_CAP_STATUS)
                               : nullptr;
  if (cap == nullptr && status_cap == nullptr)
    return make_error(Errc::unavailable, fmt::format("plugin {} provides no collector", path));
  lib.collector = static_cast<const sonde_collector_v1*>(cap);
  if (lib.collector != nullptr &&
      (lib.collector->struct_size < offsetof(sonde_collector_v1, reserved) ||
       lib.collector->create == nullptr || lib.collector->collect == nullptr ||
       lib.collector->destroy == nullptr))
    return make_error(Errc::unavailable,
                      fmt::format("refusing plugin {}: incomplete sonde_collector_v1 table", path));
  return {};
}

// Keeps one handle per file for the life of the process (dlopen does the same). A library that is
// refused is closed again, and so is its file, on every path.
Result<std::shared_ptr<Library>> load_library(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<Library>> loaded;
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(path); it != loaded.end()) return it->second;

  auto opened = open_trusted(path);
  if (!opened) return opened.error();
  UniqueFd fd(*opened);
  // Files refused earlier that stayed resident (below), by identity: refused again without a
  // dlopen, which would only alias the resident copy under one more name.
  static std::map<std::pair<dev_t, ino_t>, Error> refused_resident;
  struct stat st {};
  const bool identified = ::fstat(fd.get(), &st) == 0;
  if (identified) {
    if (auto it = refused_resident.find({st.st_dev, st.st_ino}); it != refused_resident.end())
      return it->second;
  }
  // Load the file that was checked, not whatever the path names a moment later.
  const std::string by_fd = fmt::format("/proc/self/fd/{}", fd.get());
  ::dlerror();
  DlHandle handle(::dlopen(by_fd.c_str(), RTLD_NOW | RTLD_LOCAL));
  if (handle.get() == nullptr) {
    const char* why = ::dlerror();
    return make_error(Errc::unavailable,
                      fmt::format("cannot load plugin {}: {}", path, why ? why : "dlopen failed"));
  }
  auto lib = std::make_shared<Library>();
  lib->handle = handle.get();
  lib->path = path;
  if (auto ok = check_plugin(*lib); !ok) {
    handle.reset();
    // dlclose does not always unload (a C++ library with unique symbols stays resident), and
    // glibc would then answer a later dlopen of the same /proc/self/fd/N name with this library.
    // Such a file keeps its descriptor, so that its name is never reused.
    if (void* resident = ::dlopen(by_fd.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
      ::dlclose(resident);
      static std::vector<UniqueFd> pinned;
      pinned.push_back(std::move(fd));
      if (identified) refused_resident.emplace(std::make_pair(st.st_dev, st.st_ino), ok.error());
    }
    return ok.error();  // fd closed unless pinned
  }
  lib->handle = handle.release();
  lib->fd = std::move(fd);
  loaded.emplace(path, lib);
  return lib;
}

class NativeCollector final : public Collector {
 public:
  NativeCollector(std::shared_ptr<Library> lib, const CollectorArgs& args)
      : lib_(std::move(lib)), host_(std::make_unique<sonde_host>()) {
    host_->args = args;
    host_->name = args.name;
    if (args.node != nullptr) {
      const NodeInfo& n = *args.node;
      host_->cpu_handles.assign(n.cpu_handles.begin(), n.cpu_handles.end());
      host_->node.struct_size = sizeof(sonde_node_info);
      host_->node.num_system_cpus = n.num_system_cpus;
      host_->node.num_cpus = n.num_cpus;
      host_->node.cpu_handles = host_->cpu_handles.data();
      host_->node.num_cpu_handles = host_->cpu_handles.size();
      host_->node.mem_total_bytes = n.mem_total_bytes;
      for (std::size_t i = 0; i < kNumLevels; ++i)
        host_->node.memory_limit_bytes[i] = n.memory_limit_bytes[i];
      host_->node.num_gpus = n.num_gpus;
      host_->node.gpu_name = n.gpu_name.c_str();
      host_->node.gpu_memory_gib = n.gpu_memory_gib;
      host_->node.hostname = n.hostname.c_str();
    }
  }
  ~NativeCollector() override { teardown(); }

  Result<void> setup() override {
    char err[512] = {0};
    self_ = lib_->collector->create(&kHostApi, host_.get(), err, sizeof err);
    if (self_ == nullptr)
      return make_error(Errc::unavailable,
                        fmt::format("plugin {}: {}", lib_->path, err[0] ? err : "create() failed"));
    for (Level l : kAllLevels)
      devices_[level_index(l)] = lib_->collector->devices
                                     ? lib_->collector->devices(self_, static_cast<sonde_level>(l))
                                     : 1;
    return {};
  }
  bool supports(Level l) const override { return devices_[level_index(l)] >= 0; }
  std::size_t devices(Level l) const override {
    return static_cast<std::size_t>(std::max<int64_t>(0, devices_[level_index(l)]));
  }
  void snapshot(const TickContext& ctx) override {
    tick_ = sonde_tick{};
    tick_.ctx = &ctx;
    if (lib_->collector->snapshot) lib_->collector->snapshot(self_, &tick_);
  }
  Result<RawValue> collect(Level level, const TickContext& ctx) override {
    tick_.ctx = &ctx;
    sonde_out out;
    lib_->collector->collect(self_, static_cast<sonde_level>(level), &tick_, &out);
    if (out.error) return make_error(Errc::failed, *out.error);
    if (!out.written) return make_error(Errc::failed, "the plugin wrote no value");
    return std::move(out.value);
  }
  void teardown() override {
    if (self_ != nullptr) lib_->collector->destroy(self_);
    self_ = nullptr;
  }
  std::string_view source() const override { return "native"; }
  std::string file() const override { return lib_->path; }
  int priority() const override { return lib_->plugin->priority; }
  bool needs_watchdog() const override { return true; }

 private:
  std::shared_ptr<Library> lib_;
  std::unique_ptr<sonde_host> host_;
  void* self_ = nullptr;
  std::array<int64_t, kNumLevels> devices_{};
  sonde_tick tick_;
};

}  // namespace

Result<std::string> resolve_plugin_file(const std::string& name,
                                        const std::vector<std::string>& dirs) {
  if (name.find('/') != std::string::npos) {
    std::error_code ec;
    auto abs = std::filesystem::absolute(name, ec);
    return ec ? name : abs.string();
  }
  for (const auto& d : dirs) {
    const std::string candidate = d + "/" + name;
    if (::access(candidate.c_str(), F_OK) == 0) return candidate;
  }
  return make_error(Errc::unavailable,
                    fmt::format("plugin {} not found in the plugin directories ({})", name,
                                fmt::join(dirs, ":")));
}

Result<std::unique_ptr<Collector>> make_native_collector(const std::string& path,
                                                         const CollectorArgs& args) {
  auto lib = load_library(path);
  if (!lib) return lib.error();
  if ((*lib)->collector == nullptr)
    return make_error(Errc::unavailable,
                      fmt::format("plugin {} provides no collector (status hooks only)", path));
  return std::unique_ptr<Collector>(new NativeCollector(std::move(*lib), args));
}

// Used by discovery: the plugin's name and default entry, without creating a collector.
Result<std::pair<std::string, std::string>> native_default_entry(const std::string& path) {
  auto lib = load_library(path);
  if (!lib) return lib.error();
  const auto& l = **lib;
  if (l.collector == nullptr) return std::make_pair(std::string(), std::string());
  return std::make_pair(
      std::string(l.plugin->name ? l.plugin->name : ""),
      std::string(l.collector->default_entry_yaml ? l.collector->default_entry_yaml : ""));
}

Result<const sonde_plugin*> load_native_plugin(const std::string& path) {
  auto lib = load_library(path);
  if (!lib) return lib.error();
  return (*lib)->plugin;
}

}  // namespace sonde::plugins
