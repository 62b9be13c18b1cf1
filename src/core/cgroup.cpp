#include "core/cgroup.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

namespace sonde {
namespace {

std::string trim(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\r";
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(kSpace) - b + 1));
}

std::optional<std::uint64_t> to_u64(std::string_view s) {
  std::uint64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

}  // namespace

std::vector<CgroupDir> cgroup_chain(const Roots& roots,
                                    const std::vector<procfs::CgroupEntry>& entries,
                                    const std::vector<procfs::CgroupMount>& mounts, bool want_v2,
                                    std::string_view controller) {
  auto has = [controller](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), controller) != list.end();
  };
  for (const auto& e : entries) {
    const bool entry_v2 = e.hierarchy_id == 0 && e.controllers.empty();
    if (want_v2 ? !entry_v2 : (entry_v2 || !has(e.controllers))) continue;
    for (const auto& m : mounts) {
      if (m.v2 != want_v2 || (!want_v2 && !has(m.controllers))) continue;
      // The mount shows the subtree at m.root: strip it to get the path below the mount point.
      std::string rel;
      if (m.root == "/") {
        rel = e.path == "/" ? std::string() : e.path;
      } else if (e.path == m.root) {
        rel.clear();
      } else if (e.path.rfind(m.root + "/", 0) == 0) {
        rel = e.path.substr(m.root.size());
      } else {
        continue;
      }
      const std::string base = roots.mount_dir(m.mount_point);
      const std::string prefix = m.root == "/" ? std::string() : m.root;
      std::vector<CgroupDir> chain;
      while (true) {
        const std::string shown = prefix + rel;
        chain.push_back({shown.empty() ? std::string("/") : shown, base + rel});
        if (rel.empty()) break;
        rel.resize(rel.rfind('/'));
      }
      return chain;
    }
  }
  return {};
}

namespace cgroup {

std::optional<std::uint64_t> parse_single(std::string_view text) {
  return to_u64(trim(text));
}

std::vector<double> parse_usage_percpu(std::string_view text) {
  std::vector<double> out;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
    std::size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n' && text[j] != '\t') ++j;
    if (j == i) break;
    const auto v = to_u64(text.substr(i, j - i));
    if (!v) return {};  // not the file's shape: no per-CPU figures rather than wrong ones
    out.push_back(static_cast<double>(*v) / 1e9);
    i = j;
  }
  return out;
}

std::optional<std::uint64_t> stat_value(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return to_u64(trim(line.substr(key.size() + 1)));
    pos = eol + 1;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> mapped_memory(std::string_view memory_stat, int version) {
  // v1: the hierarchical totals (the group and any subgroup the command made); v2's memory.stat
  // is hierarchical already.
  const auto anon = stat_value(memory_stat, version == 1 ? "total_rss" : "anon");
  const auto mapped = stat_value(memory_stat, version == 1 ? "total_mapped_file" : "file_mapped");
  if (!anon || !mapped) return std::nullopt;
  return *anon + *mapped;
}

namespace {

// Calls f(line's fields) for each non-empty line, fields split on blanks; stops at false.
template <class F>
bool each_line_fields(std::string_view text, F&& f) {
  std::size_t pos = 0;
  std::vector<std::string_view> fields;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    fields.clear();
    std::size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      std::size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (!fields.empty() && !f(fields)) return false;
  }
  return true;
}

bool is_device(std::string_view s) {
  const auto colon = s.find(':');
  return colon != std::string_view::npos && to_u64(s.substr(0, colon)) &&
         to_u64(s.substr(colon + 1));
}

}  // namespace

std::vector<int> parse_procs(std::string_view text) {
  std::vector<int> pids;
  while (!text.empty()) {
    const std::size_t eol = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(std::min(eol + 1, text.size()));
    int pid = 0;
    const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec == std::errc() && end == line.data() + line.size() && pid > 0) pids.push_back(pid);
  }
  return pids;
}

std::optional<std::vector<int>> member_pids(const std::string& dir) {
  auto text = read_file(dir + "/cgroup.procs");
  if (!text) return std::nullopt;
  return parse_procs(*text);
}

