// Slurm job of each GPU process: SLURM_JOB_ID in /proc/<pid>/environ (readable for one's own
// processes and root), else the job_<id> component of its cgroup (slurmd's cgroup plugin).
#include <regex>
#include <sonde/sdk.hpp>

#include "core/fs.hpp"
#include "core/procfs.hpp"
#include "views/status_plugins/builtin.hpp"

namespace sonde::status {
namespace {

class SlurmPlugin : public sdk::StatusPlugin {
 public:
  using StatusPlugin::StatusPlugin;
  void get_process_info(sdk::Status& s, sdk::Gpu&, sdk::Process& p) override {
    const std::string dir = s.proc_root() + "/" + std::to_string(p.pid());
    if (auto env = read_file(dir + "/environ")) {
      if (auto job = procfs::environ_value(*env, "SLURM_JOB_ID"); job && !job->empty()) {
        p.set("slurm_job_id", *job);
        return;
      }
    }
    auto cg = read_file(dir + "/cgroup");
    if (!cg) return;
    auto entries = procfs::parse_pid_cgroup(*cg);
    if (!entries) return;
    static const std::regex job_re("/job_([0-9]+)(/|$)");
    for (const auto& e : *entries) {
      std::smatch m;
      if (std::regex_search(e.path, m, job_re)) {
        p.set("slurm_job_id", m[1].str());
        return;
      }
    }
  }
};

}  // namespace

StatusPluginRef slurm_status_plugin() {
  return {"slurm", "Slurm job id of each GPU process", 0, "builtin",
          sdk::detail::StatusAdapter<SlurmPlugin>::table()};
}

}  // namespace sonde::status
