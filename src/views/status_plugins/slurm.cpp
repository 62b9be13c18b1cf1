// Slurm job of each GPU process: SLURM_JOB_ID in /proc/<pid>/environ (readable for one's own
// processes and root), else the job_<id> component of its cgroup (slurmd's cgroup plugin).
#include <cctype>
#include <map>
#include <optional>
#include <sonde/sdk.hpp>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "views/status_plugins/builtin.hpp"
#include "views/status_plugins/pid_cache.hpp"

namespace sonde::status {
namespace {

class SlurmPlugin : public sdk::StatusPlugin {
 public:
  using StatusPlugin::StatusPlugin;
  void before_query(sdk::Status&) override { cache_.clear(); }
  void get_process_info(sdk::Status& s, sdk::Gpu&, sdk::Process& p) override {
    const auto& job = cache_.get(p.pid(), [&] { return lookup(s, p.pid()); });
    if (job) p.set("slurm_job_id", *job);
  }

 private:
  static std::optional<std::string> lookup(sdk::Status& s, int pid) {
    const std::string dir = s.proc_root() + "/" + std::to_string(pid);
    if (auto env = read_file(dir + "/environ")) {
      if (auto job = procfs::environ_value(*env, "SLURM_JOB_ID"); job && !job->empty()) return job;
    }
    auto cg = read_file(dir + "/cgroup");
    if (!cg) return std::nullopt;
    auto entries = procfs::parse_pid_cgroup(*cg);
    if (!entries) return std::nullopt;
    for (const auto& e : *entries) {
      // ".../job_<digits>/..." (slurmd's cgroup plugin, v1 and v2)
      for (std::size_t at = e.path.find("/job_"); at != std::string::npos;
           at = e.path.find("/job_", at + 1)) {
        std::size_t end = at + 5;
        while (end < e.path.size() && std::isdigit(static_cast<unsigned char>(e.path[end]))) ++end;
        if (end > at + 5 && (end == e.path.size() || e.path[end] == '/'))
          return e.path.substr(at + 5, end - at - 5);
      }
    }
    return std::nullopt;
  }
  PidCache<std::string> cache_;
};

}  // namespace

StatusPluginRef slurm_status_plugin() {
  return {"slurm", "Slurm job id of each GPU process", 0, "builtin",
          sdk::detail::StatusAdapter<SlurmPlugin>::table()};
}

}  // namespace sonde::status
