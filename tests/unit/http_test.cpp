#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>

#include "core/base64.hpp"
#include "http/basic_auth.hpp"
#include "http/request.hpp"
#include "http/server.hpp"

namespace sonde::http {
namespace {

using State = Parsed::State;

TEST(HttpParse, CompleteRequestWithHeaders) {
  const std::string req =
      "GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept:  text/plain \r\nConnection: Close\r\n\r\n";
  Parsed p = parse_request(req, Limits{});
  ASSERT_EQ(p.state, State::complete) << p.error_text;
  EXPECT_EQ(p.consumed, req.size());
  EXPECT_EQ(p.request.method, "GET");
  EXPECT_EQ(p.request.target, "/metrics?x=1");
  EXPECT_EQ(p.request.path, "/metrics");
  EXPECT_EQ(p.request.header("accept"), "text/plain");
  EXPECT_FALSE(p.request.keep_alive);
}

TEST(HttpParse, KeepAliveDefaultsPerVersion) {
  EXPECT_TRUE(parse_request("GET / HTTP/1.1\r\n\r\n", Limits{}).request.keep_alive);
  EXPECT_FALSE(parse_request("GET / HTTP/1.0\r\n\r\n", Limits{}).request.keep_alive);
  EXPECT_TRUE(parse_request("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", Limits{})
                  .request.keep_alive);
}

TEST(HttpParse, PipelinedRequestsParseOneAfterAnother) {
  const std::string buf = "GET /a HTTP/1.1\r\n\r\nHEAD /b HTTP/1.1\r\n\r\nGET /c HTTP/1.1\r\n";
  Parsed a = parse_request(buf, Limits{});
  ASSERT_EQ(a.state, State::complete);
  EXPECT_EQ(a.request.path, "/a");
  Parsed b = parse_request(std::string_view(buf).substr(a.consumed), Limits{});
  ASSERT_EQ(b.state, State::complete);
  EXPECT_EQ(b.request.method, "HEAD");
  Parsed c = parse_request(std::string_view(buf).substr(a.consumed + b.consumed), Limits{});
  EXPECT_EQ(c.state, State::incomplete);
}

TEST(HttpParse, SmallBodyIsConsumedLargeOrChunkedRefused) {
  Parsed p = parse_request("GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET", Limits{});
  ASSERT_EQ(p.state, State::complete);
  EXPECT_EQ(p.consumed, 40u);  // 37 of head, 3 of body
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", Limits{}).state,
            State::incomplete);
  EXPECT_EQ(
      parse_request("POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n", Limits{}).error_status,
      413);
  EXPECT_EQ(
      parse_request("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", Limits{}).error_status,
      413);
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", Limits{}).error_status,
            400);
}

TEST(HttpParse, MalformedRequestsAre400) {
  for (const char* bad :
       {"BREW /metrics HTTP/1.1\r\n\r\n", "GET /metrics HTTP/9.9\r\n\r\n", "GET /metrics\r\n\r\n",
        "\x01\x02 garbage\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nNoColon\r\n\r\n", "GET / HTTP/1.1\r\nBad Name: x\r\n\r\n"}) {
    Parsed p = parse_request(bad, Limits{});
    EXPECT_EQ(p.state, State::error) << bad;
    EXPECT_EQ(p.error_status, 400) << bad;
  }
  // Known methods parse (the router answers 405).
  EXPECT_EQ(parse_request("DELETE / HTTP/1.1\r\n\r\n", Limits{}).state, State::complete);
}

TEST(HttpParse, LimitsAreErrorsBeforeTheLineEnds) {
  Limits l;
  EXPECT_EQ(parse_request("GET /" + std::string(l.max_request_line_bytes, 'a'), l).error_status,
            414);
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nX: " + std::string(l.max_header_line_bytes, 'b'), l)
                .error_status,
            400);
  std::string many = "GET / HTTP/1.1\r\n";
  while (many.size() <= l.max_head_bytes) many += "X-A: 0123456789012345678901234567890\r\n";
  EXPECT_EQ(parse_request(many, l).error_status, 431);
  // Under every limit and not finished: wait for more.
  EXPECT_EQ(parse_request("GET / HTTP/1.1\r\nHost: a", l).state, State::incomplete);
}

