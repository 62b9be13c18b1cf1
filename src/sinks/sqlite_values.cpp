#include "sinks/sqlite_values.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/nan.hpp"
#include "sinks/format.hpp"

namespace sonde::sqlite_detail {

int busy_ms(double seconds) {
  return static_cast<int>(std::lround(std::clamp(seconds, 0.0, 3600.0) * 1000.0));
}

std::string column_text(sqlite3_stmt* s, int i) {
  const auto* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
}

std::optional<double> column_opt_double(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}

void bind_text(sqlite3_stmt* s, int i, const std::string& text) {
  sqlite3_bind_text(s, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

void append_values(std::string& out, const std::vector<double>& row) {
  out += '[';
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (i) out += ',';
    append_number(out, row[i], "null");
  }
  out += ']';
}

bool parse_values(std::string_view text, std::vector<double>& out) {
  out.clear();
  auto skip_ws = [&](std::size_t& i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t')) ++i;
  };
  std::size_t i = 0;
  skip_ws(i);
  if (i >= text.size() || text[i] != '[') return false;
  ++i;
  skip_ws(i);
  if (i < text.size() && text[i] == ']') return true;
  while (i < text.size()) {
    skip_ws(i);
    if (text.compare(i, 4, "null") == 0) {
      out.push_back(kNaN);
      i += 4;
    } else {
      double v = 0;
      const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
      if (ec != std::errc()) return false;
      out.push_back(v);
      i = static_cast<std::size_t>(p - text.data());
    }
    skip_ws(i);
    if (i >= text.size()) return false;
    if (text[i] == ']') return true;
    if (text[i] != ',') return false;
    ++i;
  }
  return false;
}

}  // namespace sonde::sqlite_detail
