#include "http/client.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <httplib.h>

#include "core/clock.hpp"
#include "core/fs.hpp"
#include "core/threads.hpp"
#include "core/trust.hpp"

namespace sonde::http {

struct Client::Impl {
  std::unique_ptr<httplib::Client> cli;
};

std::string url_encode(const std::string& s) {
  std::string out;
  out.reserve(s.size() * 3 / 2);
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string form_encode(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    if (!out.empty()) out += '&';
    out += url_encode(k);
    out += '=';
    out += url_encode(v);
  }
  return out;
}

Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::create(const std::string& base_url,
                                               const ClientOptions& options) {
  const auto scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos)
    return make_error(Errc::config, fmt::format("--prometheus {}: expected a URL "
                                                "http[s]://HOST[:PORT][/PATH]",
                                                base_url));
  const std::string scheme = base_url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https")
    return make_error(Errc::config, fmt::format("--prometheus {}: the scheme must be http or "
                                                "https, not `{}`",
                                                base_url, scheme));
  const auto path_start = base_url.find('/', scheme_end + 3);
  const std::string host_port = base_url.substr(scheme_end + 3, path_start == std::string::npos
                                                                    ? std::string::npos
                                                                    : path_start - scheme_end - 3);
  if (host_port.empty() || host_port.find_first_of("?#@ ") != std::string::npos)
    return make_error(Errc::config, fmt::format("--prometheus {}: expected a host after `{}://` "
                                                "(no user, query or fragment in the URL)",
                                                base_url, scheme));
  std::string prefix = path_start == std::string::npos ? "" : base_url.substr(path_start);
  if (prefix.find_first_of("?# ") != std::string::npos)
    return make_error(Errc::config,
                      fmt::format("--prometheus {}: no query or fragment in the URL", base_url));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  if (!options.token.empty() && !options.user.empty())
    return make_error(Errc::config, "--prometheus-user and a bearer token exclude each other");
  if (!options.ca_file.empty() && scheme != "https")
    return make_error(Errc::config,
                      fmt::format("--prometheus-ca: only with an https URL, not {}", base_url));
  if (!(options.timeout_s > 0))
    return make_error(Errc::config, "--prometheus-timeout: expected a positive number of seconds");
  if (!(options.command_timeout_s > 0))
    return make_error(Errc::config,
                      "--prometheus-command-timeout: expected a positive number of seconds");
  if (options.max_body_bytes == 0)
    return make_error(Errc::config, "--prometheus-max-mib: expected a positive size");

  std::unique_ptr<Client> c(new Client());
  c->base_ = scheme + "://" + host_port;
  c->prefix_ = prefix;
  c->timeout_s_ = options.timeout_s;
  c->command_timeout_s_ = options.command_timeout_s;
  c->command_deadline_ = monotonic_now() + options.command_timeout_s;
  c->max_body_ = options.max_body_bytes;
  c->impl_ = std::make_unique<Impl>();
  c->impl_->cli = std::make_unique<httplib::Client>(c->base_);
  if (!c->impl_->cli->is_valid())
    return make_error(Errc::config, fmt::format("--prometheus {}: not a valid URL", base_url));
  auto& cli = *c->impl_->cli;
  const auto sec = static_cast<time_t>(options.timeout_s);
  const auto usec = static_cast<time_t>((options.timeout_s - static_cast<double>(sec)) * 1e6);
  cli.set_connection_timeout(sec, usec);
  cli.set_read_timeout(sec, usec);
  cli.set_write_timeout(sec, usec);
  cli.set_keep_alive(true);
  cli.set_tcp_nodelay(true);  // the body is a second write: no Nagle delay before it
  cli.set_follow_location(false);
  if (!options.user.empty()) cli.set_basic_auth(options.user, options.password);
  if (!options.token.empty()) cli.set_bearer_token_auth(options.token);
  if (scheme == "https") {
    if (!options.ca_file.empty()) {
      std::error_code ec;
      if (::access(options.ca_file.c_str(), R_OK) != 0)
        return make_error(Errc::config, fmt::format("--prometheus-ca {}: cannot read: {}",
                                                    options.ca_file, std::strerror(errno)));
      cli.set_ca_cert_path(options.ca_file);
    }
    cli.enable_server_certificate_verification(true);
  }
  return c;
}

