#include "http/password_hash.hpp"

#include <crypt.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <cctype>
#include <memory>
#include <string>

namespace sonde::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<PasswordHash> PasswordHash::parse(std::string_view text, std::string& error) {
  PasswordHash h;
  if (!text.empty() && text.front() == '$') {
    h.kind_ = Kind::crypt;
    h.value_ = std::string(text);
    if (h.value_.find('\0') != std::string::npos) {
      error = "a crypt hash without NUL bytes";
      return std::nullopt;
    }
    switch (crypt_checksalt(h.value_.c_str())) {
      case CRYPT_SALT_OK: break;
      case CRYPT_SALT_METHOD_LEGACY: h.weakness_ = "a legacy hashing method"; break;
      case CRYPT_SALT_TOO_CHEAP: h.weakness_ = "a cost too low to slow down guessing"; break;
      case CRYPT_SALT_METHOD_DISABLED:
        error = "a hashing method this system's libcrypt supports (this one is disabled)";
        return std::nullopt;
      default:
        error = "a crypt(3) hash such as bcrypt's '$2y$10$…' (htpasswd -nB USER)";
        return std::nullopt;
    }
    // libxcrypt accepts bcrypt at any cost; below 10 (htpasswd's default is 5) a GPU tries
    // guesses fast.
    if (h.weakness_.empty() && h.value_.size() > 7 && h.value_[1] == '2' && h.value_[3] == '$' &&
        std::isdigit(static_cast<unsigned char>(h.value_[4])) &&
        std::isdigit(static_cast<unsigned char>(h.value_[5])) && h.value_[6] == '$') {
      const int cost = (h.value_[4] - '0') * 10 + (h.value_[5] - '0');
      if (cost < 10)
        h.weakness_ =
            "bcrypt at cost " + std::to_string(cost) + " (10 or more slows guessing down)";
    }
    // crypt_checksalt looks at the prefix and parameters only: a hash cut short passes it, and
    // would never match. Hashing a probe with it as the setting checks the whole string's form.
    auto data = std::make_unique<crypt_data>();
    const char* probe = crypt_r("", h.value_.c_str(), data.get());
    if (probe == nullptr || probe[0] == '*' || std::string_view(probe).size() != h.value_.size()) {
      error = "a complete crypt(3) hash such as bcrypt's '$2y$10$…' (htpasswd -nB USER)";
      return std::nullopt;
    }
    return h;
  }
  if (text.size() != 64) {
    error =
        "a crypt(3) hash such as bcrypt's '$2y$10$…' (htpasswd -nB USER), or the "
        "password's SHA-256 in 64 hex digits";
    return std::nullopt;
  }
  h.kind_ = Kind::sha256;
  for (std::size_t i = 0; i < 64; i += 2) {
    const int hi = hex_value(text[i]), lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) {
      error = "the password's SHA-256 in 64 hex digits, or a crypt(3) hash";
      return std::nullopt;
    }
    h.value_ += static_cast<char>(hi * 16 + lo);
  }
  return h;
}

bool PasswordHash::matches(std::string_view password) const {
  if (kind_ == Kind::sha256) {
    unsigned char d[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(password.data()), password.size(), d);
    return CRYPTO_memcmp(value_.data(), d, sizeof d) == 0;
  }
  // crypt_r takes a C string: a password with a NUL byte in it is refused, not cut short.
  if (password.find('\0') != std::string_view::npos) return false;
  const std::string phrase(password);
  auto data = std::make_unique<crypt_data>();  // about 32 KiB: not on the stack
  const char* out = crypt_r(phrase.c_str(), value_.c_str(), data.get());
  if (out == nullptr || out[0] == '*') return false;
  const std::string_view got(out);
  return got.size() == value_.size() && CRYPTO_memcmp(got.data(), value_.data(), got.size()) == 0;
}

}  // namespace sonde::http
