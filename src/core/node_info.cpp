#include "core/node_info.hpp"

#include <sys/utsname.h>

#include <algorithm>
#include <charconv>
#include <system_error>

#include <fmt/format.h>

#include "core/cgroup.hpp"
#include "core/procfs.hpp"

namespace sonde {
namespace {

std::string pid_dir(const Roots& roots, int pid) {
  return roots.proc + "/" + (pid == 0 ? std::string("self") : std::to_string(pid));
}

// The parsers name the file as "/proc/..."; point the message at the file actually read, which
// differs under a fixture root.
Error reroot(const Error& e, std::string_view generic_path, const std::string& actual_path) {
  std::string msg = e.message;
  if (msg.rfind(generic_path, 0) == 0) msg.replace(0, generic_path.size(), actual_path);
  return make_error(e.code, std::move(msg));
}

std::string_view trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r";
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

template <class T>
std::optional<T> to_num(std::string_view s) {
  s = trim(s);
  T v{};
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

std::string last_component(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

struct Limit {
  std::uint64_t bytes = 0;
  std::string source;
};

void consider(std::optional<Limit>& best, std::uint64_t bytes, std::string source) {
  // Strictly smaller: on a tie the first found (the deepest cgroup) names the source.
  if (!best || bytes < best->bytes) best = Limit{bytes, std::move(source)};
}

// Smallest memory limit of chain[from..], i.e. of that cgroup and its ancestors. Unreadable or
// malformed files are skipped: a cgroup without the memory controller simply has no file.
void consider_chain(std::optional<Limit>& best, const std::vector<CgroupDir>& chain,
                    std::size_t from, const char* file, const std::string& label) {
  for (std::size_t i = from; i < chain.size(); ++i) {
    auto text = read_file(chain[i].dir + "/" + file);
    if (!text) continue;
    auto limit = procfs::parse_memory_limit(*text);
    if (limit && limit->has_value())
      consider(best, **limit, label + " (" + chain[i].cgroup_path + ")");
  }
}

std::optional<std::size_t> find_job_dir(const std::vector<CgroupDir>& chain,
                                        const std::string& job_dir_name) {
  for (std::size_t i = 0; i < chain.size(); ++i)
    if (last_component(chain[i].cgroup_path) == job_dir_name) return i;
  return std::nullopt;
}

std::optional<double> min_quota(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

}  // namespace

Result<NodeInfo> discover_node_info(const Roots& roots, const TargetInfo& target) {
  NodeInfo info;
  utsname uts{};
  if (::uname(&uts) == 0) {
    info.hostname = uts.nodename;
    info.kernel = uts.release;
  }

  const std::string stat_path = roots.proc + "/stat";
  auto stat_text = read_file(stat_path);
  if (!stat_text) return stat_text.error();
  auto stat = procfs::parse_proc_stat(*stat_text);
  if (!stat) return reroot(stat.error(), "/proc/stat", stat_path);
  info.system_cpu_ids = stat->cpu_ids;
  info.num_system_cpus = static_cast<int>(stat->cpu_ids.size());

  const std::string meminfo_path = roots.proc + "/meminfo";
  auto meminfo_text = read_file(meminfo_path);
  if (!meminfo_text) return meminfo_text.error();
  auto meminfo = procfs::parse_meminfo(*meminfo_text);
  if (!meminfo) return reroot(meminfo.error(), "/proc/meminfo", meminfo_path);
  if (!meminfo->total_bytes || *meminfo->total_bytes == 0)
    return make_error(Errc::parse, meminfo_path + ": expected a non-zero 'MemTotal:' line");
  info.mem_total_bytes = *meminfo->total_bytes;

  const std::string dir = pid_dir(roots, target.pid);

  // Affinity; without a readable status every online CPU is assumed usable.
  if (auto status_text = read_file(dir + "/status")) {
    if (auto status = procfs::parse_pid_status(*status_text);
        status && !status->cpus_allowed.empty())
      info.cpu_handles = status->cpus_allowed;
  }
  if (info.cpu_handles.empty()) info.cpu_handles = info.system_cpu_ids;
  std::sort(info.cpu_handles.begin(), info.cpu_handles.end());
  info.cpu_handles.erase(std::unique(info.cpu_handles.begin(), info.cpu_handles.end()),
                         info.cpu_handles.end());

  std::vector<procfs::CgroupEntry> cgroups;
  if (auto text = read_file(dir + "/cgroup"))
    if (auto parsed = procfs::parse_pid_cgroup(*text)) cgroups = std::move(parsed).value();
  std::vector<procfs::CgroupMount> mounts;
  if (auto text = read_file(roots.proc + "/self/mountinfo"))
    if (auto parsed = procfs::parse_cgroup_mounts(*text)) mounts = std::move(parsed).value();

  const auto v2_chain = cgroup_chain(roots, cgroups, mounts, true, {});
  const auto v1_cpu_chain = cgroup_chain(roots, cgroups, mounts, false, "cpu");
  const auto v1_mem_chain = cgroup_chain(roots, cgroups, mounts, false, "memory");

  // CPU quota: every level of the hierarchy throttles, so the smallest one is what binds.
  std::optional<double> quota;
  for (const auto& d : v2_chain) {
    auto text = read_file(d.dir + "/cpu.max");
    if (!text) continue;
    if (auto q = procfs::parse_cpu_max(*text); q && q->has_value()) quota = min_quota(quota, **q);
  }
  for (const auto& d : v1_cpu_chain) {
    auto q_text = read_file(d.dir + "/cpu.cfs_quota_us");
    auto p_text = read_file(d.dir + "/cpu.cfs_period_us");
    if (!q_text || !p_text) continue;
    const auto q = to_num<long long>(*q_text);
    const auto p = to_num<long long>(*p_text);
    // A quota of -1 means unlimited.
    if (q && p && *q > 0 && *p > 0)
      quota = min_quota(quota, static_cast<double>(*q) / static_cast<double>(*p));
  }
  info.cpu_quota = quota;
  info.num_cpus = static_cast<double>(info.cpu_handles.size());
  if (quota) info.num_cpus = std::min(info.num_cpus, *quota);

  // What 100 % CPU means per level.
  {
    const auto pi = level_index(Level::process), ui = level_index(Level::user),
               si = level_index(Level::slurm), yi = level_index(Level::system);
    info.level_cpu_ids[pi] = info.cpu_handles;
    info.level_num_cpus[pi] = info.num_cpus;
    info.level_cpus_source[pi] =
        quota && *quota < static_cast<double>(info.cpu_handles.size())
            ? fmt::format("the target's cgroup CPU quota ({:g} CPUs)", *quota)
            : "the target's CPU affinity";
    std::vector<int> node_ids = info.system_cpu_ids;
    std::sort(node_ids.begin(), node_ids.end());
    for (auto i : {ui, si, yi}) {
      info.level_cpu_ids[i] = node_ids;
      info.level_num_cpus[i] = static_cast<double>(node_ids.size());
      info.level_cpus_source[i] = "every CPU of the node";
    }
    info.level_cpus_source[ui] = "every CPU of the node (a user's processes may run on any)";
    if (target.slurm_job) {
      const std::string job_dir_name = "job_" + *target.slurm_job;
      const auto v1_cpuset_chain = cgroup_chain(roots, cgroups, mounts, false, "cpuset");
      std::optional<std::vector<int>> job_cpus;
      std::string where;
      for (const auto* chain : {&v2_chain, &v1_cpuset_chain}) {
        if (job_cpus) break;
        auto i = find_job_dir(*chain, job_dir_name);
        if (!i) continue;
        for (const char* file : {"cpuset.cpus.effective", "cpuset.effective_cpus", "cpuset.cpus"}) {
          auto text = read_file((*chain)[*i].dir + "/" + file);
          if (!text) continue;
          auto list = procfs::parse_cpu_list(*text);
          if (list && !list->empty()) {
            job_cpus = std::move(*list);
            where = fmt::format("the job's cgroup cpuset ({} {})", (*chain)[*i].cgroup_path, file);
            break;
          }
        }
      }
      if (job_cpus) {
        std::sort(job_cpus->begin(), job_cpus->end());
        info.level_cpu_ids[si] = *job_cpus;
        info.level_num_cpus[si] = static_cast<double>(job_cpus->size());
        info.level_cpus_source[si] = where;
      } else {
        info.level_cpus_source[si] = "every CPU of the node (no cgroup cpuset for the job found)";
      }
    }
  }

  // Memory limits per level.
  std::optional<Limit> process;
  consider_chain(process, v2_chain, 0, "memory.max", "cgroup v2 memory.max");
  consider_chain(process, v1_mem_chain, 0, "memory.limit_in_bytes",
                 "cgroup v1 memory.limit_in_bytes");
  if (auto text = read_file(dir + "/limits")) {
    if (auto as = procfs::parse_limits_address_space(*text); as && as->has_value())
      consider(process, **as, "RLIMIT_AS");
  }

  std::optional<Limit> slurm;
  if (target.slurm_job) {
    const std::string job_dir_name = "job_" + *target.slurm_job;
    if (auto i = find_job_dir(v2_chain, job_dir_name))
      consider_chain(slurm, v2_chain, *i, "memory.max", "cgroup v2 memory.max");
    if (auto i = find_job_dir(v1_mem_chain, job_dir_name))
      consider_chain(slurm, v1_mem_chain, *i, "memory.limit_in_bytes",
                     "cgroup v1 memory.limit_in_bytes");
    if (!slurm) {
      if (auto env = read_file(dir + "/environ")) {
        // In MiB; 0 is Slurm's "all of the node's memory", i.e. no limit of its own.
        if (auto v = procfs::environ_value(*env, "SLURM_MEM_PER_NODE"))
          if (auto mib = to_num<std::uint64_t>(*v); mib && *mib > 0 && *mib < (1ull << 44))
            slurm = Limit{*mib << 20, "SLURM_MEM_PER_NODE"};
      }
    }
  }

  const Limit mem_total{info.mem_total_bytes, "MemTotal"};
  auto capped = [&mem_total](const std::optional<Limit>& l) {
    return l && l->bytes < mem_total.bytes ? *l : mem_total;
  };
  const std::array<Limit, kNumLevels> limits = {capped(process), mem_total, capped(slurm),
                                                mem_total};
  static_assert(level_index(Level::process) == 0 && level_index(Level::user) == 1 &&
                level_index(Level::slurm) == 2 && level_index(Level::system) == 3);
  for (std::size_t i = 0; i < kNumLevels; ++i) {
    info.memory_limit_bytes[i] = limits[i].bytes;
    info.memory_limit_source[i] = limits[i].source;
  }
  return info;
}

Result<TargetInfo> discover_target(const Roots& roots, int pid) {
  TargetInfo t;
  t.pid = pid;
  const std::string dir = pid_dir(roots, pid);
  const std::string status_path = dir + "/status";
  auto status_text = read_file(status_path);
  if (!status_text) return status_text.error();
  auto status = procfs::parse_pid_status(*status_text);
  if (!status) return reroot(status.error(), "/proc/<pid>/status", status_path);
  t.uid = status->uid_real;
  // Another user's environ is unreadable without privileges; the slurm level is then absent.
  if (auto env = read_file(dir + "/environ")) {
    if (auto job = procfs::environ_value(*env, "SLURM_JOB_ID"); job && !job->empty())
      t.slurm_job = std::move(job);
  }
  return t;
}

}  // namespace sonde
