#include "core/procfs.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>
#include <span>
#include <system_error>

namespace sonde::procfs {
namespace {

constexpr std::string_view kSpace = " \t\n\r\v\f";

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) {
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(kSpace);
  return s.substr(b, e - b + 1);
}

// Next whitespace-separated token of `rest`, consuming it; empty when none is left. Runs of
// separators count as one, so alignment padding (meminfo, diskstats, net/dev) needs no care.
std::string_view next_token(std::string_view& rest) {
  std::size_t i = 0;
  while (i < rest.size() && is_space(rest[i])) ++i;
  std::size_t j = i;
  while (j < rest.size() && !is_space(rest[j])) ++j;
  std::string_view tok = rest.substr(i, j - i);
  rest.remove_prefix(j);
  return tok;
}

// Next line of `rest` into `line`, without its '\n', consuming it and counting it in `line_no`
// (the number the error messages give); false when no line is left.
bool next_numbered_line(std::string_view& rest, std::string_view& line, int& line_no) {
  if (rest.empty()) return false;
  const auto nl = rest.find('\n');
  line = rest.substr(0, nl);
  rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  ++line_no;
  return true;
}

// Parses the whole of `s` as an integer; partial matches ("12ab") and overflow are failures.
template <class T>
bool to_num(std::string_view s, T& out) {
  if (s.empty()) return false;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && p == end;
}

Error parse_error(std::string message) {
  return make_error(Errc::parse, std::move(message));
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 64));
  if (s.size() > 64) out += "...";
  out += "'";
  return out;
}

std::string where_line(std::string_view file, int line) {
  return std::string(file) + ": line " + std::to_string(line) + ": ";
}

// Reads the numbers left in `rest` into `out`, in order, and returns how many tokens there were:
// all of them, those past out.size() counted but not read. A token read that is not a number is an
// error naming the line of `file`, its column (`first_column` for the first token) and the `row`
// (the device, interface or cpu the line is about).
Result<std::size_t> read_numbers(std::string_view rest, std::span<std::uint64_t> out,
                                 std::string_view file, int line_no, std::size_t first_column,
                                 std::string_view row) {
  std::size_t n = 0;
  for (std::string_view tok = next_token(rest); !tok.empty(); tok = next_token(rest), ++n) {
    if (n < out.size() && !to_num(tok, out[n]))
      return parse_error(where_line(file, line_no) + "expected a number in column " +
                         std::to_string(n + first_column) + " of '" + std::string(row) +
                         "', found " + quoted(tok));
  }
  return n;
}

