#include "sinks/run_data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <zlib.h>

#include "core/fs.hpp"
#include "core/summary.hpp"
#include "sinks/sqlite.hpp"

namespace sonde {

std::optional<std::size_t> LevelTable::find(const std::string& name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return i;
  return std::nullopt;
}

const LevelTable* RunData::find(Level level) const {
  for (const auto& t : levels)
    if (t.level == level) return &t;
  return nullptr;
}

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

/// At most `max_bytes` of the open regular file `fd` (named `shown`); more is an error.
Result<std::string> read_bounded(int fd, const std::string& shown, std::uint64_t max_bytes) {
  std::string out;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, fmt::format("cannot read {}: {}", shown, std::strerror(errno)));
    }
    if (n == 0) return out;
    if (out.size() + static_cast<std::size_t>(n) > max_bytes)
      return make_error(Errc::parse, fmt::format("{} is larger than {} MiB, the most sonde reads "
                                                 "of such a file",
                                                 shown, max_bytes >> 20));
    out.append(buf, static_cast<std::size_t>(n));
  }
}

/// A run file `name` inside the run directory `dirfd` (shown as `shown`), bounded.
Result<std::string> read_run_file(int dirfd, const std::string& name, const std::string& shown,
                                  std::uint64_t max_bytes) {
  auto fd = open_regular_in(dirfd, name, shown);
  if (!fd) return fd.error();
  return read_bounded(fd->get(), shown, max_bytes);
}

/// Text from a file for an error message: at most `max` characters, non-printable ones as `?`.
std::string printable(std::string_view s, std::size_t max) {
  std::string out(s.substr(0, max));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

/// One CSV field of a perf file: a number, empty (NaN), or the text nan/inf. A value that is not
/// finite (nan, inf, or out of the range of a double such as 1e10000000) is "not measured": NaN,
/// never 0 or a made-up huge number.
bool parse_field(std::string_view f, double& out) {
  if (f.empty()) {
    out = kNaN;
    return true;
  }
  const char* b = f.data();
  const char* e = f.data() + f.size();
  if (*b == '+') ++b;
  auto [p, ec] = std::from_chars(b, e, out);
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves `out` unchanged here; strtod tells an overflow (±HUGE_VAL) from an
    // underflow (a denormal or 0, the value's true neighbourhood).
    if (p != e || f.size() > 400) return false;
    const std::string copy(b, e);
    const double v = std::strtod(copy.c_str(), nullptr);
    out = std::isfinite(v) ? v : kNaN;
    return true;
  }
  if (ec != std::errc() || p != e) return false;
  if (!std::isfinite(out)) out = kNaN;
  return true;
}

std::vector<std::string_view> split_commas(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t c = line.find(',', start);
    if (c == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, c - start));
    start = c + 1;
  }
}

