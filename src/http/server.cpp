#include "http/server.hpp"

#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <deque>
#include <limits>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "core/fs.hpp"
#include "core/trust.hpp"

namespace sonde::http {

namespace {

double now_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

using Fd = UniqueFd;  ///< an owned file descriptor, closed once

/// The key connections are counted under: an IPv4 address (also when IPv4-mapped), or the /64
/// of an IPv6 one (one host usually holds a whole /64).
std::string client_key(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss).sin_addr;
    return std::string("4") + std::string(reinterpret_cast<const char*>(&a), 4);
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    const auto* b = reinterpret_cast<const char*>(a.s6_addr);
    if (IN6_IS_ADDR_V4MAPPED(&a)) return std::string("4") + std::string(b + 12, 4);
    return std::string("6") + std::string(b, 8);
  }
  return "?";
}

bool is_loopback(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(ss).sin_addr;
    return (ntohl(a.s_addr) >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(ss).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return false;
}

int port_of(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(ss).sin6_port);
  return -1;
}

constexpr std::size_t kReadChunk = 16384;
constexpr double kDrainS = 1;                    ///< after a closing response, read what is left
constexpr std::size_t kMaxDrainBytes = 1 << 20;  ///< … at most this much
constexpr double kAcceptPauseS = 0.1;            ///< out of fds: stop accepting this long
/// A connection whose queued output the peer has not taken for this long may be evicted for a
/// new client at the connection cap (a scraper takes its page in milliseconds).
constexpr double kStalledWriteS = 1;
/// Answers queued for one connection in one turn (at least one answer): then the others' turn.
constexpr std::size_t kTurnBytes = 64 << 10;
/// Refused connections kept for their 503 to be read (then half-closed and drained, as a closing
/// response is, so that the answer is not destroyed by a reset); more at once are just closed.
constexpr std::size_t kMaxRefusing = 64;
/// Buffers larger than this are freed, not kept, once empty (an idle kept-alive connection
/// holds no page-sized buffer).
constexpr std::size_t kKeepBufferBytes = 2 * kReadChunk;
/// After a flood (the open connections down to half of their peak, at most once a second), the
/// freed buffers are given back to the system (malloc_trim), not kept by the allocator.
constexpr std::size_t kTrimAfterPeak = 64;
constexpr double kTrimEveryS = 1;

}  // namespace

// Outside the anonymous namespace: Conn and Server::Impl, which have external linkage, hold them.
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};
struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};