/// The "key: value" lines of `file` (blank lines skipped), each handed to
/// `f(line_no, key, rest, line)`: the key as written before the first colon, the rest after it. A
/// line without a colon is an error that names the `form` expected. `f` returns an error to stop
/// with it.
template <typename F>
Result<void> for_each_colon_line(std::string_view text, std::string_view file,
                                 std::string_view form, F&& f) {
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    if (trim(line).empty()) continue;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return parse_error(where_line(file, line_no) + "expected '" + std::string(form) +
                         "', found " + quoted(line));
    if (auto ok = f(line_no, line.substr(0, colon), line.substr(colon + 1), line); !ok) return ok;
  }
  return {};
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// mountinfo escapes space, tab, newline and backslash in paths as \ooo (octal).
std::string unescape_octal(std::string_view s) {
  auto octal = [](char ch) { return ch >= '0' && ch <= '7'; };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && octal(s[i + 1]) && octal(s[i + 2]) && octal(s[i + 3])) {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
      continue;
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

Result<PidStat> parse_pid_stat(std::string_view text) {
  PidStat st;
  // comm is free text chosen by the process: only the last ')' reliably ends it.
  const auto open = text.find('(');
  const auto close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return parse_error("/proc/<pid>/stat: expected 'pid (comm) state ...', found " + quoted(text));
  if (!to_num(trim(text.substr(0, open)), st.pid))
    return parse_error("/proc/<pid>/stat: expected a pid before '(', found " +
                       quoted(text.substr(0, open)));
  st.comm.assign(text.substr(open + 1, close - open - 1));

  // Built only on the error path so that a good line allocates nothing but comm.
  auto fail = [&st](int field, std::string_view what, std::string_view tok) {
    return parse_error("/proc/" + std::to_string(st.pid) + "/stat: field " + std::to_string(field) +
                       " (" + std::string(what) + "): expected an integer, found " + quoted(tok));
  };

  std::string_view rest = text.substr(close + 1);
  int field = 2;  // comm
  for (std::string_view tok = next_token(rest); !tok.empty(); tok = next_token(rest)) {
    ++field;
    switch (field) {
      case 3:
        if (tok.size() != 1)
          return parse_error("/proc/" + std::to_string(st.pid) +
                             "/stat: field 3 (state): expected one character, found " +
                             quoted(tok));
        st.state = tok[0];
        break;
      case 4:
        if (!to_num(tok, st.ppid)) return fail(field, "ppid", tok);
        break;
      case 10:
        if (!to_num(tok, st.minflt)) return fail(field, "minflt", tok);
        break;
      case 11:
        if (!to_num(tok, st.cminflt)) return fail(field, "cminflt", tok);
        break;
      case 12:
        if (!to_num(tok, st.majflt)) return fail(field, "majflt", tok);
        break;
      case 14:
        if (!to_num(tok, st.utime_ticks)) return fail(field, "utime", tok);
        break;
      case 15:
        if (!to_num(tok, st.stime_ticks)) return fail(field, "stime", tok);
        break;
      case 16:
        if (!to_num(tok, st.cutime_ticks)) return fail(field, "cutime", tok);
        break;
      case 17:
        if (!to_num(tok, st.cstime_ticks)) return fail(field, "cstime", tok);
        break;
      case 20:
        if (!to_num(tok, st.num_threads)) return fail(field, "num_threads", tok);
        break;
      case 22:
        if (!to_num(tok, st.starttime_ticks)) return fail(field, "starttime", tok);
        break;
      case 24:
        if (!to_num(tok, st.rss_pages)) return fail(field, "rss", tok);
        break;
      case 28:
        if (!to_num(tok, st.start_stack)) return fail(field, "startstack", tok);
        break;
      case 39:
        if (!to_num(tok, st.processor)) return fail(field, "processor", tok);
        break;
      default: break;
    }
    if (field == 39) break;  // nothing further is used; skip the tail of the line
  }
  if (field < 24)
    return parse_error("/proc/" + std::to_string(st.pid) +
                       "/stat: expected at least 22 fields after the command (through rss, "
                       "field 24), found " +
                       std::to_string(field - 2));
  return st;
}

Result<PidStatm> parse_pid_statm(std::string_view text) {
  PidStatm m;
  std::string_view rest = text;
  std::uint64_t* fields[] = {&m.size_pages, &m.resident_pages, &m.shared_pages};
  static constexpr const char* kNames[] = {"size", "resident", "shared"};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string_view tok = next_token(rest);
    if (!to_num(tok, *fields[i]))
      return parse_error(std::string("/proc/<pid>/statm: field ") + std::to_string(i + 1) + " (" +
                         kNames[i] + "): expected an integer, found " + quoted(tok));
  }
  return m;
}

Result<PidSmapsRollup> parse_pid_smaps_rollup(std::string_view text) {
  // The first line names the address range ("00400000-7ffd… ---p 00000000 00:00 0 [rollup]"),
  // then "Name:   value kB" lines.
  PidSmapsRollup r;
  bool have_pss = false;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::uint64_t* out = key == "Pss" ? &r.pss_bytes : key == "Rss" ? &r.rss_bytes : nullptr;
    if (!out) continue;
    std::string_view rest = line.substr(colon + 1);
    const std::string_view value = next_token(rest);
    const std::string_view unit = next_token(rest);
    std::uint64_t kib = 0;
    if (!to_num(value, kib) || unit != "kB" || kib > UINT64_MAX / 1024)
      return parse_error(where_line("/proc/<pid>/smaps_rollup", line_no) + "expected '" +
                         std::string(key) + ": <n> kB', found " + quoted(line));
    *out = kib * 1024;
    have_pss = have_pss || out == &r.pss_bytes;
  }
  if (!have_pss) return parse_error("/proc/<pid>/smaps_rollup: no Pss line");
  return r;
}