// Requests arrive in pieces: parsing a prefix must never decide differently from parsing the
// whole (a prefix that is complete or an error stays so), whatever the bytes.
TEST(HttpParse, PrefixesAgreeWithTheWholeOnRandomInput) {
  const std::vector<std::string> pieces = {"GET ",
                                           "HEAD ",
                                           "POST ",
                                           "BREW ",
                                           "/metrics",
                                           "/",
                                           "?a=b",
                                           " HTTP/1.1",
                                           " HTTP/1.0",
                                           " HTTP/2",
                                           "\r\n",
                                           "\n",
                                           "Host: x",
                                           "Content-Length: 3",
                                           "Content-Length: 99999",
                                           "Transfer-Encoding: chunked",
                                           "Connection: close",
                                           ": ",
                                           " ",
                                           "abc",
                                           "\x00",
                                           "\xff",
                                           std::string(3000, 'a'),
                                           "\r\n\r\n"};
  Limits l;
  l.max_request_line_bytes = 4096;
  l.max_header_line_bytes = 4096;
  l.max_head_bytes = 8192;
  std::mt19937 rng(12);
  for (int round = 0; round < 2000; ++round) {
    std::string buf;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int i = 0; i < n; ++i)
      buf += pieces[std::uniform_int_distribution<std::size_t>(0, pieces.size() - 1)(rng)];
    const Parsed whole = parse_request(buf, l);
    if (whole.state == State::complete) {
      ASSERT_LE(whole.consumed, buf.size());
    }
    if (whole.state == State::error) {
      ASSERT_GE(whole.error_status, 400);
      ASSERT_LT(whole.error_status, 500);
    }
    for (std::size_t cut = 0; cut < buf.size(); cut += 7) {
      const Parsed part = parse_request(std::string_view(buf).substr(0, cut), l);
      if (part.state == State::complete) {
        ASSERT_EQ(whole.state, State::complete) << buf;
        ASSERT_EQ(whole.consumed, part.consumed) << buf;
      } else if (part.state == State::error) {
        ASSERT_EQ(whole.state, State::error) << buf;
      }
    }
  }
}

// A head that arrives a byte at a time (a slow client) is scanned once in all, not once per
// read (issue 21: the whole buffer was parsed again on every read, quadratic in the head's size),
// and the outcome is the same as a parse of the whole.
TEST(HttpParse, IncrementalScanLooksAtEachByteOnce) {
  Limits l;
  std::string head = "\r\nGET /metrics?x=1 HTTP/1.1\r\n";
  // Long lines: near the head's byte limit, well under its limit of header lines.
  while (head.size() < l.max_head_bytes - 300) head += "X-Slow: " + std::string(250, 'a') + "\r\n";
  head += "Content-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n";
  const Parsed whole = parse_request(head, l);
  ASSERT_EQ(whole.state, State::complete);
  RequestScan scan;
  Parsed last;
  std::size_t calls = 0;
  for (std::size_t n = 1; n <= head.size(); ++n) {
    ++calls;
    last = parse_request(std::string_view(head).substr(0, n), l, scan);
    if (last.state != State::incomplete) break;
  }
  ASSERT_EQ(last.state, State::complete);
  EXPECT_EQ(last.consumed, whole.consumed);
  EXPECT_EQ(last.request.target, "/metrics?x=1");
  EXPECT_EQ(last.request.headers.size(), whole.request.headers.size());
  EXPECT_LE(scan.examined, whole.consumed + calls) << "bytes looked at for " << calls << " reads";
  // The scan starts afresh for the next request in the same buffer.
  const std::string_view rest = std::string_view(head).substr(last.consumed);
  const Parsed next = parse_request(rest, l, scan);
  ASSERT_EQ(next.state, State::complete);
  EXPECT_EQ(next.request.path, "/");
  // An error at the end of a slowly sent line, the same as for the whole.
  std::string longline = "GET / HTTP/1.1\r\nX: " + std::string(l.max_header_line_bytes + 10, 'b');
  scan = {};
  Parsed err;
  for (std::size_t n = 1; n <= longline.size(); ++n) {
    err = parse_request(std::string_view(longline).substr(0, n), l, scan);
    if (err.state != State::incomplete) break;
  }
  EXPECT_EQ(err.state, State::error);
  EXPECT_EQ(err.error_status, parse_request(longline, l).error_status);
}

