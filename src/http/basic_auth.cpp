#include "http/basic_auth.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/base64.hpp"
#include "core/fs.hpp"
#include "core/trust.hpp"

namespace sonde::http {

namespace {

constexpr std::size_t kMaxAuthFileBytes = std::size_t{1} << 20;
constexpr std::size_t kMaxCached = 64;
constexpr auto kCacheFor = std::chrono::seconds(60);

std::string sha256(std::string_view s) {
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d);
  return std::string(reinterpret_cast<const char*>(d), sizeof d);
}

}  // namespace

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
  std::vector<int> sha256_lines;
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
    // The user ends at the first ':' (RFC 7617: a user id has none); a crypt hash has none either.
    const std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return make_error(Errc::config,
                        fmt::format("--basic-auth-file {}:{}: expected 'USER:HASH' (HASH: a "
                                    "bcrypt hash as 'htpasswd -nB USER' prints it)",
                                    path, line_no));
    std::string why;
    auto hash = PasswordHash::parse(line.substr(colon + 1), why);
    if (!hash)
      return make_error(Errc::config, fmt::format("--basic-auth-file {}:{}: expected {} after "
                                                  "'{}:'",
                                                  path, line_no, why, line.substr(0, colon)));
    if (hash->kind() == PasswordHash::Kind::sha256) sha256_lines.push_back(line_no);
    if (!hash->weakness().empty())
      auth.warnings_.push_back(fmt::format("--basic-auth-file {}:{}: the hash uses {}", path,
                                           line_no, hash->weakness()));
    auth.users_.push_back(User{std::string(line.substr(0, colon)), std::move(*hash)});
  }
  if (auth.users_.empty())
    return make_error(
        Errc::config,
        fmt::format("--basic-auth-file {}: expected at least one 'USER:HASH' line", path));
  if (!sha256_lines.empty())
    auth.warnings_.push_back(fmt::format(
        "--basic-auth-file {}: line{} {} hold{} an unsalted SHA-256, which whoever reads the file "
        "can test guesses against at GPU speed; write bcrypt hashes instead ('htpasswd -nB USER')",
        path, sha256_lines.size() > 1 ? "s" : "", fmt::join(sha256_lines, ", "),
        sha256_lines.size() > 1 ? "" : "s"));
  unsigned char key[32];
  if (RAND_bytes(key, sizeof key) != 1)
    return make_error(Errc::failed, "--basic-auth-file: no random bytes for the cache's key");
  auth.cache_->key.assign(reinterpret_cast<const char*>(key), sizeof key);
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
  const std::string_view password = std::string_view(decoded).substr(colon + 1);

  const auto now = std::chrono::steady_clock::now();
  const std::string digest = sha256(cache_->key + decoded);
  {
    std::lock_guard lock(cache_->mu);
    std::erase_if(cache_->accepted, [&](const Accepted& a) { return a.until <= now; });
    for (const Accepted& a : cache_->accepted)
      if (CRYPTO_memcmp(a.digest.data(), digest.data(), digest.size()) == 0) return true;
  }
  bool ok = false;
  for (const User& u : users_)
    if (u.name == user && u.hash.matches(password)) ok = true;
  if (ok) {
    std::lock_guard lock(cache_->mu);
    if (cache_->accepted.size() >= kMaxCached) cache_->accepted.erase(cache_->accepted.begin());
    cache_->accepted.push_back(Accepted{digest, now + kCacheFor});
  }
  return ok;
}

}  // namespace sonde::http