Result<PidIo> parse_pid_io(std::string_view text) {
  PidIo io;
  struct Key {
    std::string_view name;
    std::uint64_t PidIo::*member;
  };
  static constexpr std::array<Key, 7> kKeys = {{
      {"rchar", &PidIo::rchar},
      {"wchar", &PidIo::wchar},
      {"syscr", &PidIo::syscr},
      {"syscw", &PidIo::syscw},
      {"read_bytes", &PidIo::read_bytes},
      {"write_bytes", &PidIo::write_bytes},
      {"cancelled_write_bytes", &PidIo::cancelled_write_bytes},
  }};
  unsigned seen = 0;
  auto lines = for_each_colon_line(
      text, "/proc/<pid>/io", "name: value",
      [&](int line_no, std::string_view name, std::string_view rest,
          std::string_view) -> Result<void> {
        const std::string_view key = trim(name);
        for (std::size_t i = 0; i < kKeys.size(); ++i) {
          if (kKeys[i].name != key) continue;
          const std::string_view value = trim(rest);
          if (!to_num(value, io.*kKeys[i].member))
            return parse_error(where_line("/proc/<pid>/io", line_no) + "expected an integer for '" +
                               std::string(key) + "', found " + quoted(value));
          seen |= 1u << i;
        }
        return {};
      });
  if (!lines) return lines.error();
  for (std::size_t i = 0; i < kKeys.size(); ++i)
    if (!(seen & (1u << i)))
      return parse_error("/proc/<pid>/io: expected a '" + std::string(kKeys[i].name) +
                         ":' line, found none");
  return io;
}

Result<PidStatus> parse_pid_status(std::string_view text) {
  PidStatus st;
  bool have_name = false, have_ppid = false, have_uid = false;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    const std::string_view value = line.substr(colon + 1);
    if (key == "Name") {
      // The kernel escapes the name itself; only the tab after the colon is ours to strip.
      std::string_view v = value;
      if (!v.empty() && v.front() == '\t') v.remove_prefix(1);
      st.name.assign(v);
      have_name = true;
    } else if (key == "PPid") {
      if (!to_num(trim(value), st.ppid))
        return parse_error(where_line("/proc/<pid>/status", line_no) +
                           "expected an integer after 'PPid:', found " + quoted(trim(value)));
      have_ppid = true;
    } else if (key == "Uid") {
      std::string_view rest = value;
      const std::string_view real = next_token(rest);
      const std::string_view effective = next_token(rest);
      if (!to_num(real, st.uid_real) || !to_num(effective, st.uid_effective))
        return parse_error(where_line("/proc/<pid>/status", line_no) +
                           "expected 'Uid: real effective saved fs', found " + quoted(line));
      have_uid = true;
    } else if (key == "Cpus_allowed_list") {
      auto cpus = parse_cpu_list(value);
      if (!cpus)
        return parse_error(where_line("/proc/<pid>/status", line_no) + cpus.error().message);
      st.cpus_allowed = std::move(cpus).value();
    } else if (key == "NSpid") {
      std::string_view rest = value;
      for (std::string_view tok = next_token(rest); !tok.empty(); tok = next_token(rest)) {
        int v = 0;
        if (!to_num(tok, v) || v <= 0)
          return parse_error(where_line("/proc/<pid>/status", line_no) +
                             "expected pids after 'NSpid:', found " + quoted(trim(value)));
        st.ns_pids.push_back(v);
      }
    }
  }
  if (!have_name) return parse_error("/proc/<pid>/status: expected a 'Name:' line, found none");
  if (!have_ppid) return parse_error("/proc/<pid>/status: expected a 'PPid:' line, found none");
  if (!have_uid) return parse_error("/proc/<pid>/status: expected a 'Uid:' line, found none");
  return st;
}

Result<ProcStat> parse_proc_stat(std::string_view text) {
  ProcStat ps;
  bool have_total = false;
  bool in_cpu_lines = false;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    if (!starts_with(line, "cpu")) {
      // The cpu lines come first; the rest (intr alone can be thousands of numbers) is not ours.
      if (in_cpu_lines) break;
      continue;
    }
    in_cpu_lines = true;
    std::string_view rest = line;
    const std::string_view name = next_token(rest);
    CpuTimes* times = nullptr;
    if (name == "cpu") {
      times = &ps.total;
      have_total = true;
    } else {
      int id = -1;
      if (!to_num(name.substr(3), id) || id < 0)
        return parse_error(where_line("/proc/stat", line_no) + "expected 'cpu' or 'cpuN', found " +
                           quoted(name));
      ps.cpu_ids.push_back(id);
      times = &ps.per_cpu.emplace_back();
    }
    // Kernels added columns over time (iowait..guest_nice); older files simply have fewer.
    std::array<std::uint64_t*, 10> cols = {
        &times->user, &times->nice,    &times->system, &times->idle,  &times->iowait,
        &times->irq,  &times->softirq, &times->steal,  &times->guest, &times->guest_nice};
    std::array<std::uint64_t, 10> v{};
    const auto numbers = read_numbers(rest, v, "/proc/stat", line_no, 1, name);
    if (!numbers) return numbers.error();
    const std::size_t n = *numbers;
    for (std::size_t i = 0; i < std::min(n, cols.size()); ++i) *cols[i] = v[i];
    if (n < 4)
      return parse_error(where_line("/proc/stat", line_no) +
                         "expected at least 4 numbers (user nice system idle) after '" +
                         std::string(name) + "', found " + std::to_string(n));
  }
  if (!have_total) return parse_error("/proc/stat: expected a 'cpu' line, found none");
  return ps;
}

