#include "core/utf8.hpp"

namespace sonde {

std::size_t utf8_length(std::string_view v) {
  const auto b0 = static_cast<unsigned char>(v[0]);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (v.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(v[i]);
    if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

bool is_utf8(std::string_view v) {
  while (!v.empty()) {
    const std::size_t n = utf8_length(v);
    if (n == 0) return false;
    v.remove_prefix(n);
  }
  return true;
}

std::string valid_utf8(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  while (!v.empty()) {
    const std::size_t n = utf8_length(v);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for the byte
      v.remove_prefix(1);
      continue;
    }
    out += v.substr(0, n);
    v.remove_prefix(n);
  }
  return out;
}

}  // namespace sonde
