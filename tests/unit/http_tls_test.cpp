// The exporter's TLS read path against a real OpenSSL client (issue 21, finding 8): requests that
// arrive while the connection's input is full are read when there is room again, and a TLS 1.3
// KeyUpdate that arrives while the server's socket is full is answered with the rest.
// Neither test reaches the two defensive branches of src/http/server.cpp, checked by
// instrumenting them: SSL_pending() is 0 after every read (16 KiB reads take a whole record), and
// OpenSSL 3.0 answers a KeyUpdate with its next write, so SSL_read never returned
// SSL_ERROR_WANT_WRITE here. docs/security.md says so.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "http/request.hpp"
#include "http/server.hpp"

namespace sonde::http {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using CtxPtr = std::unique_ptr<SSL_CTX, Deleter<SSL_CTX, SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, Deleter<SSL, SSL_free>>;

/// A self-signed P-256 certificate and its key, written as PEM files (the key 0600) in a
/// private temporary directory that goes with the object.
class SelfSigned {
 public:
  SelfSigned() {
    char tmpl[] = "/tmp/sonde-tls-test-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    PkeyPtr key(EVP_EC_gen("P-256"));
    X509Ptr cert(X509_new());
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600);
    X509_set_pubkey(cert.get(), key.get());
    X509_NAME* name = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
    X509_set_issuer_name(cert.get(), name);
    X509_sign(cert.get(), key.get(), EVP_sha256());
    files_.cert_file = dir_ + "/cert.pem";
    files_.key_file = dir_ + "/key.pem";
    FILE* c = std::fopen(files_.cert_file.c_str(), "w");
    PEM_write_X509(c, cert.get());
    std::fclose(c);
    const int kfd = ::open(files_.key_file.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
    FILE* k = ::fdopen(kfd, "w");
    PEM_write_PrivateKey(k, key.get(), nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(k);
  }
  ~SelfSigned() {
    ::unlink(files_.cert_file.c_str());
    ::unlink(files_.key_file.c_str());
    ::rmdir(dir_.c_str());
  }
  const TlsFiles& files() const { return files_; }

 private:
  std::string dir_;
  TlsFiles files_;
};

/// A TLS server on an ephemeral loopback port whose handler answers `body_bytes` bytes.
class LiveTlsServer {
 public:
  LiveTlsServer(const TlsFiles& files, std::size_t body_bytes) {
    auto s = Server::listen(
        "127.0.0.1", 0, Limits{},
        [body_bytes](const Request&) {
          Response r;
          r.body.assign(body_bytes, 'x');
          return r;
        },
        &files);
    EXPECT_TRUE(s.ok()) << s.error().message;
    server_ = std::move(*s);
    thread_ = std::thread([this] { (void)server_->run(); });
  }
  ~LiveTlsServer() {
    server_->stop();
    thread_.join();
  }
  const Server& server() const { return *server_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

/// A blocking TLS 1.3 client connection; `rcvbuf` (bytes, 0: the default) keeps the server's
/// side of the socket small, so that its send buffer fills while this side does not read.
class Client {
 public:
  Client(int port, int rcvbuf) : ctx_(SSL_CTX_new(TLS_client_method())) {
    SSL_CTX_set_min_proto_version(ctx_.get(), TLS1_3_VERSION);
    SSL_CTX_set_verify(ctx_.get(), SSL_VERIFY_NONE, nullptr);
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ssl_.reset(SSL_new(ctx_.get()));
    SSL_set_fd(ssl_.get(), fd_);
    connected_ = connected_ && SSL_connect(ssl_.get()) == 1;
  }
  ~Client() {
    ssl_.reset();
    ::close(fd_);
  }
  bool connected() const { return connected_; }
  SSL* ssl() { return ssl_.get(); }

  bool write_all(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
      const int n = SSL_write(ssl_.get(), s.data() + off, static_cast<int>(s.size() - off));
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// Reads until `count` responses of `body_bytes` each have come in whole, or `timeout_s`
  /// passes without a byte; returns how many came.
  int read_responses(int count, std::size_t body_bytes, double timeout_s) {
    std::string got;
    int complete = 0;
    char buf[16384];
    while (complete < count) {
      if (SSL_pending(ssl_.get()) == 0) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) break;
      }
      const int n = SSL_read(ssl_.get(), buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
      for (;;) {
        const auto head_end = got.find("\r\n\r\n");
        if (head_end == std::string::npos || got.size() < head_end + 4 + body_bytes) break;
        EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got.substr(0, 64);
        got.erase(0, head_end + 4 + body_bytes);
        ++complete;
      }
    }
    return complete;
  }

 private:
  CtxPtr ctx_;
  SslPtr ssl_;
  int fd_ = -1;
  bool connected_ = false;
};

std::string requests(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  return s;
}

TEST(HttpTls, PipelinedRequestsBeyondTheInputCapAreAllAnswered) {
  // 2,000 requests in one write: 70 kB, twice what a connection holds unanswered
  // (max_head_bytes + max_body_bytes + one read), in TLS records of 16 kB. The server stops
  // reading at its cap and must go back to what the socket and OpenSSL still hold.
  SelfSigned certs;
  LiveTlsServer server(certs.files(), 10);
  Client client(server.server().port(), 0);
  ASSERT_TRUE(client.connected());
  constexpr int kRequests = 2000;
  ASSERT_TRUE(client.write_all(requests(kRequests)));
  EXPECT_EQ(client.read_responses(kRequests, 10, 5), kRequests);
}

TEST(HttpTls, AKeyUpdateWhileTheSocketIsFullIsAnsweredWithTheRest) {
  // The server's socket is full (128 kB answers, the client reads nothing and keeps a small
  // receive buffer) but its queued output is under the cap, so it still reads. The client then
  // asks for a KeyUpdate, which the server must answer (with new keys) on a socket that cannot
  // take it yet. Every request is answered, the one sent after the KeyUpdate included, and no
  // record fails.
  SelfSigned certs;
  constexpr std::size_t kBody = 128 << 10;
  LiveTlsServer server(certs.files(), kBody);
  Client client(server.server().port(), 4096);
  ASSERT_TRUE(client.connected());
  ASSERT_TRUE(client.write_all(requests(1)));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the socket fills
  ASSERT_EQ(SSL_key_update(client.ssl(), SSL_KEY_UPDATE_REQUESTED), 1);
  ASSERT_TRUE(client.write_all(requests(1)));  // sends the KeyUpdate, then the request
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(client.read_responses(2, kBody, 5), 2);
  EXPECT_EQ(server.server().stats().tls_failures.load(), 0u);
}

}  // namespace
}  // namespace sonde::http
