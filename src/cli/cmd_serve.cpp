// sonde serve: samples the node on its own interval (main thread, absolute schedule, signalfd)
// and serves the last tick at /metrics over HTTP (cpp-httplib, a bounded pool of worker threads).
// Each tick renders both exposition formats once; a scrape only copies a shared pointer.
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "core/gzip.hpp"
#include "sinks/prometheus.hpp"
#include "sinks/prometheus_owners.hpp"

namespace sonde::cli {
namespace {

/// The two renderings of one tick.
struct Page {
  std::string prometheus;
  std::string openmetrics;  ///< without "# EOF"
};

/// A fixed number of workers and a bounded queue: when every worker is busy and the queue is
/// full, the accepting thread waits (new connections then wait in the kernel's backlog).
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(std::size_t threads, std::size_t max_queued) : max_queued_(max_queued) {
    for (std::size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return jobs_.size() < max_queued_ || shutdown_; });
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      shutdown_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (auto& t : workers_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;  // shut down and drained
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        room_.notify_one();
      }
      fn();
    }
  }
  std::size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> workers_;
  bool shutdown_ = false;
};

constexpr std::size_t kMaxBodyBytes = 4096;

bool accepts_gzip(const std::string& accept_encoding) {
  return accept_encoding.find("gzip") != std::string::npos;
}

constexpr const char* kIndexPage =
    "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>sonde exporter</title></head>\n"
    "<body><h1>sonde exporter</h1>\n<p><a href=\"/metrics\">Metrics</a></p>\n</body></html>\n";

/// "host:port", "[v6]:port" or ":port" (loopback).
Result<std::pair<std::string, int>> parse_listen(const std::string& text) {
  const auto fail = [&] {
    return make_error(Errc::config, fmt::format("--listen: expected HOST:PORT (e.g. "
                                                "127.0.0.1:9850, [::1]:9850, 0.0.0.0:9850), got "
                                                "'{}'",
                                                text));
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos) return fail();
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "127.0.0.1";
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535) return fail();
  return std::make_pair(host, port);
}

}  // namespace