std::optional<std::vector<std::optional<double>>> busy_shares(const ProcStat& prev,
                                                              const ProcStat& cur,
                                                              const std::vector<int>& ids) {
  if (cur.total.total() <= prev.total.total()) return std::nullopt;
  auto find = [](const ProcStat& st, int id) -> const CpuTimes* {
    for (std::size_t i = 0; i < st.cpu_ids.size(); ++i)
      if (st.cpu_ids[i] == id) return &st.per_cpu[i];
    return nullptr;
  };
  std::vector<std::optional<double>> out(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const CpuTimes* now = find(cur, ids[i]);
    const CpuTimes* old = find(prev, ids[i]);
    if (now == nullptr || old == nullptr) continue;  // offline
    const double busy = static_cast<double>(now->busy()) - static_cast<double>(old->busy());
    const double total = static_cast<double>(now->total()) - static_cast<double>(old->total());
    if (total <= 0) return std::nullopt;
    out[i] = std::clamp(busy / total, 0.0, 1.0);
  }
  return out;
}

Result<MemInfo> parse_meminfo(std::string_view text) {
  MemInfo mi;
  struct Key {
    std::string_view name;
    std::optional<std::uint64_t> MemInfo::*member;
  };
  static constexpr std::array<Key, 7> kKeys = {{
      {"MemTotal", &MemInfo::total_bytes},
      {"AnonPages", &MemInfo::anon_pages_bytes},
      {"Mapped", &MemInfo::mapped_bytes},
      {"MemAvailable", &MemInfo::available_bytes},
      {"MemFree", &MemInfo::free_bytes},
      {"SwapTotal", &MemInfo::swap_total_bytes},
      {"SwapFree", &MemInfo::swap_free_bytes},
  }};
  auto lines = for_each_colon_line(
      text, "/proc/meminfo", "Name: value kB",
      [&](int line_no, std::string_view key, std::string_view rest,
          std::string_view line) -> Result<void> {
        for (const Key& k : kKeys) {
          if (k.name != key) continue;
          const std::string_view value = next_token(rest);
          const std::string_view unit = next_token(rest);
          std::uint64_t kib = 0;
          if (!to_num(value, kib) || unit != "kB" || !next_token(rest).empty())
            return parse_error(where_line("/proc/meminfo", line_no) + "expected '" +
                               std::string(key) + ": <number> kB', found " + quoted(line));
          if (kib > std::numeric_limits<std::uint64_t>::max() / 1024)
            return parse_error(where_line("/proc/meminfo", line_no) + "value of '" +
                               std::string(key) + "' overflows 64 bits in bytes");
          mi.*k.member = kib * 1024;
          break;
        }
        return {};
      });
  if (!lines) return lines.error();
  return mi;
}