/// Reads perf_<level>.csv from `fd` in chunks, so that memory follows the rows kept, not the
/// file's size: at most kMaxRunFileLines lines of at most kMaxRunLineBytes, and at most
/// `values_left` values (shared by the levels of a run).
Result<LevelTable> read_perf_csv(int fd, const std::string& path, Level level,
                                 std::uint64_t& values_left) {
  LevelTable t;
  t.level = level;
  std::size_t line_no = 0;
  auto parse_line = [&](std::string_view line) -> Result<void> {
    ++line_no;
    if (line_no > kMaxRunFileLines)
      return make_error(Errc::parse, fmt::format("{}: more than {} lines, the most sonde reads of "
                                                 "a run file",
                                                 path, kMaxRunFileLines));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1) {
      for (auto f : split_commas(line)) t.columns.emplace_back(f);
      // Nothing of the line is echoed: a file that is not a run file stays unread.
      if (t.columns.size() < 2 || t.columns[0] != "time" || t.columns[1] != "wallclock")
        return make_error(Errc::parse, fmt::format("{}:1: expected a header starting with "
                                                   "`time,wallclock` (not a sonde run file)",
                                                   path));
      return {};
    }
    if (line.empty()) return {};
    if (values_left < t.columns.size())
      return make_error(Errc::parse, fmt::format("{}:{}: the run holds more than {} values, the "
                                                 "most sonde reads of one run",
                                                 path, line_no, kMaxRunValues));
    values_left -= t.columns.size();
    std::vector<double> row(t.columns.size());
    std::size_t col = 0, start = 0;
    for (;;) {
      const std::size_t c = line.find(',', start);
      const std::string_view f =
          line.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start);
      if (col >= row.size())
        return make_error(Errc::parse, fmt::format("{}:{}: more than the {} fields of the header",
                                                   path, line_no, t.columns.size()));
      if (!parse_field(f, row[col]))
        return make_error(
            Errc::parse,
            fmt::format("{}:{}: field {} ({}): expected a number or nothing, got `{}`", path,
                        line_no, col + 1, printable(t.columns[col], 60), printable(f, 40)));
      ++col;
      if (c == std::string_view::npos) break;
      start = c + 1;
    }
    if (col != row.size())
      return make_error(Errc::parse, fmt::format("{}:{}: {} fields, the header has {}", path,
                                                 line_no, col, t.columns.size()));
    t.rows.push_back(std::move(row));
    return {};
  };

  std::string buf;
  std::size_t begin = 0;  // start of the first incomplete line in buf
  std::vector<char> chunk(1 << 20);
  while (true) {
    const ssize_t n = ::read(fd, chunk.data(), chunk.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    }
    if (n == 0) break;  // what is left in buf is a truncated last line: the run was killed
    buf.erase(0, begin);
    begin = 0;
    buf.append(chunk.data(), static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = buf.find('\n', begin)) != std::string::npos) {
      if (auto ok = parse_line(std::string_view(buf).substr(begin, nl - begin)); !ok)
        return ok.error();
      begin = nl + 1;
    }
    if (buf.size() - begin > kMaxRunLineBytes)
      return make_error(Errc::parse, fmt::format("{}:{}: a line longer than {} bytes", path,
                                                 line_no + 1, kMaxRunLineBytes));
  }
  if (t.columns.empty())
    return make_error(Errc::parse, fmt::format("{}:1: no header line (empty file)", path));
  return t;
}

/// RFC 4180 records of cell_history.csv. A record cut short by the end of the file is dropped.
Result<std::vector<CellRecord>> read_cell_history(const std::string& s, const std::string& path) {
  std::vector<CellRecord> cells;
  std::size_t i = 0, line = 1;
  bool header = true;
  while (i < s.size()) {
    const std::size_t record_line = line;
    std::vector<std::string> fields(1);
    bool complete = false;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '"' && fields.back().empty()) {
        // Quoted field.
        ++i;
        bool closed = false;
        while (i < s.size()) {
          if (s[i] == '"') {
            if (i + 1 < s.size() && s[i + 1] == '"') {
              fields.back() += '"';
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          if (s[i] == '\n') ++line;
          fields.back() += s[i++];
        }
        if (!closed) break;
        if (i < s.size() && s[i] != ',' && s[i] != '\n' && s[i] != '\r')
          return make_error(Errc::parse,
                            fmt::format("{}:{}: expected `,` or the end of the line after a "
                                        "quoted field",
                                        path, line));
        continue;
      }
      ++i;
      if (c == ',') {
        fields.emplace_back();
      } else if (c == '\n') {
        ++line;
        complete = true;
        break;
      } else if (c != '\r') {
        fields.back() += c;
      }
    }
    if (!complete) break;  // truncated last record
    if (header) {
      header = false;
      const std::vector<std::string> want = {"index", "start_wallclock", "end_wallclock", "code"};
      if (fields != want)
        return make_error(Errc::parse, fmt::format("{}:{}: expected the header "
                                                   "`index,start_wallclock,end_wallclock,code`",
                                                   path, record_line));
      continue;
    }
    if (fields.size() == 1 && fields[0].empty()) continue;
    if (fields.size() != 4)
      return make_error(Errc::parse, fmt::format("{}:{}: expected 4 fields (index, "
                                                 "start_wallclock, end_wallclock, code), got {}",
                                                 path, record_line, fields.size()));
    CellRecord r;
    double idx = 0;
    if (!parse_field(fields[0], idx) || !(std::fabs(idx) < 2e9) ||
        !parse_field(fields[1], r.start_wallclock) || !parse_field(fields[2], r.end_wallclock))
      return make_error(Errc::parse,
                        fmt::format("{}:{}: index, start_wallclock and end_wallclock must be "
                                    "numbers",
                                    path, record_line));
    r.index = static_cast<int>(idx);
    r.code = std::move(fields[3]);
    cells.push_back(std::move(r));
  }
  return cells;
}

