// The multi-node head's Slurm queries (cli/slurm_queries.hpp): the allocation, a job's nodes and
// owner, the launcher's program.
#include "cli/slurm_queries.hpp"

#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/slurm_job.hpp"
#include "core/trust.hpp"

namespace sonde::cli {
namespace {

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

/// `name` as execvp would find it (a name with '/' as is), or "".
std::string find_program(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  // Under AT_SECURE the invoking user's PATH is not searched (kSecurePath is).
  return search_program(name);
}

/// How long a Slurm client command (squeue, scontrol) may take: slurmctld that does not answer
/// makes them wait for minutes, and the head must go on sampling (and end) without them.
/// $SONDE_SLURM_COMMAND_TIMEOUT (seconds, (0, 3600]) changes it; 10 s by default.
double slurm_command_timeout() {
  static const double t = [] {
    const char* v = std::getenv("SONDE_SLURM_COMMAND_TIMEOUT");
    char* end = nullptr;
    const double d = v ? std::strtod(v, &end) : 0;
    return v && end != v && *end == '\0' && d > 0 && d <= 3600 ? d : 10.0;
  }();
  return t;
}

/// Runs a Slurm client command and captures its output (a few KiB expected), within
/// `timeout_s`. Found as find_program finds it, not by posix_spawnp's own PATH search, which
/// AT_SECURE does not restrict.
Captured capture(const std::vector<std::string>& argv, double timeout_s = slurm_command_timeout()) {
  return run_captured(argv, find_program(argv[0]), timeout_s);
}

std::string first_line(const std::string& s) {
  std::string l = s.substr(0, s.find('\n'));
  return l.size() > 300 ? l.substr(0, 300) + "…" : l;
}

std::vector<std::string> expand_hostnames(const std::string& nodelist) {
  std::vector<std::string> out;
  if (nodelist.empty() || find_program("scontrol").empty()) return out;
  Captured c = capture({"scontrol", "show", "hostnames", nodelist});
  if (c.status != 0) return out;
  std::stringstream ss(c.out);
  std::string line;
  while (std::getline(ss, line))
    if (!line.empty()) out.push_back(line);
  return out;
}

std::string user_name(uid_t uid) {
  if (passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return std::to_string(uid);
}

}  // namespace

std::variant<SlurmAllocation, int> allocation_from_environment() {
  SlurmAllocation a;
  a.job = getenv_str("SLURM_JOB_ID");
  if (a.job.empty()) {
    print_error(
        "run --slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set): run sonde in an "
        "sbatch or salloc job, or use `sonde record --slurm-job ID` from a login node; nothing "
        "was started");
    return kExitUsage;
  }
  if (!is_plain_job_id(a.job)) {
    print_error(fmt::format(
        "run --slurm: SLURM_JOB_ID is '{}', expected a job id (digits); nothing was started",
        a.job));
    return kExitUsage;
  }
  std::string n = getenv_str("SLURM_JOB_NUM_NODES");
  if (n.empty()) n = getenv_str("SLURM_NNODES");
  char* end = nullptr;
  const long nodes = n.empty() ? 0 : std::strtol(n.c_str(), &end, 10);
  if (n.empty() || *end != '\0' || nodes < 1 || nodes > 1'000'000) {
    print_error(fmt::format(
        "run --slurm: SLURM_JOB_NUM_NODES (or SLURM_NNODES) is '{}', expected the number of nodes "
        "of the allocation; nothing was started",
        n));
    return kExitUsage;
  }
  a.nodes = static_cast<int>(nodes);
  a.hostnames = expand_hostnames(getenv_str("SLURM_JOB_NODELIST"));
  if (static_cast<int>(a.hostnames.size()) != a.nodes) a.hostnames.clear();
  a.user = user_name(::getuid());
  return a;
}

std::variant<SlurmAllocation, int> allocation_of_job(const std::string& job) {
  if (!is_plain_job_id(job)) {
    print_error(fmt::format("record --slurm-job: '{}' is not a job id (digits expected)", job));
    return kExitUsage;
  }
  for (const char* tool : {"squeue", "scontrol"})
    if (find_program(tool).empty()) {
      print_error(fmt::format(
          "record --slurm-job: {} was not found on PATH (Slurm's client commands are needed); "
          "nothing was started",
          tool));
      return kExitUsage;
    }
  // State first and the node list last: a pending job has no nodes, and the list is empty.
  Captured q = capture({"squeue", "-j", job, "-h", "-o", "%T|%u|%N"});
  if (q.status == Captured::kTimedOut) {
    print_error(fmt::format("record --slurm-job {}: {} (is slurmctld up?); nothing was started",
                            job, q.err));
    return kExitFailure;
  }
  std::string nodelist, user, state;
  {
    const std::string line = q.out.substr(0, q.out.find('\n'));  // a node list may be long
    const std::size_t a = line.find('|'), b = a == std::string::npos ? a : line.find('|', a + 1);
    if (b != std::string::npos) {
      state = line.substr(0, a);
      user = line.substr(a + 1, b - a - 1);
      nodelist = line.substr(b + 1);
      while (!nodelist.empty() && std::isspace(static_cast<unsigned char>(nodelist.back())))
        nodelist.pop_back();
    }
  }
  if (q.status != 0 || state.empty()) {
    print_error(
        fmt::format("record --slurm-job {}: no such job, or it has ended{}; nothing was started",
                    job, q.err.empty() ? std::string() : " (squeue: " + first_line(q.err) + ")"));
    return kExitUsage;
  }
  if (state != "RUNNING") {
    print_error(fmt::format(
        "record --slurm-job {}: the job is {}, not RUNNING; nothing was started", job, state));
    return kExitUsage;
  }
  const std::string me = user_name(::getuid());
  if (::getuid() != 0 && user != me) {
    print_error(fmt::format(
        "record --slurm-job {}: the job is {}'s, not yours ({}); only root may record another "
        "user's job; nothing was started",
        job, user, me));
    return kExitUsage;
  }
  SlurmAllocation a;
  a.job = job;
  a.user = user;
  a.hostnames = expand_hostnames(nodelist);
  if (a.hostnames.empty()) {
    print_error(fmt::format(
        "record --slurm-job {}: `scontrol show hostnames {}` gave no node; nothing was started",
        job, nodelist));
    return kExitUsage;
  }
  a.nodes = static_cast<int>(a.hostnames.size());
  return a;
}

std::variant<std::string, int> find_launcher(const char* what) {
  const char* srun = program_env("SONDE_SRUN");  // ignored under AT_SECURE
  const std::string name = srun ? srun : "srun";
  std::string path = find_program(name);
  if (path.empty()) {
    print_error(fmt::format(
        "{}: the launcher '{}' was not found{} (sonde starts its agents with srun; SONDE_SRUN "
        "names another launcher); nothing was started",
        what, name, name.find('/') == std::string::npos ? " on PATH" : ""));
    return kExitUsage;
  }
  return path;
}

Captured slurm_command(const std::vector<std::string>& argv) {
  return capture(argv);
}

}  // namespace sonde::cli