namespace {

/// OpenSSL's last error, as one line.
std::string ssl_error_text() {
  unsigned long last = 0;
  while (const unsigned long e = ERR_get_error()) last = e;
  if (last == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(last, buf, sizeof buf);
  // "error:0A00018F:SSL routines::ee key too small": the reason is what helps.
  std::string text = buf;
  const auto colon = text.rfind(':');
  return colon == std::string::npos || colon + 1 >= text.size() ? text : text.substr(colon + 1);
}

constexpr std::size_t kMaxPemBytes = std::size_t{1} << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

/// The contents of a PEM file, opened once and checked on its descriptor under the trust rule
/// (docs/security.md); the private key also unreadable by others (a group that may read it,
/// like Debian's ssl-cert, is fine).
Result<std::string> read_pem(const std::string& path, const char* option, bool secret) {
  auto fd = secret ? open_private(path, option) : open_trusted(path, option, TrustUse::read);
  if (!fd) {
    // "--tls-key /k: No such file or directory" rather than "cannot read --tls-key /k: ...".
    std::string msg = fd.error().message;
    if (msg.rfind("cannot read ", 0) == 0) msg = msg.substr(12);
    return make_error(Errc::config, msg);
  }
  auto text = read_trusted(*fd, path, kMaxPemBytes);
  if (!text) return make_error(Errc::config, fmt::format("{}: {}", option, text.error().message));
  return text;
}

/// A server context for `tls`: TLS 1.2+, no session tickets (nothing to resume on a metrics
/// endpoint), no passphrase prompt. The certificate chain and key are parsed from the text read
/// from the checked descriptors, never opened by name again.
Result<std::unique_ptr<SSL_CTX, SslCtxFree>> make_tls_context(const TlsFiles& tls) {
  auto cert_pem = read_pem(tls.cert_file, "--tls-cert", false);
  if (!cert_pem) return cert_pem.error();
  auto key_pem = read_pem(tls.key_file, "--tls-key", true);
  if (!key_pem) return key_pem.error();
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return make_error(Errc::io, "TLS: " + ssl_error_text());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_num_tickets(ctx.get(), 0);
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                                  SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_default_passwd_cb(ctx.get(), [](char*, int, int, void*) { return 0; });
  const auto no_pass = [](char*, int, int, void*) { return 0; };
  {
    std::unique_ptr<BIO, BioFree> bio(
        BIO_new_mem_buf(cert_pem->data(), static_cast<int>(cert_pem->size())));
    X509* leaf = bio ? PEM_read_bio_X509_AUX(bio.get(), nullptr, no_pass, nullptr) : nullptr;
    const bool ok = leaf != nullptr && SSL_CTX_use_certificate(ctx.get(), leaf) == 1;
    X509_free(leaf);
    if (!ok)
      return make_error(Errc::config,
                        fmt::format("--tls-cert {}: expected a PEM certificate (chain): {}",
                                    tls.cert_file, ssl_error_text()));
    // The rest of the chain, as SSL_CTX_use_certificate_chain_file reads it.
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, no_pass, nullptr)) {
      if (SSL_CTX_add0_chain_cert(ctx.get(), ca) != 1) {
        X509_free(ca);
        return make_error(Errc::config,
                          fmt::format("--tls-cert {}: expected a PEM certificate (chain): {}",
                                      tls.cert_file, ssl_error_text()));
      }
    }
    ERR_clear_error();  // the end of the chain reads as "no start line"
  }
  {
    std::unique_ptr<BIO, BioFree> bio(
        BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size())));
    EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass, nullptr) : nullptr;
    const bool ok = key != nullptr && SSL_CTX_use_PrivateKey(ctx.get(), key) == 1;
    EVP_PKEY_free(key);
    // The key text is not kept in sonde's memory longer than needed.
    OPENSSL_cleanse(key_pem->data(), key_pem->size());
    if (!ok) {
      const std::string why = ssl_error_text();
      if (why.find("mismatch") != std::string::npos)  // OpenSSL compares it with the certificate
        return make_error(Errc::config,
                          fmt::format("--tls-key {}: does not match the certificate in {} ({})",
                                      tls.key_file, tls.cert_file, why));
      return make_error(Errc::config,
                        fmt::format("--tls-key {}: expected an unencrypted PEM private key: {}",
                                    tls.key_file, why));
    }
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return make_error(Errc::config,
                      fmt::format("--tls-key {}: does not match the certificate in {}: {}",
                                  tls.key_file, tls.cert_file, ssl_error_text()));
  return ctx;
}

}  // namespace

struct Conn {
  Fd fd;
  std::unique_ptr<SSL, SslFree> ssl;  ///< TLS only; freed before the fd is closed
  bool handshaking = false;           ///< TLS handshake not complete
  bool ssl_want_write = false;        ///< OpenSSL must write before it can read on
  std::string key;
  std::string in;
  RequestScan scan;  ///< how far the request at the front of `in` has been parsed
  std::string out;
  std::size_t out_off = 0;
  std::uint64_t queued_total = 0, sent_total = 0;
  std::deque<std::uint64_t> response_ends;  ///< queued_total at the end of each response
  bool request_open = true;                 ///< a request is under way (or the connection is new)
  double request_started = 0, idle_since = 0, write_started = 0;
  bool close_after = false;   ///< close once the queued responses are written
  bool refused = false;       ///< only here for its 503 (not counted against the caps)
  bool runnable = false;      ///< has requests left after its turn: in Impl::runnable
  double write_progress = 0;  ///< pending output: when the peer last took some (or it was queued)
  bool peer_eof = false;
  bool draining = false;
  double drain_deadline = 0;
  std::size_t drained = 0;
  std::uint32_t events = 0;  ///< epoll interest now