int cmd_serve(const CommonOptions& common, const ServeOptions& so) {
  auto listen = parse_listen(so.listen);
  if (!listen) {
    print_error(listen.error().message);
    return kExitUsage;
  }
  if (so.max_series < 1) {
    print_error(fmt::format("--max-series: expected a number >= 1, got {}", so.max_series));
    return kExitUsage;
  }
  auto cfg = load(common);
  if (!cfg) return kExitUsage;

  // The node only: the engine's other levels are relative to one target process.
  EngineOptions eo;
  eo.roots = roots_from_env();
  eo.target.uid = ::getuid();
  eo.levels = {Level::system};
  const Registry registry = make_registry();
  auto engine_r = Engine::create(*cfg, eo, registry);
  if (!engine_r) {
    print_error(engine_r.error().message);
    return engine_r.error().code == Errc::config ? kExitUsage : kExitFailure;
  }
  Engine& engine = **engine_r;

  // Signals are blocked before any thread starts, so every thread inherits the mask and only the
  // signalfd sees them.
  sigset_t handled, original;
  sigemptyset(&handled);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&handled, s);
  ::pthread_sigmask(SIG_BLOCK, &handled, &original);
  ::signal(SIGPIPE, SIG_IGN);
  const int sig_fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);

  prom::Exporter exporter(engine, {.per_user = so.per_user, .per_job = so.per_job});
  std::unique_ptr<prom::OwnerScanner> owners;
  if (so.per_user || so.per_job)
    owners = std::make_unique<prom::OwnerScanner>(eo.roots, so.per_user, so.per_job,
                                                  static_cast<std::size_t>(so.max_series));

  std::mutex page_mutex;
  std::shared_ptr<const Page> page;
  std::atomic<std::uint64_t> scrapes{0};

  auto sample = [&] {
    const double t0 = monotonic_now();
    const auto& tick = engine.tick();
    const prom::OwnerUsage* usage = owners ? &owners->scan() : nullptr;
    exporter.update(engine, tick, monotonic_now() - t0, usage);
    auto next = std::make_shared<Page>();
    prom::render(exporter.families(), prom::Format::prometheus, next->prometheus);
    prom::render(exporter.families(), prom::Format::openmetrics, next->openmetrics);
    std::lock_guard lock(page_mutex);
    page = std::move(next);
  };
  sample();

  httplib::Server server;
  const std::size_t threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 2, 4);
  server.new_task_queue = [threads] { return new BoundedPool(threads, 64); };
  server.set_payload_max_length(kMaxBodyBytes);
  // httplib's default also sets SO_REUSEPORT, which would let a second exporter share the port
  // (and half the scrapes) silently: SO_REUSEADDR only, so a port in use is an error.
  server.set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  server.set_tcp_nodelay(true);  // headers and body are two writes: no Nagle delay between them
  server.set_read_timeout(5, 0);
  server.set_write_timeout(5, 0);
  server.set_keep_alive_timeout(5);
  server.set_keep_alive_max_count(100);

  // Nothing sonde serves takes a body: a request announcing one larger than the payload limit is
  // refused before routing (httplib reads bodies only for methods that expect one), and the
  // connection is closed so that the unread body is not taken for the next request.
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    const std::string length = req.get_header_value("Content-Length");
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
    const bool small =
        length.empty() ||
        (ec == std::errc() && end == length.data() + length.size() && n <= kMaxBodyBytes);
    if (small && !req.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    res.status = 413;
    res.set_header("Connection", "close");
    res.set_content("413 request body too large\n", "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/metrics", [&](const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<const Page> p;
    {
      std::lock_guard lock(page_mutex);
      p = page;
    }
    const std::uint64_t n = scrapes.fetch_add(1, std::memory_order_relaxed) + 1;
    const prom::Format f = prom::negotiate(req.get_header_value("Accept"));
    std::string body;
    const std::string& cached = f == prom::Format::openmetrics ? p->openmetrics : p->prometheus;
    body.reserve(cached.size() + 160);
    body = cached;
    const bool om = f == prom::Format::openmetrics;
    fmt::format_to(std::back_inserter(body),
                   "# HELP {0} Scrapes of /metrics answered since sonde started.\n"
                   "# TYPE {0} counter\nsonde_scrapes_total {1}\n",
                   om ? "sonde_scrapes" : "sonde_scrapes_total", n);
    if (om) {
      body += prom::kOpenMetricsEof;
      if (accepts_gzip(req.get_header_value("Accept-Encoding"))) {
        // httplib compresses text/* bodies itself, but not the OpenMetrics content type, which
        // Prometheus asks for with Accept-Encoding: gzip.
        std::string zipped = gzip(body, Z_DEFAULT_COMPRESSION);
        if (!zipped.empty()) {
          res.set_header("Content-Encoding", "gzip");
          body = std::move(zipped);
        }
      }
    }
    res.set_content(std::move(body),
                    om ? prom::kOpenMetricsContentType : prom::kPrometheusContentType);
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(kIndexPage, "text/html; charset=utf-8");
  });
  // Only GET (and HEAD, which httplib answers from the GET handlers) are served.
  const auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("405 method not allowed\n", "text/plain; charset=utf-8");
  };
  server.Post(".*", not_allowed);
  server.Put(".*", not_allowed);
  server.Patch(".*", not_allowed);
  server.Delete(".*", not_allowed);
  server.Options(".*", not_allowed);
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty())
      res.set_content(fmt::format("{}\n", res.status), "text/plain; charset=utf-8");
  });

  const auto& [host, port_wanted] = *listen;
  int port = port_wanted;
  if (port_wanted == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port_wanted)) {
    port = -1;
  }
  if (port <= 0) {
    print_error(fmt::format("--listen {}: cannot listen on {} port {}: {}", so.listen, host,
                            port_wanted, std::strerror(errno)));
    if (sig_fd >= 0) ::close(sig_fd);
    ::pthread_sigmask(SIG_SETMASK, &original, nullptr);
    return kExitFailure;
  }
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::cerr << fmt::format("sonde: serving http://{}:{}/metrics (interval {} s)\n", shown, port,
                           engine.interval_s())
            << std::flush;
  std::thread http([&] { server.listen_after_bind(); });

  // Sampling on an absolute schedule until SIGINT/SIGTERM/SIGHUP.
  const double interval = engine.interval_s();
  const double t0 = monotonic_now();
  std::uint64_t k = 0;
  bool stop = false;
  while (!stop) {
    ++k;
    double next = t0 + static_cast<double>(k) * interval;
    const double now = monotonic_now();
    if (now >= next) {  // slots missed while sampling are skipped
      k = static_cast<std::uint64_t>(std::floor((now - t0) / interval)) + 1;
      next = t0 + static_cast<double>(k) * interval;
    }
    while (!stop) {
      pollfd fd{sig_fd, POLLIN, 0};
      const timespec ts = to_timespec(next - monotonic_now());
      const int r = ::ppoll(&fd, 1, &ts, nullptr);
      if (r == 0) break;
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        stop = true;
        break;
      }
      signalfd_siginfo si{};
      while (::read(sig_fd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) stop = true;
    }
    if (!stop) sample();
  }
  server.stop();
  http.join();
  if (sig_fd >= 0) ::close(sig_fd);
  ::pthread_sigmask(SIG_SETMASK, &original, nullptr);
  return kExitOk;
}

}  // namespace sonde::cli