// ---- summary ------------------------------------------------------------------------------------

struct Stat {
  std::uint64_t count = 0;
  double sum = 0, min = 0, max = 0, integral = 0;
  void add(double v, double dt) {
    if (!std::isfinite(v)) return;
    if (count == 0) min = max = v;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
    ++count;
    if (std::isfinite(dt)) integral += v * dt;
  }
  std::optional<double> mean() const {
    return count ? std::optional<double>(sum / static_cast<double>(count)) : std::nullopt;
  }
};

nlohmann::json num_or_null(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json();
}

double json_number(const nlohmann::json& j, const char* key, double fallback) {
  if (j.is_object() && j.contains(key) && j[key].is_number()) return j[key].get<double>();
  return fallback;
}

}  // namespace

double level_num_cpus(const nlohmann::json& node, Level level) {
  const std::string name(level_name(level));
  if (node.is_object() && node.contains("cpus_per_level") && node["cpus_per_level"].is_object() &&
      node["cpus_per_level"].contains(name)) {
    const double n = json_number(node["cpus_per_level"][name], "num_cpus", kNaN);
    if (std::isfinite(n) && n > 0) return n;
  }
  return json_number(node, level == Level::system ? "num_system_cpus" : "num_cpus", kNaN);
}

namespace {

/// Row range [first, last) of the table inside the wallclock window.
std::pair<std::size_t, std::size_t> window_rows(const LevelTable& t,
                                                std::optional<std::pair<double, double>> w) {
  if (!w) return {0, t.rows.size()};
  std::size_t first = t.rows.size(), last = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const double wc = t.rows[i][1];
    if (wc >= w->first && wc <= w->second) {
      first = std::min(first, i);
      last = i + 1;
    }
  }
  if (first >= last) return {0, 0};
  return {first, last};
}

/// Statistics of one column over rows [first, last), each value weighted by the time since the
/// previous row (the first row of the run by the interval).
Stat column_stat(const LevelTable& t, std::size_t col, std::size_t first, std::size_t last,
                 double interval) {
  Stat s;
  for (std::size_t i = first; i < last; ++i) {
    const double dt = i == 0 ? interval : t.rows[i][0] - t.rows[i - 1][0];
    s.add(t.rows[i][col], dt);
  }
  return s;
}

/// Mean over devices per row of `prefix<N>` columns, for runs without a `prefix avg` column.
std::optional<Stat> device_mean_stat(const LevelTable& t, const std::string& prefix,
                                     std::size_t first, std::size_t last, double interval) {
  if (auto c = t.find(prefix + "avg")) return column_stat(t, *c, first, last, interval);
  std::vector<std::size_t> cols;
  for (int d = 0;; ++d) {
    auto c = t.find(prefix + std::to_string(d));
    if (!c) break;
    cols.push_back(*c);
  }
  if (cols.empty()) return std::nullopt;
  Stat s;
  for (std::size_t i = first; i < last; ++i) {
    double sum = 0;
    int n = 0;
    for (auto c : cols)
      if (std::isfinite(t.rows[i][c])) sum += t.rows[i][c], ++n;
    const double dt = i == 0 ? interval : t.rows[i][0] - t.rows[i - 1][0];
    s.add(n ? sum / n : kNaN, dt);
  }
  return s;
}