TEST(HttpSerialize, HeadKeepsLengthAndDropsBody) {
  Response r;
  r.body = "hello";
  std::string out;
  serialize(r, true, true, 1, out);
  EXPECT_EQ(out,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "
            "5\r\n\r\n");
  out.clear();
  serialize(r, false, false, 1, out);
  EXPECT_NE(out.find("Connection: close\r\n\r\nhello"), std::string::npos);
}

// A real server on an ephemeral loopback port, its loop on a thread.
class LiveServer {
 public:
  explicit LiveServer(Limits limits) {
    auto s = Server::listen("127.0.0.1", 0, limits, [](const Request& req) {
      Response r;
      r.body = req.path;
      return r;
    });
    EXPECT_TRUE(s.ok()) << s.error().message;
    server_ = std::move(*s);
    thread_ = std::thread([this] { (void)server_->run(); });
  }
  ~LiveServer() {
    server_->stop();
    thread_.join();
  }
  /// A connection from `source` (any address of 127/8 is this host).
  int connect(const char* source = "127.0.0.1") const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in from{};
    from.sin_family = AF_INET;
    ::inet_pton(AF_INET, source, &from.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(server_->port()));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    return fd;
  }
  const Server& server() const { return *server_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

/// Everything the peer sends until it closes or `timeout_ms` passes without data.
std::string read_until_close(int fd, int timeout_ms = 5000) {
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return got + "<timeout>";
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<std::size_t>(n));
  }
}

TEST(HttpServer, PipelinedRequestsAreAnsweredInOrder) {
  LiveServer s{Limits{}};
  const int fd = s.connect();
  const std::string three =
      "GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\nGET /three HTTP/1.1\r\nConnection: "
      "close\r\n\r\n";
  ASSERT_EQ(::send(fd, three.data(), three.size(), 0), static_cast<ssize_t>(three.size()));
  const std::string got = read_until_close(fd);
  ::close(fd);
  const auto one = got.find("\r\n\r\n/one");
  const auto two = got.find("\r\n\r\n/two");
  const auto tri = got.find("\r\n\r\n/three");
  ASSERT_NE(one, std::string::npos) << got;
  ASSERT_NE(two, std::string::npos) << got;
  ASSERT_NE(tri, std::string::npos) << got;
  EXPECT_LT(one, two);
  EXPECT_LT(two, tri);
}

TEST(HttpServer, SlowHeaderIsClosedAtTheDeadlineNotPerByte) {
  Limits l;
  l.header_timeout_s = 0.3;
  LiveServer s{l};
  const int fd = s.connect();
  // Bytes keep coming, each well within any per-read timeout; the head never completes.
  std::string got;
  bool closed = false;
  for (int i = 0; i < 40 && !closed; ++i) {
    if (::send(fd, "G", 1, MSG_NOSIGNAL) != 1) {
      closed = true;
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      got = read_until_close(fd, 1000);
      closed = true;
    }
  }
  ::close(fd);
  EXPECT_TRUE(closed);  // before 40 × 50 ms of steady trickle
  EXPECT_EQ(got, "");   // without an answer
  EXPECT_EQ(s.server().stats().header_timeouts.load(), 1u);
}

TEST(HttpServer, ConnectionsOverThePerClientCapAreRefused) {
  Limits l;
  l.max_connections_per_client = 2;
  LiveServer s{l};
  const int a = s.connect(), b = s.connect(), c = s.connect();
  const std::string refused = read_until_close(c);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  const std::string req = "GET /still HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(a, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  EXPECT_NE(read_until_close(a).find("\r\n\r\n/still"), std::string::npos);
  for (int fd : {a, b, c}) ::close(fd);
  EXPECT_EQ(s.server().stats().refused_per_client.load(), 1u);
}