std::optional<BlockIo> parse_blkio_service_bytes(std::string_view text) {
  BlockIo io;
  const bool ok = each_line_fields(text, [&](const std::vector<std::string_view>& f) {
    if (f.size() == 2 && f[0] == "Total") return to_u64(f[1]).has_value();  // the sum of Totals
    if (f.size() != 3 || !is_device(f[0])) return false;
    const auto v = to_u64(f[2]);
    if (!v) return false;
    if (f[1] == "Read") io.read_bytes += *v;
    if (f[1] == "Write") io.write_bytes += *v;
    return true;  // Sync, Async, Discard, Total: other cuts of the same bytes
  });
  if (!ok) return std::nullopt;
  return io;
}

std::optional<BlockIo> parse_io_stat(std::string_view text) {
  BlockIo io;
  const bool ok = each_line_fields(text, [&](const std::vector<std::string_view>& f) {
    if (!is_device(f[0])) return false;
    for (std::size_t i = 1; i < f.size(); ++i) {
      const auto eq = f[i].find('=');
      if (eq == std::string_view::npos) return false;
      const std::string_view key = f[i].substr(0, eq);
      if (key != "rbytes" && key != "wbytes") continue;
      const auto v = to_u64(f[i].substr(eq + 1));
      if (!v) return false;
      (key == "rbytes" ? io.read_bytes : io.write_bytes) += *v;
    }
    return true;
  });
  if (!ok) return std::nullopt;
  return io;
}

Reading read(const Group& g) {
  Reading r;
  if (!g) return r;
  if (g.version == 1) {
    if (auto t = read_file(g.cpu_dir + "/cpuacct.usage"))
      if (auto ns = parse_single(*t)) r.cpu_s = static_cast<double>(*ns) / 1e9;
    if (auto t = read_file(g.cpu_dir + "/cpuacct.usage_percpu"))
      r.cpu_s_by_id = parse_usage_percpu(*t);
    if (!g.memory_dir.empty()) {
      if (auto t = read_file(g.memory_dir + "/memory.stat")) r.memory_bytes = mapped_memory(*t, 1);
      if (auto t = read_file(g.memory_dir + "/memory.max_usage_in_bytes"))
        r.memory_peak_bytes = parse_single(*t);
    }
  } else {
    if (auto t = read_file(g.cpu_dir + "/cpu.stat"))
      if (auto us = stat_value(*t, "usage_usec")) r.cpu_s = static_cast<double>(*us) / 1e6;
    if (!g.memory_dir.empty()) {
      if (auto t = read_file(g.memory_dir + "/memory.stat")) r.memory_bytes = mapped_memory(*t, 2);
      if (auto t = read_file(g.memory_dir + "/memory.peak")) r.memory_peak_bytes = parse_single(*t);
    }
  }
  return r;
}

namespace {

// Makes `dir` (a stale one of the same name, left by a run that was killed, is removed first).
Result<void> make_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) return {};
  if (errno == EEXIST && ::rmdir(dir.c_str()) == 0 && ::mkdir(dir.c_str(), 0755) == 0) return {};
  return make_error(Errc::io,
                    fmt::format("cannot make the cgroup {}: {}", dir, std::strerror(errno)));
}

// Groups of earlier runs whose sonde was killed (SIGKILL, the OOM killer) before removing them:
// `sonde-run-<pid>` below `parent` whose pid is gone. rmdir removes only an empty group; one
// whose command still runs stays, as the command is never touched.
void remove_stale(const std::string& parent) {
  auto names = list_dir(parent);
  if (!names) return;
  constexpr std::string_view kPrefix = "sonde-run-";
  for (const std::string& n : *names) {
    if (n.rfind(kPrefix, 0) != 0) continue;
    int pid = 0;
    const char* b = n.data() + kPrefix.size();
    auto [p, ec] = std::from_chars(b, n.data() + n.size(), pid);
    if (ec != std::errc() || p != n.data() + n.size() || pid <= 0) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its sonde (or a pid reuse) lives
    ::rmdir((parent + "/" + n).c_str());
  }
}

}  // namespace

