#pragma once
// An HTTP(S) client for the report commands' requests to Prometheus (cpp-httplib, with OpenSSL):
// one base URL (scheme, host, port and an optional path prefix, e.g. a proxy's /prometheus),
// basic auth or a bearer token, a private CA, a deadline per request. Errors name the URL.
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
  double timeout_s = 60;  ///< connect, read and write timeout of one request
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
};

/// Reads a secret from `file`: its first line, without the newline (at most 64 KiB). `warning`
/// gets a sentence when group or others may read the file.
Result<std::string> read_secret_file(const std::string& file, const std::string& what,
                                     std::string* warning = nullptr);

}  // namespace sonde::http