namespace {

/// Stops `cli`'s request in flight (shutting its socket down, cpp-httplib's thread-safe stop())
/// once `deadline` passes, unless disarmed first: a request's deadline covers its whole life,
/// where cpp-httplib's own timeouts are per read and a server that drips a byte a second would
/// hold the command forever.
class Deadline {
 public:
  Deadline(httplib::Client& cli, double deadline) {
    thread_ = start_thread([this, &cli, deadline] {
      std::unique_lock lock(m_);
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(std::max(0.0, deadline - monotonic_now()));
      if (!cv_.wait_until(lock, until, [&] { return done_; })) {
        fired_ = true;
        cli.stop();
      }
    });
  }
  ~Deadline() {
    {
      std::lock_guard lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  bool fired() {
    std::lock_guard lock(m_);
    return fired_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false, fired_ = false;
  std::thread thread_;
};

}  // namespace

Result<ClientResponse> Client::post_form(
    const std::string& path, const std::vector<std::pair<std::string, std::string>>& fields) {
  const double now = monotonic_now();
  if (now >= command_deadline_)
    return make_error(Errc::io, fmt::format("{}: not sent: the command's requests took {} s "
                                            "(--prometheus-command-timeout)",
                                            url(path), command_timeout_s_));
  const bool command_bound = command_deadline_ < now + timeout_s_;
  const double deadline = std::min(now + timeout_s_, command_deadline_);
  ++requests_;
  httplib::Request req;
  req.method = "POST";
  req.path = prefix_ + path;
  // gzip: a range query's JSON shrinks about tenfold on the wire (cpp-httplib inflates it, and
  // the receiver below counts what it inflated).
  req.headers = {{"Accept", "application/json"}, {"Accept-Encoding", "gzip"}};
  req.body = form_encode(fields);
  req.set_header("Content-Type", "application/x-www-form-urlencoded");
  std::string body;
  bool too_big = false;
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t,
                             std::uint64_t) -> bool {
    if (body.size() + len > max_body_) {
      too_big = true;
      return false;
    }
    body.append(data, len);
    return true;
  };
  httplib::Result res{nullptr, httplib::Error::Unknown};
  bool late = false;
  {
    Deadline guard(*impl_->cli, deadline);
    res = impl_->cli->send(req);
    late = guard.fired();
  }
  if (too_big)
    return make_error(Errc::io, fmt::format("{}: the answer is larger than {} MiB after "
                                            "decompression (--prometheus-max-mib); nothing of it "
                                            "was used",
                                            url(path), static_cast<double>(max_body_) / 1048576));
  if (late)
    return make_error(
        Errc::io,
        command_bound
            ? fmt::format("{}: the command's requests took {} s (--prometheus-command-timeout)",
                          url(path), command_timeout_s_)
            : fmt::format("{}: no complete answer within {} s (--prometheus-timeout)", url(path),
                          timeout_s_));
  if (!res) {
    std::string why;
    switch (res.error()) {
      case httplib::Error::Connection: why = "cannot connect"; break;
      case httplib::Error::ConnectionTimeout:
        why = fmt::format("no connection within {} s (--prometheus-timeout)", timeout_s_);
        break;
      case httplib::Error::Read:
        why = fmt::format(
            "no complete answer (the connection was closed, or nothing came for "
            "{} s: --prometheus-timeout)",
            timeout_s_);
        break;
      case httplib::Error::Write: why = "the request could not be sent"; break;
      case httplib::Error::SSLConnection: why = "TLS handshake failed"; break;
      case httplib::Error::SSLServerVerification:
        why = "the server's certificate is not signed by a trusted CA (--prometheus-ca FILE)";
        break;
      default: why = httplib::to_string(res.error()); break;
    }
    return make_error(Errc::io, fmt::format("{}: {}", url(path), why));
  }
  ClientResponse r;
  r.status = res->status;
  r.body = std::move(body);
  r.content_type = res->get_header_value("Content-Type");
  bytes_ += r.body.size();
  return r;
}

Result<std::string> read_secret_file(const std::string& file, const std::string& what) {
  // The one rule for secrets (open_private, docs/security.md): opened once, checked on the
  // descriptor (owner, every directory above it, not readable by others) and read from it.
  auto fd = open_private(file, what);
  if (!fd) return make_error(Errc::config, fd.error().message);
  auto text = read_trusted(*fd, file, kMaxSecretBytes);
  if (!text) return make_error(Errc::config, fmt::format("{}: {}", what, text.error().message));
  std::string s = std::move(*text);
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  if (!s.empty() && s.back() == '\r') s.pop_back();
  if (s.empty()) return make_error(Errc::config, fmt::format("{} {}: empty", what, file));
  return s;
}

}  // namespace sonde::http
