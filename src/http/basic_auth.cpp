#include "http/basic_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/trust.hpp"

namespace sonde::http {

namespace {

constexpr std::size_t kMaxAuthFileBytes = std::size_t{1} << 20;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string sha256(std::string_view s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return std::string(reinterpret_cast<const char*>(d), sizeof d);
}

}  // namespace

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (std::size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<std::size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad) return false;  // data after padding
      v[k] = value(c);
      if (v[k] < 0) return false;
    }
    const unsigned n = (static_cast<unsigned>(v[0]) << 18) | (static_cast<unsigned>(v[1]) << 12) |
                       (static_cast<unsigned>(v[2]) << 6) | static_cast<unsigned>(v[3]);
    out += static_cast<char>((n >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return true;
}

Result<BasicAuth> BasicAuth::load(const std::string& path) {
  // Opened once, checked on the descriptor (owner, mode, every directory above it) and read
  // from it: never checked by name and reopened.
  auto fd = open_private(path, "--basic-auth-file");
  if (!fd) return make_error(Errc::config, fd.error().message);
  auto text = read_trusted(*fd, path, kMaxAuthFileBytes);
  if (!text)
    return make_error(Errc::config, fmt::format("--basic-auth-file: {}", text.error().message));
  return parse(*text, path);
}

Result<BasicAuth> BasicAuth::parse(std::string_view text, const std::string& path) {
  BasicAuth auth;
  int line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back())))
      line.remove_suffix(1);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.front())))
      line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const std::size_t colon = line.rfind(':');
    const auto bad = [&] {
      return make_error(Errc::config,
                        fmt::format("--basic-auth-file {}:{}: expected 'USER:SHA256' (the "
                                    "password's SHA-256 as 64 hex digits, e.g. from 'printf %s "
                                    "PASSWORD | sha256sum')",
                                    path, line_no));
    };
    if (colon == std::string_view::npos || colon == 0) return bad();
    const std::string_view hex = line.substr(colon + 1);
    if (hex.size() != 64) return bad();
    User u;
    u.name = std::string(line.substr(0, colon));
    for (std::size_t i = 0; i < 64; i += 2) {
      const int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
      if (hi < 0 || lo < 0) return bad();
      u.sha256 += static_cast<char>(hi * 16 + lo);
    }
    auth.users_.push_back(std::move(u));
  }
  if (auth.users_.empty())
    return make_error(
        Errc::config,
        fmt::format("--basic-auth-file {}: expected at least one 'USER:SHA256' line", path));
  return auth;
}

bool BasicAuth::allows(std::string_view authorization) const {
  // "Basic <base64 of user:password>"; the scheme is case-insensitive.
  if (authorization.size() < 6) return false;
  for (std::size_t i = 0; i < 5; ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != "basic"[i]) return false;
  if (authorization[5] != ' ') return false;
  std::string_view b64 = authorization.substr(6);
  while (!b64.empty() && b64.front() == ' ') b64.remove_prefix(1);
  std::string decoded;
  if (!base64_decode(b64, decoded)) return false;
  const std::size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  const std::string_view user = std::string_view(decoded).substr(0, colon);
  const std::string digest = sha256(std::string_view(decoded).substr(colon + 1));
  bool ok = false;
  for (const User& u : users_)  // every entry compared, in constant time per entry
    if (CRYPTO_memcmp(u.sha256.data(), digest.data(), digest.size()) == 0 && u.name == user)
      ok = true;
  return ok;
}

}  // namespace sonde::http
