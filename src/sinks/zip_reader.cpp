#include "sinks/zip_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include "core/fs.hpp"
#include "sinks/bounded_read.hpp"
#include "sinks/run_data.hpp"

namespace sonde {
namespace {
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
}  // namespace

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
    if (en.name.rfind(run_prefix, 0) != 0) continue;
    // The run's own files, and a multi-node run's `nodes/<node>/perf_<level>.csv`.
    std::string rel = en.name.substr(run_prefix.size());
    int target_fd = dir_fd.get();
    UniqueFd node_fd;
    if (rel.find('/') != std::string::npos) {
      const auto first = rel.find('/'), second = rel.find('/', first + 1);
      if (rel.compare(0, first, "nodes") != 0 || second == std::string::npos ||
          rel.find('/', second + 1) != std::string::npos)
        continue;
      const std::string node = rel.substr(first + 1, second - first - 1);
      if (!is_plain_name(node) || rel.compare(second + 1, 5, "perf_") != 0) continue;
      ::mkdirat(dir_fd.get(), "nodes", 0700);
      UniqueFd nodes_fd(
          ::openat(dir_fd.get(), "nodes", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!nodes_fd) return bad("cannot extract " + en.name);
      ::mkdirat(nodes_fd.get(), node.c_str(), 0700);
      node_fd.reset(
          ::openat(nodes_fd.get(), node.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!node_fd) return bad("cannot extract " + en.name);
      target_fd = node_fd.get();
      rel = rel.substr(second + 1);
    }
    const std::size_t l = en.local;
    if (l + 30 > b.size() || le32(b, l) != 0x04034b50) return bad("corrupt entry " + en.name);
    const std::size_t start = l + 30 + le16(b, l + 26) + le16(b, l + 28);
    if (start + en.csize > b.size()) return bad("truncated entry " + en.name);
    auto out = create_file_in(target_fd, rel, zip + ":" + en.name);
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
  for (auto& n : run->nodes) n.source = zip + " node " + n.node;
  return run;
}

}  // namespace sonde