  std::size_t pending() const { return out.size() - out_off; }
  double deadline(const Limits& l) const {
    if (draining) return drain_deadline;
    if (pending() > 0) return write_started + l.write_timeout_s;
    if (request_open) return request_started + l.header_timeout_s;
    return idle_since + l.idle_timeout_s;
  }
};

struct Server::Impl {
  Limits limits;
  Handler handler;
  std::unique_ptr<SSL_CTX, SslCtxFree> tls;  ///< null: plain HTTP
  Fd listen_fd, epoll_fd, event_fd;
  int port = -1;
  bool loopback = false;
  std::unordered_map<int, std::unique_ptr<Conn>> conns;  // by fd
  std::unordered_map<std::string, std::size_t> per_client;
  std::size_t refusing = 0;  ///< connections in `conns` only for their 503
  /// Connections whose turn ended with requests left in their buffer (epoll will not report
  /// them: the bytes are already read): each gets another turn after the next events.
  std::vector<int> runnable;
  std::size_t peak_open = 0;  ///< the most open since the last trim
  double last_trim = 0;
  ServerStats stats;
  bool accept_paused = false;
  double accept_resume = 0;
  double now = 0;

  bool set_interest(int fd, std::uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    return ::epoll_ctl(epoll_fd.get(), op, fd, &ev) == 0;
  }

