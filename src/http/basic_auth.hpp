#pragma once
// HTTP basic authentication for `sonde serve --basic-auth-file FILE`: a file of "user:<sha256 of
// the password, 64 hex digits>" lines ('#' comments and blank lines allowed), checked against a
// request's "Authorization: Basic …" header. Meant for use over TLS (the password crosses the
// network in clear otherwise).
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace sonde::http {

class BasicAuth {
 public:
  /// Reads and checks the file: a regular file that others cannot read or write; errors name
  /// the file and line and say what was expected.
  static Result<BasicAuth> load(const std::string& path);
  /// Parses the file's text (no file checks); `path` only names it in errors.
  static Result<BasicAuth> parse(std::string_view text, const std::string& path);

  /// Whether an Authorization header value carries a known user and its password.
  bool allows(std::string_view authorization) const;
  std::size_t users() const { return users_.size(); }

 private:
  struct User {
    std::string name;
    std::string sha256;  ///< 32 raw bytes
  };
  std::vector<User> users_;
};

/// Standard base64 (RFC 4648, with padding) into `out`; false on bad input.
bool base64_decode(std::string_view in, std::string& out);

}  // namespace sonde::http