Result<std::vector<DiskStat>> parse_diskstats(std::string_view text) {
  std::vector<DiskStat> out;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    std::string_view rest = line;
    const std::string_view major = next_token(rest);
    if (major.empty()) continue;
    const std::string_view minor = next_token(rest);
    const std::string_view name = next_token(rest);
    DiskStat d;
    if (!to_num(major, d.major) || !to_num(minor, d.minor) || name.empty())
      return parse_error(where_line("/proc/diskstats", line_no) +
                         "expected 'major minor name stats...', found " + quoted(line));
    d.name.assign(name);
    std::array<std::uint64_t, 7> v{};
    const auto numbers = read_numbers(rest, v, "/proc/diskstats", line_no, 4, name);
    if (!numbers) return numbers.error();
    const std::size_t n = *numbers;
    if (n == 4) {
      // Partitions on kernels before 2.6.25: reads, sectors read, writes, sectors written.
      d.reads_completed = v[0];
      d.sectors_read = v[1];
      d.writes_completed = v[2];
      d.sectors_written = v[3];
    } else if (n >= 7) {
      d.reads_completed = v[0];
      d.sectors_read = v[2];
      d.writes_completed = v[4];
      d.sectors_written = v[6];
    } else {
      return parse_error(where_line("/proc/diskstats", line_no) +
                         "expected 4 or at least 7 statistics after '" + std::string(name) +
                         "', found " + std::to_string(n));
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<NetDev>> parse_net_dev(std::string_view text) {
  std::vector<NetDev> out;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    // Only the two header lines contain '|'. The kernel forbids ':' in interface names, so the
    // first ':' ends the name even when a wide counter touches it ("eth0:123456789012").
    if (trim(line).empty() || line.find('|') != std::string_view::npos) continue;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos)
      return parse_error(where_line("/proc/net/dev", line_no) +
                         "expected 'iface: counters...', found " + quoted(line));
    NetDev d;
    d.iface.assign(trim(line.substr(0, colon)));
    std::string_view rest = line.substr(colon + 1);
    std::array<std::uint64_t, 10> v{};
    const auto numbers = read_numbers(rest, v, "/proc/net/dev", line_no, 1, d.iface);
    if (!numbers) return numbers.error();
    const std::size_t n = *numbers;
    if (n < v.size())
      return parse_error(where_line("/proc/net/dev", line_no) +
                         "expected at least 10 counters after '" + d.iface + ":', found " +
                         std::to_string(n));
    d.rx_bytes = v[0];
    d.rx_packets = v[1];
    d.tx_bytes = v[8];
    d.tx_packets = v[9];
    out.push_back(std::move(d));
  }
  return out;
}

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  // Far above any kernel's NR_CPUS; guards against expanding a corrupt range into gigabytes.
  constexpr int kMaxCpuId = 1 << 16;
  std::vector<int> out;
  std::string_view rest = trim(text);
  if (rest.empty()) return out;
  while (true) {
    const auto comma = rest.find(',');
    const std::string_view item = trim(rest.substr(0, comma));
    const auto dash = item.find('-');
    int lo = 0, hi = 0;
    bool ok = false;
    if (dash == std::string_view::npos) {
      ok = to_num(item, lo);
      hi = lo;
    } else {
      ok = to_num(item.substr(0, dash), lo) && to_num(item.substr(dash + 1), hi);
    }
    if (!ok || lo < 0 || hi < lo)
      return parse_error("cpu list: expected 'N' or 'N-M' with N <= M, found " + quoted(item) +
                         " in " + quoted(trim(text)));
    if (hi >= kMaxCpuId)
      return parse_error("cpu list: CPU id " + std::to_string(hi) + " is above the limit of " +
                         std::to_string(kMaxCpuId - 1));
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

Result<std::vector<CgroupEntry>> parse_pid_cgroup(std::string_view text) {
  std::vector<CgroupEntry> out;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    if (trim(line).empty()) continue;
    const auto c1 = line.find(':');
    const auto c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    CgroupEntry e;
    if (c2 == std::string_view::npos || !to_num(line.substr(0, c1), e.hierarchy_id))
      return parse_error(where_line("/proc/<pid>/cgroup", line_no) +
                         "expected 'id:controllers:path', found " + quoted(line));
    std::string_view ctrl = line.substr(c1 + 1, c2 - c1 - 1);
    while (!ctrl.empty()) {
      const auto comma = ctrl.find(',');
      if (comma != 0) e.controllers.emplace_back(ctrl.substr(0, comma));
      if (comma == std::string_view::npos) break;
      ctrl.remove_prefix(comma + 1);
    }
    // The path runs to the end of the line: it may itself contain ':'.
    e.path.assign(line.substr(c2 + 1));
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<CgroupMount>> parse_cgroup_mounts(std::string_view mountinfo_text) {
  // v1 super options mix mount flags (rw, xattr, release_agent=...) with controller names; only
  // names the kernel could have mounted count, so an unknown flag never poses as a controller.
  static constexpr std::array<std::string_view, 14> kV1Controllers = {
      "cpuset",  "cpu",        "cpuacct",  "blkio",   "memory", "devices", "freezer",
      "net_cls", "perf_event", "net_prio", "hugetlb", "pids",   "rdma",    "misc"};
  std::vector<CgroupMount> out;
  std::string_view text = mountinfo_text;
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    if (trim(line).empty()) continue;
    std::array<std::string_view, 6> head{};
    std::string_view rest = line;
    std::size_t n = 0;
    for (; n < head.size(); ++n) {
      head[n] = next_token(rest);
      if (head[n].empty()) break;
    }
    // Optional fields (shared:N, master:N, ...) come between field 6 and the lone "-".
    bool have_sep = false;
    if (n == head.size()) {
      for (std::string_view tok = next_token(rest); !tok.empty(); tok = next_token(rest)) {
        if (tok == "-") {
          have_sep = true;
          break;
        }
      }
    }
    const std::string_view fstype = next_token(rest);
    const std::string_view source = next_token(rest);
    const std::string_view super_opts = next_token(rest);
    if (!have_sep || fstype.empty() || source.empty() || super_opts.empty())
      return parse_error(where_line("/proc/self/mountinfo", line_no) +
                         "expected 'id parent dev root mountpoint options [optional...] - fstype "
                         "source superoptions', found " +
                         quoted(line));
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.v2 = fstype == "cgroup2";
    m.root = unescape_octal(head[3]);
    m.mount_point = unescape_octal(head[4]);
    if (!m.v2) {
      std::string_view opts = super_opts;
      while (!opts.empty()) {
        const auto comma = opts.find(',');
        const std::string_view opt = opts.substr(0, comma);
        bool known = starts_with(opt, "name=");
        for (std::string_view c : kV1Controllers) known = known || opt == c;
        if (known) m.controllers.emplace_back(opt);
        if (comma == std::string_view::npos) break;
        opts.remove_prefix(comma + 1);
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::optional<double>> parse_cpu_max(std::string_view text) {
  std::string_view rest = text;
  const std::string_view quota = next_token(rest);
  const std::string_view period = next_token(rest);
  const bool extra = !next_token(rest).empty();
  if (quota == "max" && !extra) return std::optional<double>();
  std::uint64_t q = 0, p = 0;
  if (extra || !to_num(quota, q) || !to_num(period, p) || p == 0)
    return parse_error(
        "cpu.max: expected 'max PERIOD' or 'QUOTA PERIOD' (microseconds, period > "
        "0), found " +
        quoted(trim(text)));
  return std::optional<double>(static_cast<double>(q) / static_cast<double>(p));
}

Result<std::optional<std::uint64_t>> parse_memory_limit(std::string_view text) {
  const std::string_view v = trim(text);
  if (v == "max") return std::optional<std::uint64_t>();
  std::uint64_t bytes = 0;
  if (!to_num(v, bytes))
    return parse_error("memory limit: expected 'max' or a number of bytes, found " + quoted(v));
  // v1 reports "no limit" as LONG_MAX rounded down to a page, which varies with the page size.
  if (bytes >= (std::uint64_t{1} << 62)) return std::optional<std::uint64_t>();
  return std::optional<std::uint64_t>(bytes);
}

Result<std::optional<std::uint64_t>> parse_limits_address_space(std::string_view text) {
  constexpr std::string_view kKey = "Max address space";
  int line_no = 0;
  for (std::string_view line; next_numbered_line(text, line, line_no);) {
    if (!starts_with(line, kKey)) continue;
    std::string_view rest = line.substr(kKey.size());
    const std::string_view soft = next_token(rest);
    if (soft == "unlimited") return std::optional<std::uint64_t>();
    std::uint64_t bytes = 0;
    if (!to_num(soft, bytes))
      return parse_error(where_line("/proc/<pid>/limits", line_no) +
                         "expected 'unlimited' or a number of bytes as the soft limit, found " +
                         quoted(soft));
    return std::optional<std::uint64_t>(bytes);
  }
  return parse_error("/proc/<pid>/limits: expected a 'Max address space' line, found none");
}

std::optional<std::string> environ_value(std::string_view environ_text, std::string_view key) {
  if (key.empty()) return std::nullopt;
  std::string_view rest = environ_text;
  while (!rest.empty()) {
    const auto nul = rest.find('\0');
    const std::string_view entry = rest.substr(0, nul);
    // First match wins, as with getenv().
    if (entry.size() > key.size() && entry[key.size()] == '=' && starts_with(entry, key))
      return std::string(entry.substr(key.size() + 1));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  return std::nullopt;
}

bool is_physical_block_link(std::string_view sys_block_link_target) {
  if (sys_block_link_target.empty()) return false;
  return sys_block_link_target.find("/devices/virtual/") == std::string_view::npos &&
         !starts_with(sys_block_link_target, "devices/virtual/");
}

}  // namespace sonde::procfs
