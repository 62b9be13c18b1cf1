// Fuzz target: every pure /proc and /sys parser of src/core/procfs.hpp on the same text. Besides
// "no crash, no sanitizer report", it checks what the parsers promise: an accepted /proc/stat has
// one id per per-CPU line, CPU ids stay within the parser's bound, meminfo sizes are whole kB, the
// Slurm job read from a cgroup file is a plain id, the cgroup control files' parsers (cpuacct,
// cpu.stat, memory.stat) give no negative or non-finite time.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/cgroup.hpp"
#include "core/procfs.hpp"
#include "core/slurm_job.hpp"
#include "fuzz_common.hpp"

using sonde::fuzz::check;
namespace procfs = sonde::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  (void)procfs::parse_pid_stat(text);
  (void)procfs::parse_pid_statm(text);
  (void)procfs::parse_pid_smaps_rollup(text);
  (void)procfs::parse_pid_io(text);
  if (auto st = procfs::parse_pid_status(text); st.ok())
    for (int cpu : st->cpus_allowed) check(cpu >= 0 && cpu <= (1 << 16), "status: CPU id range");
  if (auto ps = procfs::parse_proc_stat(text); ps.ok())
    check(ps->cpu_ids.size() == ps->per_cpu.size(), "/proc/stat: one id per cpuN line");
  if (auto mi = procfs::parse_meminfo(text); mi.ok()) {
    for (const auto& v : {mi->total_bytes, mi->available_bytes, mi->free_bytes,
                          mi->swap_total_bytes, mi->swap_free_bytes})
      if (v) check(*v % 1024 == 0, "meminfo: values are whole kB");
  }
  (void)procfs::parse_diskstats(text);
  (void)procfs::parse_net_dev(text);
  if (auto cpus = procfs::parse_cpu_list(text); cpus.ok())
    for (int cpu : *cpus) check(cpu >= 0 && cpu <= (1 << 16), "cpu list: id range");
  (void)procfs::parse_pid_cgroup(text);
  (void)procfs::parse_cgroup_mounts(text);
  (void)procfs::parse_cpu_max(text);
  (void)procfs::parse_memory_limit(text);
  (void)procfs::parse_limits_address_space(text);
  (void)procfs::environ_value(text, "SLURM_JOB_ID");
  // The job of a process from its cgroup file (v1 and v2 layouts): a plain id or none.
  if (auto job = sonde::slurm_job_from_cgroup(text))
    check(sonde::is_plain_job_id(*job), "cgroup: the job is a plain id");
  (void)procfs::is_physical_block_link(text);
  // The cgroup control files (core/cgroup.hpp) that give a level its exact CPU and memory.
  (void)sonde::cgroup::parse_single(text);
  for (double s : sonde::cgroup::parse_usage_percpu(text))
    check(std::isfinite(s) && s >= 0, "usage_percpu: finite, not negative seconds");
  (void)sonde::cgroup::stat_value(text, "usage_usec");
  (void)sonde::cgroup::mapped_memory(text, 1);
  (void)sonde::cgroup::mapped_memory(text, 2);
  return 0;
}