TEST(HttpServer, IdleKeptAliveConnectionIsClosed) {
  Limits l;
  l.idle_timeout_s = 0.2;
  LiveServer s{l};
  const int fd = s.connect();
  const std::string req = "GET /x HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  const std::string got = read_until_close(fd);
  ::close(fd);
  EXPECT_NE(got.find("\r\n\r\n/x"), std::string::npos) << got;  // answered, then closed
  EXPECT_EQ(got.find("<timeout>"), std::string::npos);
  EXPECT_EQ(s.server().stats().idle_timeouts.load(), 1u);
}

}  // namespace
}  // namespace sonde::http

namespace sonde::http {
namespace {

TEST(HttpServer, AtTheConnectionCapTheOldestSlowOneMakesRoom) {
  Limits l;
  l.max_connections = 2;
  LiveServer s{l};
  const int old1 = s.connect();
  ::send(old1, "G", 1, 0);  // a slow head, started first
  // Let the loop accept it before the next one, so the order is known.
  for (int i = 0; i < 200 && s.server().stats().open.load() < 1; ++i) ::usleep(5000);
  const int old2 = s.connect("127.0.0.2");
  for (int i = 0; i < 200 && s.server().stats().open.load() < 2; ++i) ::usleep(5000);
  const int fresh = s.connect("127.0.0.3");  // each address under its own cap
  const std::string req = "GET /new HTTP/1.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fresh, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  EXPECT_NE(read_until_close(fresh).find("\r\n\r\n/new"), std::string::npos);
  EXPECT_EQ(read_until_close(old1), "");  // closed to make room
  EXPECT_EQ(s.server().stats().evicted.load(), 1u);
  for (int fd : {old1, old2, fresh}) ::close(fd);
}

TEST(HttpBasicAuth, Base64) {
  std::string out;
  EXPECT_TRUE(base64_decode("YWxpY2U6c2VjcmV0", out));
  EXPECT_EQ(out, "alice:secret");
  EXPECT_TRUE(base64_decode("Ym9iOnNlY3JldA==", out));
  EXPECT_EQ(out, "bob:secret");
  EXPECT_FALSE(base64_decode("Ym9iOnNlY3JldA=", out));  // length
  EXPECT_FALSE(base64_decode("Ym9i*nNl", out));         // alphabet
  EXPECT_FALSE(base64_decode("Ym=iOnNl", out));         // padding inside
}

TEST(HttpBasicAuth, AllowsOnlyTheRightUserAndPassword) {
  const std::string secret = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";
  auto auth = BasicAuth::parse("# users\n\nalice:" + secret + "\n", "users.txt");
  ASSERT_TRUE(auth) << auth.error().message;
  EXPECT_EQ(auth->users(), 1u);
  EXPECT_TRUE(auth->allows("Basic YWxpY2U6c2VjcmV0"));
  EXPECT_TRUE(auth->allows("basic YWxpY2U6c2VjcmV0"));
  EXPECT_FALSE(auth->allows("Basic YWxpY2U6d3Jvbmc="));  // alice:wrong
  EXPECT_FALSE(auth->allows("Basic Ym9iOnNlY3JldA=="));  // bob:secret
  EXPECT_FALSE(auth->allows("Bearer YWxpY2U6c2VjcmV0"));
  EXPECT_FALSE(auth->allows(""));
}

TEST(HttpBasicAuth, BadFilesNameTheLine) {
  auto a = BasicAuth::parse("alice:xyz\n", "users.txt");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().message.find("users.txt:1: expected a crypt(3) hash"), std::string::npos)
      << a.error().message;
  auto b = BasicAuth::parse("# nobody\n", "users.txt");
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("at least one"), std::string::npos);
  auto c = BasicAuth::parse("alice\n", "users.txt");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("users.txt:1: expected 'USER:HASH'"), std::string::npos)
      << c.error().message;
  // A bcrypt hash cut short passes crypt_checksalt (it looks at the prefix) but is refused.
  auto d = BasicAuth::parse("alice:$2y$10$DspCtxjkmkAaWb7Pk2LBCeD.RlJSeoIVV0G\n", "users.txt");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("users.txt:1: expected a complete crypt(3) hash"),
            std::string::npos)
      << d.error().message;
  auto e = BasicAuth::parse("alice:$9$nonsense\n", "users.txt");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("users.txt:1:"), std::string::npos) << e.error().message;
}