std::optional<double> opt_number(const nlohmann::json& v) {
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

// The inputs of bottleneck_tags for one level, as summary_json computes them from a live run:
// the GPUs a non-system level used are those where it held memory; utilisation is the mean of
// their per-device means, memory the peak on one device.
TagInputs level_tag_inputs(const LevelTable& t, const nlohmann::json& groups,
                           const nlohmann::json& node, std::size_t first, std::size_t last,
                           double interval) {
  TagInputs in;
  auto g = [&](const char* name, const char* stat) -> std::optional<double> {
    if (!groups.contains(name)) return std::nullopt;
    return opt_number(groups[name][stat]);
  };
  in.cpu_mean_pct = g("cpu", "mean");
  in.memory_peak_gib = g("memory", "max");
  in.memory_limit_gib = g("memory", "limit");
  in.gpu_memory_gib =
      opt_number(node.contains("gpu_memory_gib") ? node["gpu_memory_gib"] : nlohmann::json());
  double util = 0, mem_peak = 0;
  int util_n = 0, used = 0;
  for (int d = 0;; ++d) {
    auto mc = t.find("gpu_mem_" + std::to_string(d));
    if (!mc) break;
    const Stat m = column_stat(t, *mc, first, last, interval);
    const bool held = m.count && m.max > 0;
    if (t.level != Level::system && !held) continue;
    ++used;
    if (m.count) mem_peak = std::max(mem_peak, m.max);
    if (auto uc = t.find("gpu_util_" + std::to_string(d))) {
      const Stat u = column_stat(t, *uc, first, last, interval);
      if (u.mean()) util += *u.mean(), ++util_n;
    }
  }
  if (used) in.gpu_mem_peak_gib = mem_peak;
  if (util_n) in.gpu_util_mean_pct = util / util_n;
  return in;
}

nlohmann::json group_json(const Stat& s, double scale, std::optional<double> limit,
                          const char* unit) {
  nlohmann::json g;
  g["mean"] = num_or_null(s.mean() ? std::optional<double>(*s.mean() * scale) : std::nullopt);
  g["min"] = s.count ? num_or_null(s.min * scale) : nlohmann::json();
  g["max"] = s.count ? num_or_null(s.max * scale) : nlohmann::json();
  g["limit"] = num_or_null(limit);
  g["unit"] = unit;
  return g;
}
}  // namespace

Result<RunData> read_run_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return make_error(Errc::io, fmt::format("{}: not a run directory (no such directory)", dir));
  // Every file of the run is opened through this fd, by a plain name, without following links.
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd)
    return make_error(Errc::io, fmt::format("{}: cannot open: {}", dir, std::strerror(errno)));
  auto text = read_run_file(dir_fd.get(), "manifest.json", manifest_path, kMaxManifestBytes);
  if (!text) {
    if (text.error().code == Errc::io)
      return make_error(Errc::io,
                        fmt::format("{}: not a run directory (cannot read manifest.json)", dir));
    return text.error();
  }
  RunData run;
  run.source = dir;
  try {
    run.manifest = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is the offset of the error; turn it into a line number. The library's message ends
    // with the text it last read: not echoed, the file may be anything.
    const std::size_t upto = std::min<std::size_t>(e.byte, text->size());
    const auto line = 1 + std::count(text->begin(), text->begin() + static_cast<long>(upto), '\n');
    std::string what = e.what();
    if (const auto cut = what.find("; last read"); cut != std::string::npos) what.resize(cut);
    return make_error(Errc::parse,
                      fmt::format("{}:{}: malformed JSON: {}", manifest_path, line, what));
  }
  const auto& m = run.manifest;
  if (!m.is_object() || !m.contains("levels") || !m["levels"].is_array())
    return make_error(Errc::parse,
                      fmt::format("{}:1: expected an object with a `levels` list", manifest_path));
  std::uint64_t values_left = kMaxRunValues;
  for (const auto& name : m["levels"]) {
    if (!name.is_string() || !parse_level(name.get<std::string>()))
      return make_error(Errc::parse, fmt::format("{}: unknown level {} in `levels` (expected "
                                                 "process, user, slurm or system)",
                                                 manifest_path, printable(name.dump(), 60)));
    const std::string lname = name.get<std::string>();
    std::string file = "perf_" + lname + ".csv";
    if (m.contains("files") && m["files"].is_object() && m["files"].contains(lname) &&
        m["files"][lname].is_string())
      file = m["files"][lname].get<std::string>();
    if (!is_plain_name(file))
      return make_error(Errc::parse,
                        fmt::format("{}: files.{}: expected the plain name of a file inside the "
                                    "run (no `/`, no `..`), got `{}`",
                                    manifest_path, lname, printable(file, 80)));
    const std::string shown = (fs::path(dir) / file).string();
    auto fd = open_regular_in(dir_fd.get(), file, shown);
    if (!fd) return fd.error();
    auto table = read_perf_csv(fd->get(), shown, *parse_level(lname), values_left);
    if (!table) return table.error();
    run.levels.push_back(std::move(*table));
  }
  const std::string cells_path = (fs::path(dir) / "cell_history.csv").string();
  struct stat st {};
  if (::fstatat(dir_fd.get(), "cell_history.csv", &st, AT_SYMLINK_NOFOLLOW) == 0) {
    auto cells_text =
        read_run_file(dir_fd.get(), "cell_history.csv", cells_path, kMaxCellHistoryBytes);
    if (!cells_text) return cells_text.error();
    auto cells = read_cell_history(*cells_text, cells_path);
    if (!cells) return cells.error();
    run.cells = std::move(*cells);
  }
  return run;
}

