#include "sinks/run_data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "sinks/bounded_read.hpp"
#include "sinks/csv_parse.hpp"

namespace sonde {
namespace {
using csv::printable;

/// Nesting allowed in a stored manifest (sonde's nest 4 deep; a million deep cost 4 GB).
constexpr std::size_t kMaxJsonDepth = 64;

/// A run file `name` inside the run directory `dirfd` (shown as `shown`), bounded.
Result<std::string> read_run_file(int dirfd, const std::string& name, const std::string& shown,
                                  std::uint64_t max_bytes) {
  auto fd = open_regular_in(dirfd, name, shown);
  if (!fd) return fd.error();
  return read_bounded(fd->get(), shown, max_bytes);
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
      for (auto f : csv::split_commas(line)) t.columns.emplace_back(f);
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
      if (!csv::parse_number(f, row[col]))
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

/// The records of cell_history.csv (RFC 4180, csv::parse_rfc4180). A record cut short by the end
/// of the file is dropped.
Result<std::vector<CellRecord>> read_cell_history(const std::string& s, const std::string& path) {
  std::vector<CellRecord> cells;
  bool header = true;
  auto ok = csv::parse_rfc4180(
      s, path, [&](std::vector<std::string>& fields, std::size_t record_line) -> Result<void> {
        if (header) {
          header = false;
          const std::vector<std::string> want = {"index", "start_wallclock", "end_wallclock",
                                                 "code"};
          if (fields != want)
            return make_error(Errc::parse, fmt::format("{}:{}: expected the header "
                                                       "`index,start_wallclock,end_wallclock,code`",
                                                       path, record_line));
          return {};
        }
        if (fields.size() == 1 && fields[0].empty()) return {};
        if (fields.size() != 4)
          return make_error(Errc::parse,
                            fmt::format("{}:{}: expected 4 fields (index, "
                                        "start_wallclock, end_wallclock, code), got {}",
                                        path, record_line, fields.size()));
        CellRecord r;
        double idx = 0;
        if (!csv::parse_number(fields[0], idx) || !(std::fabs(idx) < 2e9) ||
            !csv::parse_number(fields[1], r.start_wallclock) ||
            !csv::parse_number(fields[2], r.end_wallclock))
          return make_error(Errc::parse,
                            fmt::format("{}:{}: index, start_wallclock and end_wallclock must be "
                                        "numbers",
                                        path, record_line));
        r.index = static_cast<int>(idx);
        r.code = std::move(fields[3]);
        cells.push_back(std::move(r));
        return {};
      });
  if (!ok) return ok.error();
  return cells;
}

/// The nodes of a multi-node run (manifest `nodes`): `nodes/<name>/perf_<level>.csv` for each
/// level the node recorded (its `columns_by_level`, else whichever of the files exist). A node
/// that is not `complete` (an agent lost or failed before it wrote anything) may lack its files;
/// a complete one may not.
Result<void> read_nodes(int dir_fd, const std::string& dir, const std::string& manifest_path,
                        RunData& run, std::uint64_t& values_left) {
  namespace fs = std::filesystem;
  const auto& m = run.manifest;
  if (!m.contains("nodes")) return {};
  if (!m["nodes"].is_array())
    return make_error(Errc::parse, fmt::format("{}: `nodes`: expected a list of nodes (objects "
                                               "with a `name`)",
                                               manifest_path));
  // Missing when no agent wrote anything (every node then says why it is not complete).
  UniqueFd nodes_fd(::openat(dir_fd, "nodes", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  for (const auto& entry : m["nodes"]) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
        !is_plain_name(entry["name"].get<std::string>()))
      return make_error(Errc::parse,
                        fmt::format("{}: `nodes`: expected objects with a `name` that is a plain "
                                    "file name, got {}",
                                    manifest_path, printable(json_text(entry), 80)));
    const std::string name = entry["name"].get<std::string>();
    if (run.find_node(name))
      return make_error(Errc::parse, fmt::format("{}: `nodes`: node {} listed twice", manifest_path,
                                                 printable(name, 60)));
    const bool complete = entry.value("status", std::string("complete")) == "complete";
    const nlohmann::json cols =
        entry.contains("columns_by_level") && entry["columns_by_level"].is_object()
            ? entry["columns_by_level"]
            : nlohmann::json();
    const std::string node_dir = (fs::path(dir) / "nodes" / name).string();
    UniqueFd node_fd;
    if (nodes_fd)
      node_fd.reset(
          ::openat(nodes_fd.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!node_fd && complete)
      return make_error(Errc::parse, fmt::format("{}: missing: the node {} is listed in {}",
                                                 node_dir, printable(name, 60), manifest_path));
    RunData node;
    node.node = name;
    node.source = run.source + " node " + name;
    std::vector<std::string> level_names;
    for (Level l : kAllLevels) {
      const std::string lname(level_name(l));
      const bool listed = cols.is_object() && cols.contains(lname);
      const std::string file = "perf_" + lname + ".csv";
      const std::string shown = (fs::path(node_dir) / file).string();
      struct stat st {};
      if (!node_fd || ::fstatat(node_fd.get(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (listed && complete)
          return make_error(Errc::parse,
                            fmt::format("{}: missing: the node {} has the level {} in {}", shown,
                                        printable(name, 60), lname, manifest_path));
        continue;
      }
      auto fd = open_regular_in(node_fd.get(), file, shown);
      if (!fd) return fd.error();
      auto table = read_perf_csv(fd->get(), shown, l, values_left);
      if (!table) return table.error();
      node.levels.push_back(std::move(*table));
      level_names.push_back(lname);
    }
    node.manifest = node_manifest(m, entry, level_names);
    run.nodes.push_back(std::move(node));
  }
  return {};
}
}  // namespace

Result<nlohmann::json> read_run_manifest(int dir_fd, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  auto text = read_run_file(dir_fd, "manifest.json", manifest_path, kMaxManifestBytes);
  if (!text) {
    if (text.error().code == Errc::io)
      return make_error(Errc::io,
                        fmt::format("{}: not a run directory (cannot read manifest.json)", dir));
    return text.error();
  }
  if (!json_nesting_within(*text, kMaxJsonDepth))
    return make_error(Errc::parse, fmt::format("{}: JSON nested deeper than {} levels (a sonde "
                                               "manifest nests 4)",
                                               manifest_path, kMaxJsonDepth));
  try {
    return nlohmann::json::parse(*text);
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
}

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
  auto manifest = read_run_manifest(dir_fd.get(), dir);
  if (!manifest) return manifest.error();
  RunData run;
  run.source = dir;
  run.manifest = std::move(*manifest);
  const auto& m = run.manifest;
  if (!m.is_object() || !m.contains("levels") || !m["levels"].is_array())
    return make_error(Errc::parse,
                      fmt::format("{}:1: expected an object with a `levels` list", manifest_path));
  std::uint64_t values_left = kMaxRunValues;
  for (const auto& name : m["levels"]) {
    if (!name.is_string() || !parse_level(name.get<std::string>()))
      return make_error(Errc::parse, fmt::format("{}: unknown level {} in `levels` (expected "
                                                 "process, user, slurm or system)",
                                                 manifest_path, printable(json_text(name), 60)));
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
  if (auto ok = read_nodes(dir_fd.get(), dir, manifest_path, run, values_left); !ok)
    return ok.error();
  return run;
}

}  // namespace sonde
