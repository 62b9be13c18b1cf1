#include "core/rapl.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "core/fs.hpp"

namespace sonde::rapl {
namespace {

// "intel-rapl:0:1" → {0, 1}; nullopt for anything else (intel-rapl-mmio:0, other drivers).
std::optional<std::vector<int>> zone_path(const std::string& name) {
  constexpr std::string_view prefix = "intel-rapl:";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  std::vector<int> out;
  std::string_view rest = std::string_view(name).substr(prefix.size());
  while (!rest.empty()) {
    int v = 0;
    auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || v < 0) return std::nullopt;
    out.push_back(v);
    rest.remove_prefix(static_cast<std::size_t>(p - rest.data()));
    if (rest.empty()) break;
    if (rest.front() != ':') return std::nullopt;
    rest.remove_prefix(1);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

std::optional<double> parse_uj(const std::string& text) {
  const std::string t = trim(text);
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || t.empty()) return std::nullopt;
  return static_cast<double>(v);
}

}  // namespace

std::vector<Zone> discover(const std::string& sys_root, std::vector<std::string>* notes) {
  const std::string base = sys_root + "/class/powercap";
  std::vector<Zone> zones;
  auto names = list_dir(base);
  if (!names) return zones;
  std::vector<std::pair<std::vector<int>, std::string>> found;
  for (const auto& n : *names)
    if (auto p = zone_path(n)) found.emplace_back(std::move(*p), n);
  std::sort(found.begin(), found.end());
  // The package number of each top-level zone (package-N), for its sub-zones.
  std::vector<std::pair<int, int>> top_package;  // top-level index → package
  for (const auto& [path, name] : found) {
    Zone z;
    z.zone = name;
    z.dir = base + "/" + name;
    auto kind = read_file(z.dir + "/name");
    if (!kind) {
      if (notes) notes->push_back(kind.error().message);
      continue;
    }
    z.kind = trim(*kind);
    if (auto range = read_file(z.dir + "/max_energy_range_uj"))
      z.max_range_uj = parse_uj(*range).value_or(0);
    if (path.size() == 1) {
      int pkg = -1;
      if (z.kind.rfind("package-", 0) == 0) {
        const std::string_view num = std::string_view(z.kind).substr(8);
        int v = 0;
        if (std::from_chars(num.data(), num.data() + num.size(), v).ec == std::errc()) pkg = v;
        z.label = z.kind;
        z.kind = "package";
      } else {
        z.label = z.kind;
      }
      z.package = pkg;
      top_package.emplace_back(path[0], pkg);
    } else {
      auto it = std::find_if(top_package.begin(), top_package.end(),
                             [&](const auto& tp) { return tp.first == path[0]; });
      z.package = it != top_package.end() ? it->second : -1;
      z.label = z.package >= 0 ? fmt::format("{}-{}", z.kind, z.package)
                               : fmt::format("{}-{}", z.kind, fmt::join(path, "-"));
    }
    zones.push_back(std::move(z));
  }
  return zones;
}

Reading read_energy(const Zone& zone) {
  Reading r;
  const std::string file = zone.dir + "/energy_uj";
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    r.denied = err == EACCES || err == EPERM;
    r.gone = err == ENOENT || err == ENODEV || err == ENOTDIR;
    r.error = fmt::format("{}: {}", file, std::strerror(err));
    return r;
  }
  std::string buf;
  const long n = pread_all(fd.get(), buf);
  if (n < 0) {
    const int err = static_cast<int>(-n);
    r.denied = err == EACCES || err == EPERM;
    r.gone = err == ENOENT || err == ENODEV;
    r.error = fmt::format("{}: {}", file, std::strerror(err));
    return r;
  }
  buf.resize(static_cast<std::size_t>(n));
  r.uj = parse_uj(buf);
  if (!r.uj)
    r.error = fmt::format("{}: expected a whole number of microjoules, got '{}'", file, trim(buf));
  return r;
}

double delta_joules(const Zone& zone, double prev_uj, double cur_uj) {
  double d = cur_uj - prev_uj;
  if (d < 0 && zone.max_range_uj > 0) d += zone.max_range_uj;
  return d < 0 ? 0.0 : d / 1e6;
}

std::string permission_hint(const std::string& file) {
  return fmt::format(
      "{} is readable only by root (the kernel's default since 2020, CVE-2020-8694): the energy "
      "columns of the RAPL domains are not measured. A site grants read access with a udev rule, "
      "e.g. SUBSYSTEM==\"powercap\", ACTION==\"add\", RUN+=\"/bin/chmod o+r "
      "/sys/class/powercap/%k/energy_uj\", or `chmod o+r "
      "/sys/class/powercap/intel-rapl:*/energy_uj` at boot (docs/energy.md)",
      file);
}

}  // namespace sonde::rapl
