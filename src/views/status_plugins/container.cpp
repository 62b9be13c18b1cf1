// Container of each GPU process, from the runtime's cgroup names in /proc/<pid>/cgroup:
// docker-<id>.scope or /docker/<id> (Docker), cri-containerd-<id>.scope or /containerd/<id>
// (containerd), crio-<id>.scope (CRI-O), libpod-<id>.scope (Podman); under kubepods, the pod
// uid too. The field is "<runtime>:<first 12 hex digits>".
#include <algorithm>
#include <map>
#include <sonde/sdk.hpp>
#include <string_view>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "views/status_plugins/builtin.hpp"
#include "views/status_plugins/pid_cache.hpp"

namespace sonde::status {
namespace {

bool is_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
  });
}

// A path component such as "docker-<id>.scope" or "<id>" after "/docker/".
std::optional<ContainerId> from_component(std::string_view comp, std::string_view parent) {
  static const std::pair<std::string_view, std::string_view> scopes[] = {
      {"docker-", "docker"},
      {"cri-containerd-", "containerd"},
      {"crio-", "cri-o"},
      {"libpod-", "podman"}};
  if (comp.size() > 6 && comp.substr(comp.size() - 6) == ".scope") {
    for (const auto& [prefix, runtime] : scopes)
      if (comp.substr(0, prefix.size()) == prefix) {
        const auto id = comp.substr(prefix.size(), comp.size() - 6 - prefix.size());
        if (id.size() >= 12 && is_hex(id))
          return ContainerId{std::string(runtime), std::string(id), ""};
      }
  }
  static const std::pair<std::string_view, std::string_view> dirs[] = {
      {"docker", "docker"}, {"containerd", "containerd"}, {"libpod", "podman"}, {"crio", "cri-o"}};
  for (const auto& [dir, runtime] : dirs)
    if (parent == dir && comp.size() >= 12 && is_hex(comp))
      return ContainerId{std::string(runtime), std::string(comp), ""};
  return std::nullopt;
}

std::optional<ContainerId> container_of(const std::string& path) {
  std::optional<ContainerId> out;
  std::string_view parent;
  std::string pod;
  const bool kube = path.find("kubepods") != std::string::npos;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    const std::string_view comp(path.data() + start, end - start);
    if (!out) out = from_component(comp, parent);
    if (kube) {
      // "pod<uid>" or "kubepods-burstable-pod<uid>.slice" (uid with '_' for '-')
      if (auto at = comp.find("pod");
          at != std::string_view::npos && comp.substr(0, 8) != "kubepods")
        pod = std::string(comp.substr(at + 3, 36));
      else if (auto at2 = comp.rfind("-pod"); at2 != std::string_view::npos)
        pod = std::string(comp.substr(at2 + 4, 36));
      if (!out && comp.size() == 64 && is_hex(comp))
        out = ContainerId{"kubernetes", std::string(comp), ""};
    }
    parent = comp;
    start = end + 1;
  }
  if (out && !pod.empty() && pod.size() == 36) {
    std::replace(pod.begin(), pod.end(), '_', '-');
    out->pod = pod;
  }
  return out;
}

class ContainerPlugin : public sdk::StatusPlugin {
 public:
  using StatusPlugin::StatusPlugin;
  void before_query(sdk::Status&) override { cache_.clear(); }
  void get_process_info(sdk::Status& s, sdk::Gpu&, sdk::Process& p) override {
    const auto& found = cache_.get(p.pid(), [&] { return lookup(s, p.pid()); });
    if (!found) return;
    p.set("container", found->label());
    if (!found->pod.empty()) p.set("k8s_pod", found->pod);
  }

 private:
  static std::optional<ContainerId> lookup(sdk::Status& s, int pid) {
    auto cg = read_file(s.proc_root() + "/" + std::to_string(pid) + "/cgroup");
    if (!cg) return std::nullopt;
    auto entries = procfs::parse_pid_cgroup(*cg);
    if (!entries) return std::nullopt;
    for (const auto& e : *entries)
      if (auto c = container_of(e.path)) return c;
    return std::nullopt;
  }
  PidCache<ContainerId> cache_;
};

}  // namespace

std::optional<ContainerId> container_of_cgroup(const std::string& cgroup_path) {
  return container_of(cgroup_path);
}

std::string ContainerId::label() const {
  return runtime + ":" + id.substr(0, 12);
}

StatusPluginRef container_status_plugin() {
  return {"container", "container of each GPU process (from its cgroup)", 0, "builtin",
          sdk::detail::StatusAdapter<ContainerPlugin>::table()};
}

}  // namespace sonde::status