namespace {
// ---- zipped run directories ---------------------------------------------------------------------
// A small reader for the zip files `zip -r run.zip RUN_DIR` writes (stored or deflated entries,
// no zip64, no encryption), with zlib: the run's files are extracted to a temporary directory
// and read as a run directory.

std::uint32_t le32(const std::string& b, std::size_t at) {
  return static_cast<std::uint32_t>(static_cast<unsigned char>(b[at])) |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 1])) << 8 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 2])) << 16 |
         static_cast<std::uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}
std::uint16_t le16(const std::string& b, std::size_t at) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(b[at]) |
                                    static_cast<unsigned char>(b[at + 1]) << 8);
}

bool is_run_file(const std::string& base) {
  return base == "manifest.json" || base == "cell_history.csv" ||
         (base.rfind("perf_", 0) == 0 && base.size() > 9 &&
          base.compare(base.size() - 4, 4, ".csv") == 0);
}

Result<RunData> read_run_zip(const std::string& zip) {
  namespace fs = std::filesystem;
  UniqueFd zfd(::open(zip.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!zfd)
    return make_error(Errc::io, fmt::format("cannot open {}: {}", zip, std::strerror(errno)));
  struct stat zst {};
  if (::fstat(zfd.get(), &zst) != 0 || !S_ISREG(zst.st_mode))
    return make_error(Errc::parse, fmt::format("{} is not a regular file", zip));
  auto data = read_bounded(zfd.get(), zip, kMaxZipBytes);
  if (!data) return data.error();
  const std::string& b = *data;
  // What the entries may inflate to, in all: relative to the archive, and absolutely. CSV of
  // numbers deflates 3-20:1; a run with many empty (not measured) columns more.
  const std::uint64_t inflate_limit = std::min<std::uint64_t>(
      kMaxZipInflatedBytes,
      std::max<std::uint64_t>(kZipInflateFloorBytes, kMaxZipInflateRatio * b.size()));
  auto bad = [&](const std::string& what) {
    return make_error(Errc::parse, fmt::format("{}: {}", zip, what));
  };
  // End of central directory: 22 bytes plus a comment of up to 65535.
  std::size_t eocd = std::string::npos;
  for (std::size_t i = b.size() >= 22 ? b.size() - 22 : 0, n = 0; b.size() >= 22 && n < 65558;
       --i, ++n) {
    if (le32(b, i) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == 0) break;
  }
  if (eocd == std::string::npos) return bad("not a zip file (no end of central directory)");
  const std::size_t entries = le16(b, eocd + 10);
  std::size_t p = le32(b, eocd + 16);
  if (le32(b, eocd + 16) == 0xffffffff) return bad("zip64 archives are not supported");
  struct Entry {
    std::string name;
    std::uint16_t method;
    std::uint32_t csize, usize, local;
  };
  std::vector<Entry> files;
  std::string run_prefix;
  bool found_manifest = false;
  for (std::size_t e = 0; e < entries; ++e) {
    if (p + 46 > b.size() || le32(b, p) != 0x02014b50) return bad("corrupt central directory");
    Entry en{b.substr(p + 46, le16(b, p + 28)), le16(b, p + 10), le32(b, p + 20), le32(b, p + 24),
             le32(b, p + 42)};
    p += 46 + le16(b, p + 28) + le16(b, p + 30) + le16(b, p + 32);
    if (p > b.size()) return bad("corrupt central directory");
    const auto slash = en.name.rfind('/');
    const std::string base = slash == std::string::npos ? en.name : en.name.substr(slash + 1);
    const std::string prefix = slash == std::string::npos ? "" : en.name.substr(0, slash + 1);
    if (!is_run_file(base)) continue;
    if (base == "manifest.json") {
      if (found_manifest)
        return bad(
            fmt::format("holds more than one run ({} and {}); unzip it and give one "
                        "run directory",
                        run_prefix + "manifest.json", en.name));
      found_manifest = true;
      run_prefix = prefix;
    }
    files.push_back(std::move(en));
  }
  if (!found_manifest) return bad("holds no run (no manifest.json)");

  std::uint64_t claimed = 0;
  const Entry* largest = nullptr;
  for (const Entry& en : files) {
    claimed += en.usize;
    if (!largest || en.usize > largest->usize) largest = &en;
  }
  auto too_big = [&](const std::string& entry) {
    return bad(
        fmt::format("entry {} inflates past {} MiB, the most sonde extracts from this "
                    "archive ({} times its size, at most {} MiB in all); unzip it and "
                    "read the run directory if it is genuine",
                    entry, inflate_limit >> 20, kMaxZipInflateRatio, kMaxZipInflatedBytes >> 20));
  };

  // The sizes the central directory states, checked before anything is inflated.
  if (claimed > inflate_limit) return too_big(largest->name);

  std::error_code tec;
  std::string tmpl = (fs::temp_directory_path(tec) / "sonde-zip-XXXXXX").string();
  const char* tmp = ::mkdtemp(tmpl.data());
  if (!tmp) return bad("cannot create a temporary directory");
  const std::string dir = tmp;
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd) return bad("cannot open a temporary directory");
  std::uint64_t inflated = 0;
  std::vector<char> chunk(1 << 16);
  for (const Entry& en : files) {
    if (en.name.rfind(run_prefix, 0) != 0 ||
        en.name.find('/', run_prefix.size()) != std::string::npos)
      continue;
    const std::size_t l = en.local;
    if (l + 30 > b.size() || le32(b, l) != 0x04034b50) return bad("corrupt entry " + en.name);
    const std::size_t start = l + 30 + le16(b, l + 26) + le16(b, l + 28);
    if (start + en.csize > b.size()) return bad("truncated entry " + en.name);
    const std::string base = en.name.substr(run_prefix.size());
    auto out = create_file_in(dir_fd.get(), base, zip + ":" + en.name);
    if (!out) return bad("cannot extract " + en.name + ": " + out.error().message);
    auto put = [&](const char* bytes, std::size_t n) -> Result<void> {
      inflated += n;
      if (inflated > inflate_limit) return too_big(en.name);
      while (n > 0) {
        const ssize_t w = ::write(out->get(), bytes, n);
        if (w < 0) {
          if (errno == EINTR) continue;
          return bad(fmt::format("cannot extract {}: {}", en.name, std::strerror(errno)));
        }
        bytes += w;
        n -= static_cast<std::size_t>(w);
      }
      return {};
    };
    if (en.method == 0) {
      if (en.csize != en.usize) return bad("corrupt entry " + en.name);
      if (auto ok = put(b.data() + start, en.csize); !ok) return ok.error();
    } else if (en.method == 8) {
      // Deflate expands at most ~1032:1; a larger claim is a corrupt or hostile archive.
      if (en.usize / 1032 > en.csize + 1) return bad("corrupt entry " + en.name);
      z_stream z{};
      if (inflateInit2(&z, -15) != Z_OK) return bad("zlib failed");
      struct ZEnd {
        z_stream* z;
        ~ZEnd() { inflateEnd(z); }
      } zend{&z};
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + start));
      z.avail_in = en.csize;
      int rc = Z_OK;
      // Streamed in chunks and stopped at the entry's stated size: the claim in the directory
      // is checked, never trusted.
      while (rc != Z_STREAM_END) {
        z.next_out = reinterpret_cast<Bytef*>(chunk.data());
        z.avail_out = static_cast<uInt>(chunk.size());
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) return bad("corrupt entry " + en.name);
        const std::size_t got = chunk.size() - z.avail_out;
        if (z.total_out > en.usize)
          return bad("corrupt entry " + en.name + " (longer than stated)");
        if (auto ok = put(chunk.data(), got); !ok) return ok.error();
        if (rc == Z_OK && got == 0 && z.avail_in == 0) return bad("truncated entry " + en.name);
      }
      if (z.total_out != en.usize) return bad("corrupt entry " + en.name);
    } else {
      return bad(
          fmt::format("entry {} uses compression method {} (only stored and deflated "
                      "entries are read)",
                      en.name, en.method));
    }
    if (out->close() != 0) return bad("cannot extract " + en.name);
  }
  auto run = read_run_dir(dir);
  if (!run) {
    // Name the file inside the archive, not the temporary copy.
    Error e = run.error();
    for (auto pos = e.message.find(dir); pos != std::string::npos; pos = e.message.find(dir))
      e.message.replace(pos, dir.size() + 1, zip + ":" + run_prefix);
    return e;
  }
  run->source = zip;
  return run;
}
}  // namespace

