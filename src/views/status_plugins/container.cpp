// Container of each GPU process, from the runtime's cgroup names in /proc/<pid>/cgroup:
// docker-<id>.scope or /docker/<id> (Docker), cri-containerd-<id>.scope or /containerd/<id>
// (containerd), crio-<id>.scope (CRI-O), libpod-<id>.scope (Podman); under kubepods, the pod
// uid too. The field is "<runtime>:<first 12 hex digits>".
#include <regex>
#include <sonde/sdk.hpp>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "views/status_plugins/builtin.hpp"

namespace sonde::status {
namespace {

struct ContainerId {
  std::string runtime;
  std::string id;
  std::string pod;  ///< kubernetes pod uid, "" outside kubepods
};

std::optional<ContainerId> container_of(const std::string& path) {
  static const std::regex scope_re("(docker|cri-containerd|crio|libpod)-([0-9a-f]{12,64})\\.scope");
  static const std::regex dir_re("/(docker|containerd|libpod|crio)/([0-9a-f]{12,64})(/|$)");
  static const std::regex kube_id_re("/([0-9a-f]{64})(/|$)");
  static const std::regex pod_re("pod([0-9a-f_-]{36})");
  std::optional<ContainerId> out;
  std::smatch m;
  if (std::regex_search(path, m, scope_re) || std::regex_search(path, m, dir_re)) {
    std::string rt = m[1].str();
    if (rt == "cri-containerd") rt = "containerd";
    if (rt == "libpod") rt = "podman";
    if (rt == "crio") rt = "cri-o";
    out = ContainerId{rt, m[2].str(), ""};
  }
  if (path.find("kubepods") != std::string::npos) {
    if (!out && std::regex_search(path, m, kube_id_re))
      out = ContainerId{"kubernetes", m[1].str(), ""};
    if (out && std::regex_search(path, m, pod_re)) {
      std::string uid = m[1].str();
      for (auto& ch : uid)
        if (ch == '_') ch = '-';
      out->pod = uid;
    }
  }
  return out;
}

class ContainerPlugin : public sdk::StatusPlugin {
 public:
  using StatusPlugin::StatusPlugin;
  void get_process_info(sdk::Status& s, sdk::Gpu&, sdk::Process& p) override {
    auto cg = read_file(s.proc_root() + "/" + std::to_string(p.pid()) + "/cgroup");
    if (!cg) return;
    auto entries = procfs::parse_pid_cgroup(*cg);
    if (!entries) return;
    for (const auto& e : *entries) {
      if (auto c = container_of(e.path)) {
        p.set("container", c->runtime + ":" + c->id.substr(0, 12));
        if (!c->pod.empty()) p.set("k8s_pod", c->pod);
        return;
      }
    }
  }
};

}  // namespace

StatusPluginRef container_status_plugin() {
  return {"container", "container of each GPU process (from its cgroup)", 0, "builtin",
          sdk::detail::StatusAdapter<ContainerPlugin>::table()};
}

}  // namespace sonde::status
