#include "core/marks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/utf8.hpp"

namespace sonde {

namespace {

constexpr std::size_t kMaxName = 200;
constexpr std::size_t kMaxPollBytes = 1 << 20;

}  // namespace

std::string clean_mark_name(std::string_view name) {
  std::string text = valid_utf8(name);
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = ' ';
  const std::size_t first = text.find_first_not_of(' ');
  if (first == std::string::npos) return {};
  text.erase(0, first);
  text.erase(text.find_last_not_of(' ') + 1);
  if (text.size() > kMaxName) {
    std::size_t cut = kMaxName;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text.erase(text.find_last_not_of(' ') + 1);
  }
  return text;
}

std::optional<Mark> parse_mark_line(std::string_view line) {
  if (line.size() > kMaxMarkLine) return std::nullopt;
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return std::nullopt;
  double t = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + space, t);
  if (ec != std::errc() || end != line.data() + space || !std::isfinite(t) || t <= 0)
    return std::nullopt;
  Mark m{t, clean_mark_name(line.substr(space + 1))};
  if (m.name.empty()) return std::nullopt;
  return m;
}

Result<std::string> format_mark_line(std::string_view name, double wall_s) {
  const std::string clean = clean_mark_name(name);
  if (clean.empty())
    return make_error(Errc::config, "a mark needs a name (printable text, at most 200 bytes)");
  return fmt::format("{:.6f} {}\n", wall_s, clean);
}

Result<void> append_mark(const std::string& path, std::string_view name, double wall_s) {
  auto line = format_mark_line(name, wall_s);
  if (!line) return line.error();
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
  if (!fd)
    return make_error(Errc::io, fmt::format("cannot open the marks file {} (${}): {}", path,
                                            kMarksEnv, std::strerror(errno)));
  // One write: O_APPEND places it whole after what other writers appended.
  ssize_t n = 0;
  while ((n = ::write(fd.get(), line->data(), line->size())) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(line->size()))
    return make_error(Errc::io, fmt::format("cannot write to the marks file {}: {}", path,
                                            n < 0 ? std::strerror(errno) : "short write"));
  return {};
}

std::vector<Mark> MarkReader::poll() {
  std::vector<Mark> out;
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return out;
  std::string chunk(64 * 1024, '\0');
  std::size_t read_now = 0;
  while (read_now < kMaxPollBytes) {
    const ssize_t n = ::pread(fd.get(), chunk.data(), chunk.size(), offset_);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    offset_ += n;
    read_now += static_cast<std::size_t>(n);
    std::string_view data(chunk.data(), static_cast<std::size_t>(n));
    while (!data.empty()) {
      const std::size_t eol = data.find('\n');
      const std::string_view piece = data.substr(0, eol);
      // A line longer than any writer sends is skipped whole, however it arrives.
      if (!overlong_ && partial_.size() + piece.size() <= kMaxMarkLine)
        partial_.append(piece);
      else
        overlong_ = true;
      if (eol == std::string_view::npos) break;  // the rest of the line comes later
      data.remove_prefix(eol + 1);
      std::optional<Mark> mark;
      if (!overlong_) mark = parse_mark_line(partial_);
      partial_.clear();
      overlong_ = false;
      if (!mark) {
        ++skipped_;
      } else if (kept_ >= kMaxMarks) {
        ++dropped_;
      } else {
        ++kept_;
        out.push_back(std::move(*mark));
      }
    }
  }
  return out;
}

}  // namespace sonde
