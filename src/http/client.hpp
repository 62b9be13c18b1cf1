#pragma once
// An HTTP(S) client for the report commands' requests to Prometheus (cpp-httplib, with OpenSSL):
// one base URL (scheme, host, port and an optional path prefix, e.g. a proxy's /prometheus),
// basic auth or a bearer token, a private CA. Everything the server sends is bounded: a deadline
// per request (its whole life, not per read: a server that drips one byte a second is cut off)
// and per command, and a cap on the body after decompression. Errors name the URL.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/result.hpp"

namespace sonde::http {

struct ClientOptions {
  std::string user;       ///< basic auth (with password) when not empty
  std::string password;   ///< never from the command line: a file or the environment
  std::string token;      ///< bearer token (exclusive with user)
  std::string ca_file;    ///< PEM file of the CA that signed the server's certificate (https)
  double timeout_s = 60;  ///< the deadline of one request, from its start to its last byte
  /// The deadline of all requests of this client together (a command's), from create().
  double command_timeout_s = 600;
  /// The largest body accepted, after decompression (a gzip bomb stops here, not in memory).
  std::uint64_t max_body_bytes = std::uint64_t{256} << 20;
};

struct ClientResponse {
  int status = 0;
  std::string body;
  std::string content_type;
};

/// Percent-encodes `s` for a query string or a form body (RFC 3986 unreserved kept).
std::string url_encode(const std::string& s);
/// `a=b&c=d`, encoded.
std::string form_encode(const std::vector<std::pair<std::string, std::string>>& fields);

class Client {
 public:
  /// `base_url`: http[s]://host[:port][/prefix]. Errc::config for a malformed URL or options.
  static Result<std::unique_ptr<Client>> create(const std::string& base_url,
                                                const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  /// POSTs a form (application/x-www-form-urlencoded) to prefix + `path`. Any HTTP status is a
  /// Response; an error is a failure to connect, a timeout or a TLS failure (Errc::io).
  Result<ClientResponse> post_form(const std::string& path,
                                   const std::vector<std::pair<std::string, std::string>>& fields);
  /// The full URL of `path`, for messages.
  std::string url(const std::string& path) const { return base_ + prefix_ + path; }
  /// Bytes received in response bodies so far, and requests made.
  std::uint64_t bytes_received() const { return bytes_; }
  std::uint64_t requests() const { return requests_; }

 private:
  Client() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string base_;    ///< scheme://host:port
  std::string prefix_;  ///< path prefix, without a trailing '/'
  std::uint64_t bytes_ = 0, requests_ = 0;
  double timeout_s_ = 60;
  double command_deadline_ = 0;  ///< monotonic seconds
  double command_timeout_s_ = 600;
  std::uint64_t max_body_ = 0;
};

/// Reads a secret from `file`: its first line, without the newline. The file passes the rule
/// for secrets (open_private: the trust rule, and not readable by others) and holds at most
/// kMaxSecretBytes; `what` (the option) is named in errors.
inline constexpr std::size_t kMaxSecretBytes = std::size_t{64} << 10;
Result<std::string> read_secret_file(const std::string& file, const std::string& what);

}  // namespace sonde::http
