// The checks of an agent's lines (core/multinode_checks.hpp): column names, field types, text
// from outside made printable.
#include "core/multinode_checks.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace sonde::multinode {
namespace {

/// The length of the UTF-8 sequence at s[i] (RFC 3629: no overlong forms, no surrogates), 0 when
/// it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  const auto c1 = static_cast<unsigned char>(s[i + 1]);
  if (c1 < lo || c1 > hi) return 0;
  for (std::size_t k = 2; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

}  // namespace

bool is_valid_column_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxColumnName || name == "time" || name == "wallclock")
    return false;
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(),
                     [&](char c) { return static_cast<unsigned char>(c) < 0x80 && word(c); });
}

std::string line_fault(const nlohmann::json& doc, const std::vector<Level>& levels) {
  auto text_or_absent = [&](const char* key) {
    auto it = doc.find(key);
    return it == doc.end() || it->is_string();
  };
  if (auto w = doc.find("wallclock"); w != doc.end() && !w->is_number())
    return "its wallclock is not a number";
  if (auto st = doc.find("status"); st != doc.end()) {
    if (!st->is_string()) return "its status is not text";
    const std::string& status = st->get_ref<const std::string&>();
    if (status == "ready") {
      if (!text_or_absent("node")) return "its node is not text";
      if (auto ni = doc.find("node_info"); ni != doc.end() && !ni->is_object())
        return "its node_info is not an object";
      if (auto c = doc.find("columns_by_level"); c != doc.end()) {
        if (!c->is_object()) return "its columns_by_level is not an object";
        for (Level l : levels) {
          auto e = c->find(std::string(level_name(l)));
          if (e == c->end()) continue;
          if (!e->is_array()) return fmt::format("its {} columns are not a list", level_name(l));
          for (const auto& name : *e)
            if (!name.is_string())
              return fmt::format("its {} columns hold a name that is not text", level_name(l));
        }
      }
    } else if (status == "end") {
      if (!text_or_absent("reason")) return "the reason of its end line is not text";
    } else if (status == "error") {
      if (!text_or_absent("error")) return "the text of its error line is not text";
    }
    return {};
  }
  auto level = doc.find("level");
  if (level == doc.end()) return {};
  if (!level->is_string()) return "the level of its sample is not text";
  if (!doc.contains("wallclock")) return "its sample has no wallclock";
  auto sample = doc.find("sample");
  if (sample == doc.end() || !sample->is_object()) return "its sample is not an object";
  for (const auto& [key, v] : sample->items())
    if (!v.is_number() && !v.is_null())
      return fmt::format("its sample's {} is not a number", shown(key));
  return {};
}

std::string printable(std::string_view s, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_length(s, i);
    const auto c = static_cast<unsigned char>(s[i]);
    const bool control = n == 0 || (n == 1 && (c < 0x20 || c == 0x7f)) ||
                         (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0);
    const std::size_t take = control ? 1 : n;
    if (out.size() + (control ? 1 : n) > max) {
      out += "...";
      break;
    }
    if (control)
      out += '?';
    else
      out.append(s.substr(i, n));
    i += take;
  }
  return out;
}

std::string shown(std::string_view s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out + (s.size() > 64 ? "'..." : "'");
}

}  // namespace sonde::multinode