// Issue 21, finding 4: bcrypt (as htpasswd -B and Prometheus' exporter-toolkit write it) and the
// other crypt(3) hashes; an unsalted SHA-256 still works but is warned about.
TEST(HttpBasicAuth, BcryptAndOtherCryptHashes) {
  // "secret" hashed by libxcrypt: bcrypt at cost 10 ($2b$ and $2y$ spellings) and SHA-512-crypt.
  const std::string bcrypt = "$2b$10$DspCtxjkmkAaWb7Pk2LBCeD.RlJSeoIVV0Gjfp28zq24hBre05Wu2";
  const std::string bcrypt_y = "$2y$10$DspCtxjkmkAaWb7Pk2LBCeD.RlJSeoIVV0Gjfp28zq24hBre05Wu2";
  const std::string sha512crypt =
      "$6$X1DLupRSjbvXYgMX$WgwxI78UctYf/W3.tKFDrWhl9wIHyOOW58OP6wLz8uyTHwDxus7wjisKeve7EfwLXfreuc7"
      "h.A0U8xV.l6PwC0";
  for (const std::string& h : {bcrypt, bcrypt_y, sha512crypt}) {
    auto auth = BasicAuth::parse("alice:" + h + "\n", "users.txt");
    ASSERT_TRUE(auth) << h << ": " << auth.error().message;
    EXPECT_TRUE(auth->warnings().empty()) << h;
    EXPECT_TRUE(auth->allows("Basic YWxpY2U6c2VjcmV0")) << h;   // alice:secret
    EXPECT_TRUE(auth->allows("Basic YWxpY2U6c2VjcmV0")) << h;   // again, from the cache
    EXPECT_FALSE(auth->allows("Basic YWxpY2U6d3Jvbmc=")) << h;  // alice:wrong
    EXPECT_FALSE(auth->allows("Basic Ym9iOnNlY3JldA==")) << h;  // bob:secret
  }
  // OpenBSD's bcrypt test vector, at cost 5: accepted, with a warning that it is cheap.
  auto cheap = BasicAuth::parse("u:$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW\n",
                                "users.txt");
  ASSERT_TRUE(cheap) << cheap.error().message;
  EXPECT_TRUE(cheap->allows("Basic dTpVKlU="));  // u:U*U
  ASSERT_EQ(cheap->warnings().size(), 1u);
  EXPECT_NE(cheap->warnings()[0].find("users.txt:1"), std::string::npos) << cheap->warnings()[0];
  // An unsalted SHA-256 line: still accepted, and named in a warning.
  auto old = BasicAuth::parse(
      "alice:" + bcrypt +
          "\nbob:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b\n",
      "users.txt");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_TRUE(old->allows("Basic Ym9iOnNlY3JldA=="));  // bob:secret
  ASSERT_EQ(old->warnings().size(), 1u);
  EXPECT_NE(old->warnings()[0].find("users.txt: line 2 holds an unsalted SHA-256"),
            std::string::npos)
      << old->warnings()[0];
  // A password with a NUL byte never matches a crypt hash (crypt_r would stop at the NUL).
  auto nul = BasicAuth::parse("alice:" + bcrypt + "\n", "users.txt");
  ASSERT_TRUE(nul);
  EXPECT_FALSE(nul->allows("Basic YWxpY2U6c2VjcmV0AHg="));  // alice:secret\0x
}

}  // namespace
}  // namespace sonde::http
