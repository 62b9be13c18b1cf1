#include "sinks/csv_parse.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "core/nan.hpp"

namespace sonde::csv {
bool parse_number(std::string_view f, double& out) {
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

std::string printable(std::string_view s, std::size_t max) {
  std::string out(s.substr(0, max));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return out;
}

Result<void> parse_rfc4180(std::string_view s, const std::string& path, const RecordFn& on_record) {
  std::size_t i = 0, line = 1;
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
    if (auto ok = on_record(fields, record_line); !ok) return ok.error();
  }
  return {};
}

}  // namespace sonde::csv