Result<RunGroup> RunGroup::create(const Roots& roots, const std::string& name) {
  std::vector<procfs::CgroupEntry> entries;
  if (auto text = read_file(roots.proc + "/self/cgroup"))
    if (auto parsed = procfs::parse_pid_cgroup(*text)) entries = std::move(parsed).value();
  std::vector<procfs::CgroupMount> mounts;
  if (auto text = read_file(roots.proc + "/self/mountinfo"))
    if (auto parsed = procfs::parse_cgroup_mounts(*text)) mounts = std::move(parsed).value();

  RunGroup rg;
  auto add = [&](const CgroupDir& parent) -> Result<std::string> {
    const std::string dir = parent.dir + "/" + name;
    remove_stale(parent.dir);
    if (auto made = make_dir(dir); !made) return made.error();
    rg.dirs_.push_back(dir);
    rg.parent_dirs_.push_back(parent.dir);
    const int fd = ::open((dir + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return make_error(Errc::io,
                        fmt::format("cannot open {}/cgroup.procs: {}", dir, std::strerror(errno)));
    rg.procs_fds_.push_back(fd);
    return dir;
  };
  // The group whose CPU time is the run's: `name` below `parent`, in a v1 or v2 hierarchy.
  auto add_cpu = [&](const CgroupDir& parent, int version) -> Result<std::string> {
    auto dir = add(parent);
    if (!dir) return dir.error();
    rg.group_.version = version;
    rg.group_.path = (parent.cgroup_path == "/" ? "" : parent.cgroup_path) + "/" + name;
    rg.group_.cpu_dir = *dir;
    return dir;
  };
  const auto cpuacct = cgroup_chain(roots, entries, mounts, false, "cpuacct");
  if (!cpuacct.empty()) {
    if (auto dir = add_cpu(cpuacct.front(), 1); !dir) return dir.error();
    // Memory is optional: without it the level's memory stays the Pss sum.
    const auto memory = cgroup_chain(roots, entries, mounts, false, "memory");
    if (!memory.empty())
      if (auto mdir = add(memory.front())) rg.group_.memory_dir = *mdir;
    return rg;
  }
  const auto unified = cgroup_chain(roots, entries, mounts, true, {});
  if (unified.empty())
    return make_error(Errc::unavailable,
                      "sonde is in no cpuacct (v1) or unified (v2) cgroup hierarchy it can see");
  auto dir = add_cpu(unified.front(), 2);
  if (!dir) return dir.error();
  if (::access((*dir + "/cpu.stat").c_str(), R_OK) != 0)
    return make_error(Errc::unavailable, fmt::format("{}/cpu.stat is not readable", *dir));
  // memory.stat exists only where the parent enabled the memory controller for its children.
  if (::access((*dir + "/memory.stat").c_str(), R_OK) == 0) rg.group_.memory_dir = *dir;
  return rg;
}

RunGroup::RunGroup(RunGroup&& o) noexcept
    : group_(std::move(o.group_)),
      dirs_(std::move(o.dirs_)),
      parent_dirs_(std::move(o.parent_dirs_)),
      procs_fds_(std::move(o.procs_fds_)) {
  o.dirs_.clear();
  o.procs_fds_.clear();
}

RunGroup& RunGroup::operator=(RunGroup&& o) noexcept {
  if (this != &o) {
    remove();
    group_ = std::move(o.group_);
    dirs_ = std::move(o.dirs_);
    parent_dirs_ = std::move(o.parent_dirs_);
    procs_fds_ = std::move(o.procs_fds_);
    o.dirs_.clear();
    o.procs_fds_.clear();
  }
  return *this;
}

RunGroup::~RunGroup() {
  remove();
}

std::string RunGroup::remove() {
  for (int fd : procs_fds_) ::close(fd);
  procs_fds_.clear();
  std::string problems;
  // Leaf directories first (made in order: cpuacct/unified, then memory).
  for (std::size_t i = dirs_.size(); i-- > 0;) {
    const std::string& dir = dirs_[i];
    // Members still alive (a daemon the command left behind) go back to sonde's own cgroup.
    if (auto pids = member_pids(dir)) {
      const int parent = ::open((parent_dirs_[i] + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
      for (std::size_t k = 0; parent >= 0 && k < pids->size(); ++k) {
        const std::string pid = std::to_string((*pids)[k]);
        (void)!::write(parent, pid.data(), pid.size());
      }
      if (parent >= 0) ::close(parent);
    }
    bool removed = false;
    for (int attempt = 0; attempt < 50 && !removed; ++attempt) {
      removed = ::rmdir(dir.c_str()) == 0 || errno == ENOENT;
      if (!removed && errno != EBUSY) break;
      if (!removed) ::usleep(10000);  // a member that exited is leaving the group
    }
    if (!removed)
      problems += fmt::format("{}cannot remove the cgroup {}: {}", problems.empty() ? "" : "; ",
                              dir, std::strerror(errno));
  }
  dirs_.clear();
  return problems;
}

}  // namespace cgroup
}  // namespace sonde
