#pragma once
// HTTP basic authentication for `sonde serve --basic-auth-file FILE`: a file of "USER:HASH" lines
// ('#' comments and blank lines allowed; HASH as http/password_hash.hpp reads it: bcrypt and the
// other crypt(3) hashes, or an unsalted SHA-256 kept for older files), checked against a request's
// "Authorization: Basic …" header. Meant for use over TLS (the password crosses the network in
// clear otherwise).
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"
#include "http/password_hash.hpp"

namespace sonde::http {

class BasicAuth {
 public:
  /// Reads and checks the file: a regular file that others cannot read or write; errors name
  /// the file and line and say what was expected.
  static Result<BasicAuth> load(const std::string& path);
  /// Parses the file's text (no file checks); `path` only names it in errors.
  static Result<BasicAuth> parse(std::string_view text, const std::string& path);

  /// Whether an Authorization header value carries a known user and its password. A pair
  /// accepted once is remembered for a minute (at most 64 pairs), so that a scraper does not pay
  /// a bcrypt check per request; a refused one is checked again every time.
  bool allows(std::string_view authorization) const;
  std::size_t users() const { return users_.size(); }
  /// What to tell the operator at start: lines whose hash is unsalted SHA-256 or weak.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  struct User {
    std::string name;
    PasswordHash hash;
  };
  struct Accepted {
    std::string digest;  ///< SHA-256 of the header's "user:password", salted with this process' key
    std::chrono::steady_clock::time_point until;
  };
  struct Cache {
    std::mutex mu;
    std::string key;  ///< random, per process
    std::vector<Accepted> accepted;
  };
  std::vector<User> users_;
  std::vector<std::string> warnings_;
  std::unique_ptr<Cache> cache_ = std::make_unique<Cache>();
};

}  // namespace sonde::http
