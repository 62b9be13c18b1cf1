#pragma once
// A small HTTP/1.1 server for `sonde serve`: one thread, one epoll loop, non-blocking sockets.
// Every connection has a deadline (the whole request head, the idle keep-alive time, the whole
// response), so slow clients hold a few kilobytes and a slot, never a thread; connections per
// client address and in all are capped; pipelined requests are answered one by one, in order.
// The handler runs on the loop's thread and must be quick (sonde's copies a cached page).
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/result.hpp"
#include "http/request.hpp"

namespace sonde::http {

/// Counters of the loop, readable from any thread.
struct ServerStats {
  std::atomic<std::uint64_t> accepted{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> refused_per_client{0};  ///< over max_connections_per_client
  std::atomic<std::uint64_t> evicted{0};             ///< idle/slow, closed for a new one at the cap
  std::atomic<std::uint64_t> refused_full{0};        ///< at the cap with nothing to evict
  std::atomic<std::uint64_t> header_timeouts{0};     ///< request head not complete in time
  std::atomic<std::uint64_t> idle_timeouts{0};       ///< kept-alive connection closed when idle
  std::atomic<std::uint64_t> write_timeouts{0};      ///< response not taken in time
  std::atomic<std::uint64_t> bad_requests{0};        ///< answered 4xx by the parser
  std::atomic<std::uint64_t> tls_failures{0};        ///< TLS handshake or record failed
  std::atomic<std::uint64_t> open{0};                ///< open now
};

/// A certificate (PEM, the chain after the leaf) and its private key (PEM, not encrypted) for
/// HTTPS. The key file must be a regular file that others cannot read or write.
struct TlsFiles {
  std::string cert_file;
  std::string key_file;
};

class Server {
 public:
  using Handler = std::function<Response(const Request&)>;

  /// Binds and listens on HOST (a numeric address or a name) and PORT (0: a free one); with
  /// `tls`, every connection is TLS (1.2 or later), without it plain HTTP (the same code path
  /// as before TLS existed, with no per-connection TLS state).
  static Result<std::unique_ptr<Server>> listen(const std::string& host, int port, Limits limits,
                                                Handler handler, const TlsFiles* tls = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  /// Whether the bound address is a loopback one (127/8, ::1, ::ffff:127/104).
  bool loopback() const;
  bool tls() const;
  const Limits& limits() const;
  const ServerStats& stats() const;

  /// Serves until stop(); returns an error only when the loop itself cannot go on.
  Result<void> run();
  /// From any thread (or a signal handler): run() returns soon after.
  void stop();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sonde::http
