#pragma once
// A password hash of `sonde serve --basic-auth-file`: a crypt(3) hash from libxcrypt (bcrypt
// "$2b$"/"$2y$" as `htpasswd -B` and Prometheus' exporter-toolkit write it, yescrypt "$y$",
// SHA-crypt "$6$"/"$5$") or, kept for files written before, the password's unsalted SHA-256 in
// 64 hex digits. Checking a password against a crypt hash costs what the hash asks (bcrypt at
// cost 10: tens of milliseconds), so the holder caches what it accepted (BasicAuth).
#include <optional>
#include <string>
#include <string_view>

namespace sonde::http {

class PasswordHash {
 public:
  enum class Kind { crypt, sha256 };

  /// Parses a hash as written in the file; an error text (what was expected) otherwise.
  static std::optional<PasswordHash> parse(std::string_view text, std::string& error);

  /// Whether `password` matches, in time that does not depend on where it differs.
  bool matches(std::string_view password) const;

  Kind kind() const { return kind_; }
  /// For a crypt hash that libxcrypt deems legacy or too cheap: why (empty otherwise).
  const std::string& weakness() const { return weakness_; }

 private:
  Kind kind_ = Kind::crypt;
  std::string value_;  ///< the crypt string, or the 32 raw bytes of the SHA-256
  std::string weakness_;
};

}  // namespace sonde::http