Result<RunData> read_run(const std::string& spec) {
  // A directory is a run directory; a .zip file a zipped one; another file (or a name ending in
  // .sqlite/.sqlite3/.db), with or without #ID, is a SQLite database.
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) return read_run_dir(spec);
  if (spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".zip") == 0 &&
      std::filesystem::is_regular_file(spec, ec))
    return read_run_zip(spec);
  const std::size_t hash = spec.rfind('#');
  const std::string file = hash == std::string::npos ? spec : spec.substr(0, hash);
  if (is_sqlite_path(file) || std::filesystem::is_regular_file(file, ec)) {
    auto loc = parse_sqlite_location(spec);
    if (!loc) return loc.error();
    return read_run_sqlite(loc->first, loc->second);
  }
  return read_run_dir(spec);
}

nlohmann::json summarize_run(const RunData& run, std::optional<std::pair<double, double>> window) {
  const nlohmann::json& m = run.manifest;
  const nlohmann::json node =
      m.contains("node_info") && m["node_info"].is_object() ? m["node_info"] : nlohmann::json();
  const double interval = json_number(m, "interval", kNaN);
  const nlohmann::json stored =
      m.contains("summary") && m["summary"].is_object() ? m["summary"] : nlohmann::json();

  nlohmann::json j;
  j["command"] = m.contains("command") ? m["command"] : nlohmann::json::array();
  j["exit_status"] = m.contains("exit_status") ? m["exit_status"] : nlohmann::json();
  j["host"] = m.value("host", std::string());
  j["run_dir"] = run.source;
  j["start_wallclock"] = m.contains("start_wallclock") ? m["start_wallclock"] : nlohmann::json();
  j["end_wallclock"] = m.contains("end_wallclock") ? m["end_wallclock"] : nlohmann::json();
  j["window"] = window ? nlohmann::json::array({window->first, window->second}) : nlohmann::json();
  if (m.contains("summary") && stored.contains("user_cpu_s") && !window) {
    j["user_cpu_s"] = stored["user_cpu_s"];
    j["system_cpu_s"] = stored.value("system_cpu_s", nlohmann::json());
  } else {
    j["user_cpu_s"] = nullptr;
    j["system_cpu_s"] = nullptr;
  }

  nlohmann::json levels = nlohmann::json::object();
  for (const LevelTable& t : run.levels) {
    const auto [first, last] = window_rows(t, window);
    const std::string lname(level_name(t.level));
    const double cpus = level_num_cpus(node, t.level);
    double limit_bytes = kNaN;
    if (node.contains("memory_limits") && node["memory_limits"].is_object())
      limit_bytes = json_number(node["memory_limits"], lname.c_str(), kNaN);
    nlohmann::json L;
    L["ticks"] = last - first;
    L["duration_s"] = last > first ? nlohmann::json(t.rows[last - 1][1] - t.rows[first][1] +
                                                    (std::isfinite(interval) ? interval : 0))
                                   : nlohmann::json(0.0);
    L["num_cpus"] = num_or_null(cpus);
    nlohmann::json groups = nlohmann::json::object();
    if (auto c = t.find("cpu_util_avg")) {
      const Stat s = column_stat(t, *c, first, last, interval);
      groups["cpu"] = group_json(s, 1, 100.0, "%");
      groups["cpu_cores"] = group_json(s, cpus / 100, cpus, "cores");
      L["cpu_seconds"] = s.count ? num_or_null(s.integral / 100 * cpus) : nlohmann::json();
    }
    if (auto c = t.find("memory")) {
      const Stat s = column_stat(t, *c, first, last, interval);
      groups["memory"] = group_json(
          s, 1, limit_bytes > 0 ? std::optional<double>(limit_bytes / kGiB) : std::nullopt, "GiB");
    }
    if (auto s = device_mean_stat(t, "gpu_util_", first, last, interval))
      groups["gpu_util"] = group_json(*s, 1, 100.0, "%");
    if (auto s = device_mean_stat(t, "gpu_band_", first, last, interval))
      groups["gpu_band"] = group_json(*s, 1, 100.0, "%");
    if (auto s = device_mean_stat(t, "gpu_mem_", first, last, interval)) {
      const double gpu_gib = json_number(node, "gpu_memory_gib", kNaN);
      groups["gpu_mem"] =
          group_json(*s, 1, gpu_gib > 0 ? std::optional<double>(gpu_gib) : std::nullopt, "GiB");
    }
    L["groups"] = groups;
    L["tags"] = bottleneck_tags(level_tag_inputs(t, groups, node, first, last, interval));
    nlohmann::json totals = nlohmann::json::object();
    const std::pair<const char*, const char*> total_cols[] = {
        {"read_bytes", "io_read"},
        {"written_bytes", "io_write"},
        {"read_ops", "io_read_count"},
        {"write_ops", "io_write_count"},
        {"net_sent_bytes", "net_bytes_sent"},
        {"net_recv_bytes", "net_bytes_recv"},
        {"net_sent_packets", "net_packets_sent"},
        {"net_recv_packets", "net_packets_recv"}};
    for (const auto& [key, col] : total_cols)
      if (auto c = t.find(col)) totals[key] = column_stat(t, *c, first, last, interval).integral;
    L["totals"] = totals;
    levels[lname] = L;
  }
  j["levels"] = levels;

  // The top-level figures: the program's level (process), else the node, as summary_json.
  const LevelTable* main =
      run.find(Level::process) ? run.find(Level::process) : run.find(Level::system);
  if (!main && !run.levels.empty()) main = &run.levels.front();
  const std::string mname = main ? std::string(level_name(main->level)) : std::string("system");
  const nlohmann::json ML = levels.contains(mname) ? levels[mname] : nlohmann::json::object();
  auto group = [&](const char* g, const char* stat) -> nlohmann::json {
    if (ML.contains("groups") && ML["groups"].contains(g)) return ML["groups"][g][stat];
    return nullptr;
  };
  auto total = [&](const nlohmann::json& L, const char* key) -> nlohmann::json {
    if (L.contains("totals") && L["totals"].contains(key)) return L["totals"][key];
    return nullptr;
  };
  j["level"] = mname;
  j["ticks"] = ML.value("ticks", 0);
  j["num_cpus"] = ML.contains("num_cpus") ? ML["num_cpus"] : nlohmann::json();
  double wall = kNaN;
  if (window) {
    wall = window->second - window->first;
  } else if (stored.contains("wall_s") && stored["wall_s"].is_number()) {
    wall = stored["wall_s"].get<double>();
  } else if (m.contains("end_wallclock") && m["end_wallclock"].is_number() &&
             m.contains("start_wallclock") && m["start_wallclock"].is_number()) {
    wall = m["end_wallclock"].get<double>() - m["start_wallclock"].get<double>();
  } else if (main && !main->rows.empty()) {
    wall = main->rows.back()[1] - main->rows.front()[1];
  }
  j["wall_s"] = num_or_null(wall);
  j["cpu_mean_cores"] = group("cpu_cores", "mean");
  j["cpu_peak_cores"] = group("cpu_cores", "max");
  j["cpu_seconds"] = ML.contains("cpu_seconds") ? ML["cpu_seconds"] : nlohmann::json();
  j["memory_peak_gib"] = group("memory", "max");
  j["memory_limit_gib"] = group("memory", "limit");
  j["read_bytes"] = total(ML, "read_bytes");
  j["written_bytes"] = total(ML, "written_bytes");
  const nlohmann::json SL = levels.contains("system") ? levels["system"] : nlohmann::json::object();
  j["net_sent_bytes"] = total(SL, "net_sent_bytes");
  j["net_recv_bytes"] = total(SL, "net_recv_bytes");

  // Tags: the rules of summary_json (core/summary.cpp: bottleneck_tags) at the main level.
  j["tags"] = ML.contains("tags") ? ML["tags"] : nlohmann::json::array();
  return j;
}

}  // namespace sonde