  void close_conn(int fd) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    if (it->second->refused) {
      --refusing;
    } else {
      auto pc = per_client.find(it->second->key);
      if (pc != per_client.end() && --pc->second == 0) per_client.erase(pc);
    }
    ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, fd, nullptr);
    conns.erase(it);  // closes the fd
    stats.open.store(conns.size(), std::memory_order_relaxed);
  }

  /// At the connection cap: closes the connection that has waited longest without a response to
  /// write (a slow or idle one), so that a new client is not locked out by slow ones; failing
  /// that, the one whose queued output has been stalled longest (at least kStalledWriteS): a
  /// reader that does not read locks nobody out until its write deadline.
  bool evict_one() {
    int victim = -1, stalled = -1;
    double oldest = std::numeric_limits<double>::infinity();
    double oldest_write = now - kStalledWriteS;
    for (const auto& [fd, c] : conns) {
      if (c->draining) continue;
      if (c->pending() > 0) {
        if (c->write_progress <= oldest_write) {
          oldest_write = c->write_progress;
          stalled = fd;
        }
        continue;
      }
      const double since = c->request_open ? c->request_started : c->idle_since;
      if (since < oldest) {
        oldest = since;
        victim = fd;
      }
    }
    if (victim < 0) victim = stalled;
    if (victim < 0) return false;
    close_conn(victim);
    stats.evicted.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  /// Answers 503 (docs/security.md). Closing at once would reset the connection when its
  /// request has arrived unread, and a reset can destroy the answer before the client reads it:
  /// the connection is kept (up to kMaxRefusing of them, outside the caps) until the answer is
  /// written and what the client sent is drained, as after any closing response.
  void refuse(Fd fd, std::string_view why) {
    if (tls) return;  // a plain answer means nothing to a TLS client: just close
    std::string out;
    serialize(error_response(503, why), false, false, 1, out);
    if (refusing >= kMaxRefusing) {
      [[maybe_unused]] const ssize_t n =
          ::send(fd.get(), out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return;
    }
    auto c = std::make_unique<Conn>();
    c->refused = true;
    c->request_open = false;
    c->write_started = c->write_progress = c->idle_since = now;
    c->out = std::move(out);
    c->queued_total = c->out.size();
    c->response_ends.push_back(c->queued_total);
    c->close_after = true;
    c->events = EPOLLIN | EPOLLRDHUP;
    if (!set_interest(fd.get(), c->events, EPOLL_CTL_ADD)) return;
    const int n = fd.get();
    c->fd = std::move(fd);
    Conn& conn = *c;
    conns.emplace(n, std::move(c));
    ++refusing;
    stats.open.store(conns.size(), std::memory_order_relaxed);
    if (!pump(conn)) close_conn(n);
  }

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int raw = ::accept4(listen_fd.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                                SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (raw < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: make room, or stop accepting for a moment (the listening
          // socket would otherwise stay readable and spin the loop).
          if (!evict_one()) {
            accept_paused = true;
            accept_resume = now + kAcceptPauseS;
            set_interest(listen_fd.get(), 0, EPOLL_CTL_MOD);
          }
        }
        return;  // EAGAIN, or an error that the next round retries
      }
      Fd fd(raw);
      stats.accepted.fetch_add(1, std::memory_order_relaxed);
      std::string key = client_key(ss);
      auto pc = per_client.find(key);
      if (pc != per_client.end() && pc->second >= limits.max_connections_per_client) {
        refuse(std::move(fd), "too many connections from this address");
        stats.refused_per_client.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (conns.size() - refusing >= limits.max_connections && !evict_one()) {
        refuse(std::move(fd), "too many connections");
        stats.refused_full.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_unique<Conn>();
      c->key = std::move(key);
      c->request_started = now;
      c->events = EPOLLIN | EPOLLRDHUP;
      if (tls) {
        c->ssl.reset(SSL_new(tls.get()));
        if (!c->ssl || SSL_set_fd(c->ssl.get(), fd.get()) != 1) continue;
        SSL_set_accept_state(c->ssl.get());
        c->handshaking = true;
      }
      if (!set_interest(fd.get(), c->events, EPOLL_CTL_ADD)) continue;
      const int n = fd.get();
      c->fd = std::move(fd);
      ++per_client[c->key];
      conns.emplace(n, std::move(c));
      stats.open.store(conns.size(), std::memory_order_relaxed);
      peak_open = std::max(peak_open, conns.size());
    }
  }

  /// After a flood: gives the freed connection buffers back to the system.
  void maybe_trim() {
    if (peak_open < kTrimAfterPeak || conns.size() > peak_open / 2 || now - last_trim < kTrimEveryS)
      return;
    ::malloc_trim(0);
    last_trim = now;
    peak_open = conns.size();
  }

  /// Advances a TLS handshake: 1 done, 0 waiting for the socket, -1 failed.
  int handshake(Conn& c) {
    ERR_clear_error();
    const int r = SSL_do_handshake(c.ssl.get());
    if (r == 1) {
      c.handshaking = false;
      return 1;
    }
    const int e = SSL_get_error(c.ssl.get(), r);
    std::uint32_t want = 0;
    if (e == SSL_ERROR_WANT_READ) want = EPOLLIN | EPOLLRDHUP;
    if (e == SSL_ERROR_WANT_WRITE) want = EPOLLOUT;
    if (want == 0) {
      ERR_clear_error();
      stats.tls_failures.fetch_add(1, std::memory_order_relaxed);
      return -1;
    }
    if (want != c.events) {
      if (!set_interest(c.fd.get(), want, EPOLL_CTL_MOD)) return -1;
      c.events = want;
    }
    return 0;
  }

  /// read_some over TLS: one record (and what OpenSSL already decrypted, which epoll cannot see).
  bool read_tls(Conn& c) {
    char buf[kReadChunk];
    c.ssl_want_write = false;
    ERR_clear_error();
    int n = SSL_read(c.ssl.get(), buf, sizeof buf);
    if (n > 0) {
      if (!c.request_open) {
        c.request_open = true;
        c.request_started = now;
      }
      c.in.append(buf, static_cast<std::size_t>(n));
      while (SSL_pending(c.ssl.get()) > 0 &&
             c.in.size() < limits.max_head_bytes + limits.max_body_bytes + kReadChunk) {
        n = SSL_read(c.ssl.get(), buf, sizeof buf);
        if (n <= 0) break;
        c.in.append(buf, static_cast<std::size_t>(n));
      }
      return true;
    }
    switch (SSL_get_error(c.ssl.get(), n)) {
      case SSL_ERROR_WANT_READ: return true;
      case SSL_ERROR_WANT_WRITE: c.ssl_want_write = true; return true;
      case SSL_ERROR_ZERO_RETURN: c.peer_eof = true; return true;  // close_notify or EOF
      default:
        ERR_clear_error();
        stats.tls_failures.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
  }

  /// Reads what is there; false when the connection is to be closed now.
  bool read_some(Conn& c) {
    if (c.ssl && !c.draining) return read_tls(c);  // a drain discards: raw bytes will do
    char buf[kReadChunk];
    for (;;) {
      const ssize_t n = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        if (c.draining) {
          c.drained += static_cast<std::size_t>(n);
          if (c.drained > kMaxDrainBytes) return false;
          continue;
        }
        if (!c.request_open) {
          c.request_open = true;
          c.request_started = now;
        }
        c.in.append(buf, static_cast<std::size_t>(n));
        return true;  // one read per wake-up: the loop stays fair between connections
      }
      if (n == 0) {
        if (c.draining) return false;
        c.peer_eof = true;  // a half-close: answer the complete requests, then close
        return true;
      }
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }

  /// Answers the complete requests at the front of `in`, in order, while the output queue has
  /// room. True when it queued something.
  bool process(Conn& c) {
    bool produced = false;
    const std::uint64_t turn_start = c.queued_total;
    while (!c.close_after && !c.in.empty() && c.pending() < limits.max_pending_output_bytes &&
           c.queued_total - turn_start < kTurnBytes) {
      Parsed p = parse_request(c.in, limits, c.scan);
      if (p.state == Parsed::State::incomplete) {
        if (c.peer_eof) {  // the rest will never come
          c.in.clear();
          c.scan = {};
        }
        break;
      }
      if (c.pending() == 0) c.write_started = c.write_progress = now;
      const std::size_t before = c.out.size();
      if (p.state == Parsed::State::error) {
        stats.bad_requests.fetch_add(1, std::memory_order_relaxed);
        serialize(error_response(p.error_status, p.error_text), false, false, 1, c.out);
        c.close_after = true;
        c.in.clear();
      } else {
        stats.requests.fetch_add(1, std::memory_order_relaxed);
        Response r;
        try {
          r = handler(p.request);
        } catch (...) {  // nothing crosses the loop: the client gets a 500
          r = error_response(500, "internal error");
        }
        const bool keep = p.request.keep_alive && !r.close;
        serialize(r, p.request.method == "HEAD", keep, p.request.minor_version, c.out);
        c.in.erase(0, p.consumed);
        if (!keep) {
          c.close_after = true;
          c.in.clear();
        }
        // The next request started with its first byte, which may already be here.
        c.request_open = !c.in.empty();
        c.request_started = now;
      }
      c.queued_total += c.out.size() - before;
      c.response_ends.push_back(c.queued_total);
      produced = true;
    }
    if (c.in.empty() && c.in.capacity() > kKeepBufferBytes) std::string().swap(c.in);
    return produced;
  }

  /// Writes what the socket takes; false on a write error.
  bool flush(Conn& c) {
    while (c.pending() > 0) {
      ssize_t n = 0;
      if (c.ssl) {
        ERR_clear_error();
        const int len = static_cast<int>(std::min<std::size_t>(c.pending(), 1 << 30));
        const int w = SSL_write(c.ssl.get(), c.out.data() + c.out_off, len);
        if (w <= 0) {
          const int e = SSL_get_error(c.ssl.get(), w);
          if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) break;
          ERR_clear_error();
          stats.tls_failures.fetch_add(1, std::memory_order_relaxed);
          return false;
        }
        n = w;
      } else {
        n = ::send(c.fd.get(), c.out.data() + c.out_off, c.pending(), MSG_NOSIGNAL | MSG_DONTWAIT);
      }
      if (n > 0) {
        c.out_off += static_cast<std::size_t>(n);
        c.sent_total += static_cast<std::uint64_t>(n);
        c.write_progress = now;
        // Each response has its own write deadline from when it reaches the front.
        while (!c.response_ends.empty() && c.response_ends.front() <= c.sent_total) {
          c.response_ends.pop_front();
          c.write_started = now;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    if (c.pending() == 0) {
      c.out.clear();
      if (c.out.capacity() > kKeepBufferBytes) std::string().swap(c.out);
      c.out_off = 0;
      if (!c.request_open) c.idle_since = now;
    } else if (c.out_off > 65536 && c.out_off * 2 > c.out.size()) {
      // Only once the sent part is most of the buffer: what is left is moved at most once per
      // byte sent (bench/serve_mhd: the moves were a fifth of the CPU under a gzip flood).
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
    return true;
  }

  /// Moves one connection on after an event; false when it is to be closed.
  bool pump(Conn& c) {
    const std::size_t in_cap = limits.max_head_bytes + limits.max_body_bytes + kReadChunk;
    while (!c.draining) {
      // What OpenSSL has decrypted already is not seen by epoll: read it when there is room
      // (read_tls stops at a full buffer), or the connection would wait for bytes that came.
      if (c.ssl && !c.peer_eof && c.in.size() < in_cap && SSL_pending(c.ssl.get()) > 0 &&
          !read_tls(c))
        return false;
      const bool produced = process(c);
      if (c.pending() > 0 && !flush(c)) return false;
      if (c.pending() > 0) break;  // the socket is full: wait until it is writable
      if (c.close_after) {
        // Half-close and read what the client still sends for a moment, so that the answer is
        // not destroyed by a reset for unread data.
        if (c.ssl) {
          ERR_clear_error();
          SSL_shutdown(c.ssl.get());  // close_notify, best effort
          ERR_clear_error();
        }
        ::shutdown(c.fd.get(), SHUT_WR);
        c.draining = true;
        c.drain_deadline = now + kDrainS;
        break;
      }
      // One batch of answers (process stops at kTurnBytes) per turn: a client
      // that pipelines requests as fast as it reads answers gets its share of the loop, not
      // all of it, while another waits for its one scrape.
      if (produced && !c.in.empty()) {
        if (!c.runnable) runnable.push_back(c.fd.get());
        c.runnable = true;
        break;
      }
      if (c.peer_eof) return false;  // everything it sent is answered
      if (!produced) break;
    }
    std::uint32_t want = 0;
    if (c.draining) {
      want = EPOLLIN | EPOLLRDHUP;
    } else {
      if (!c.peer_eof && c.pending() < limits.max_pending_output_bytes && c.in.size() < in_cap)
        want |= EPOLLIN | EPOLLRDHUP;
      if (c.pending() > 0 || c.ssl_want_write) want |= EPOLLOUT;
    }
    if (want != c.events) {
      if (!set_interest(c.fd.get(), want, EPOLL_CTL_MOD)) return false;
      c.events = want;
    }
    return true;
  }

  void on_event(int fd, std::uint32_t ev) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = *it->second;
    if (ev & EPOLLERR) return close_conn(fd);
    if (c.handshaking) {
      const int h = handshake(c);
      if (h < 0) return close_conn(fd);
      if (h == 0) return;
    }
    // A TLS read that had to write first (SSL_ERROR_WANT_WRITE) goes on when writable.
    const bool read = (ev & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) ||
                      (c.ssl_want_write && (ev & EPOLLOUT) && !c.draining);
    if (read && !read_some(c)) return close_conn(fd);
    if (!pump(c)) close_conn(fd);
  }

  /// Another turn for each connection that had requests left after its last one.
  void run_runnable() {
    std::vector<int> now_runnable;
    now_runnable.swap(runnable);
    for (int fd : now_runnable) {
      auto it = conns.find(fd);
      if (it == conns.end() || !it->second->runnable) continue;
      it->second->runnable = false;
      if (!pump(*it->second)) close_conn(fd);
    }
  }

  /// Closes the connections past their deadline; returns the next deadline.
  double expire() {
    double next = std::numeric_limits<double>::infinity();
    std::vector<int> late;
    for (const auto& [fd, c] : conns) {
      const double d = c->deadline(limits);
      if (d > now) {
        next = std::min(next, d);
        continue;
      }
      late.push_back(fd);
      if (c->draining) continue;
      if (c->pending() > 0) {
        stats.write_timeouts.fetch_add(1, std::memory_order_relaxed);
      } else if (c->request_open) {
        stats.header_timeouts.fetch_add(1, std::memory_order_relaxed);
      } else {
        stats.idle_timeouts.fetch_add(1, std::memory_order_relaxed);
      }
    }
    for (int fd : late) close_conn(fd);
    return next;
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::listen(const std::string& host, int port, Limits limits,
                                               Handler handler, const TlsFiles* tls) {
  auto impl = std::make_unique<Impl>();
  if (tls) {
    auto ctx = make_tls_context(*tls);
    if (!ctx) return ctx.error();
    impl->tls = std::move(*ctx);
  }
  // Connections past the descriptor limit would fail in accept: keep room for the rest of the
  // process (plugins, /proc reads).
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const auto room = rl.rlim_cur > 96 ? static_cast<std::size_t>(rl.rlim_cur - 64) : 32;
    limits.max_connections = std::min(limits.max_connections, room);
  }
  limits.max_connections_per_client =
      std::min(limits.max_connections_per_client, limits.max_connections);
  impl->limits = limits;
  impl->handler = std::move(handler);

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    return make_error(Errc::io, ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = found; ai; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR only (no SO_REUSEPORT): a second exporter on the same port is an error, not
    // a silent half of the scrapes.
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 ||
        ::listen(fd.get(), limits.listen_backlog) != 0) {
      err = errno;
      continue;
    }
    impl->listen_fd = std::move(fd);
    break;
  }
  if (impl->listen_fd.get() < 0) return make_error(Errc::io, std::strerror(err));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(impl->listen_fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0)
    return make_error(Errc::io, std::strerror(errno));
  impl->port = port_of(bound);
  impl->loopback = is_loopback(bound);

  impl->epoll_fd = Fd(::epoll_create1(EPOLL_CLOEXEC));
  impl->event_fd = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (impl->epoll_fd.get() < 0 || impl->event_fd.get() < 0 ||
      !impl->set_interest(impl->listen_fd.get(), EPOLLIN, EPOLL_CTL_ADD) ||
      !impl->set_interest(impl->event_fd.get(), EPOLLIN, EPOLL_CTL_ADD))
    return make_error(Errc::io, fmt::format("epoll: {}", std::strerror(errno)));
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

int Server::port() const {
  return impl_->port;
}
bool Server::loopback() const {
  return impl_->loopback;
}
bool Server::tls() const {
  return impl_->tls != nullptr;
}
const Limits& Server::limits() const {
  return impl_->limits;
}
const ServerStats& Server::stats() const {
  return impl_->stats;
}

void Server::stop() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->event_fd.get(), &one, sizeof one);
}

Result<void> Server::run() {
  Impl& s = *impl_;
  if (s.tls) {
    // OpenSSL writes with write(2), not send(MSG_NOSIGNAL): a peer gone mid-response must be
    // EPIPE on this thread, not SIGPIPE for the process.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
  }
  epoll_event events[64];
  for (;;) {
    s.now = now_s();
    double next = s.expire();
    if (s.accept_paused) {
      if (s.now >= s.accept_resume) {
        s.accept_paused = false;
        s.set_interest(s.listen_fd.get(), EPOLLIN, EPOLL_CTL_MOD);
      } else {
        next = std::min(next, s.accept_resume);
      }
    }
    int timeout_ms = -1;
    if (!s.runnable.empty()) {
      timeout_ms = 0;
    } else if (std::isfinite(next)) {
      timeout_ms = static_cast<int>(std::clamp(std::ceil((next - s.now) * 1000), 0.0, 60000.0));
    }
    const int n = ::epoll_wait(s.epoll_fd.get(), events, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error(Errc::io, fmt::format("epoll_wait: {}", std::strerror(errno)));
    }
    s.now = now_s();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == s.event_fd.get()) {
        s.conns.clear();
        s.per_client.clear();
        return {};
      }
      if (fd == s.listen_fd.get()) {
        s.accept_all();
      } else {
        s.on_event(fd, events[i].events);
      }
    }
    s.run_runnable();
    s.maybe_trim();
  }
}

}  // namespace sonde::http
