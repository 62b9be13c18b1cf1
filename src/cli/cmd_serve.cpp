// sonde serve: samples the node on its own interval (the Sampler on the main thread) and serves
// the last tick at /metrics over HTTP (src/http: one thread, one epoll loop, bounded connections
// and deadlines). Each tick renders both exposition formats once (PrometheusSink); a scrape only
// copies a shared pointer (and the page's gzip, made once per tick for the first gzip scrape).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/serve_gpus.hpp"
#include "core/clock.hpp"
#include "core/gzip.hpp"
#include "core/sampler.hpp"
#include "core/threads.hpp"
#include "http/basic_auth.hpp"
#include "http/server.hpp"
#include "sinks/prometheus.hpp"
#include "sinks/prometheus_owners.hpp"
#include "sinks/prometheus_sink.hpp"
#include "sinks/sink.hpp"

namespace sonde::cli {
namespace {

bool accepts_gzip(std::string_view accept_encoding) {
  return accept_encoding.find("gzip") != std::string::npos;
}

/// The HTTP server's own figures (docs/prometheus.md, "sonde itself"), appended to a scrape.
void append_http_stats(const http::ServerStats& st, bool tls, bool om, std::string& out) {
  const auto load = [](const std::atomic<std::uint64_t>& v) {
    return v.load(std::memory_order_relaxed);
  };
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "# HELP sonde_http_connections Open HTTP connections.\n"
                 "# TYPE sonde_http_connections gauge\nsonde_http_connections {}\n",
                 load(st.open));
  const char* accepted =
      om ? "sonde_http_connections_accepted" : "sonde_http_connections_accepted_total";
  fmt::format_to(it,
                 "# HELP {0} HTTP connections accepted.\n# TYPE {0} counter\n"
                 "sonde_http_connections_accepted_total {1}\n",
                 accepted, load(st.accepted));
  const char* closed = om ? "sonde_http_connections_closed" : "sonde_http_connections_closed_total";
  fmt::format_to(it,
                 "# HELP {} HTTP connections closed or refused by a bound of the server, by "
                 "bound.\n# TYPE {} counter\n",
                 closed, closed);
  const std::pair<const char*, const std::atomic<std::uint64_t>*> reasons[] = {
      {"header_timeout", &st.header_timeouts}, {"idle_timeout", &st.idle_timeouts},
      {"write_timeout", &st.write_timeouts},   {"per_client_limit", &st.refused_per_client},
      {"connection_limit", &st.refused_full},  {"evicted", &st.evicted},
      {"bad_request", &st.bad_requests}};
  for (const auto& [reason, value] : reasons)
    fmt::format_to(it, "sonde_http_connections_closed_total{{reason=\"{}\"}} {}\n", reason,
                   load(*value));
  if (tls)
    fmt::format_to(it, "sonde_http_connections_closed_total{{reason=\"tls_error\"}} {}\n",
                   load(st.tls_failures));
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
  if (so.tls_cert.empty() != so.tls_key.empty()) {
    print_error(so.tls_cert.empty() ? "--tls-key: needs --tls-cert (the certificate)"
                                    : "--tls-cert: needs --tls-key (its private key)");
    return kExitUsage;
  }
  if (so.max_series < 1) {
    print_error(fmt::format("--max-series: expected a number >= 1, got {}", so.max_series));
    return kExitUsage;
  }
  std::optional<http::BasicAuth> auth;
  if (!so.basic_auth_file.empty()) {
    auto a = http::BasicAuth::load(so.basic_auth_file);
    if (!a) {
      print_error(a.error().message);
      return kExitUsage;
    }
    auth = std::move(*a);
    for (const std::string& w : auth->warnings()) std::cerr << "sonde: warning: " << w << "\n";
  }
  auto cfg = load(common);
  if (!cfg) return kExitUsage;

  // Signals are blocked before any thread starts (the engine's watchdog threads for the GPU
  // collector included), so every thread inherits the mask and only the signalfd sees them.
  SignalGuard signals(/*with_sigchld=*/false);

  // One open-file limit for the HTTP connections and the scanner's open /proc files: the
  // connections get their cap first (raised limit permitting), the scanner what is left.
  http::Limits limits;
  if (rlimit rl{}; ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const rlim_t want = limits.max_connections + 128;
    if (rl.rlim_cur < want) {
      rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
      ::setrlimit(RLIMIT_NOFILE, &rl);
      ::getrlimit(RLIMIT_NOFILE, &rl);
    }
    // Slow clients must not exhaust descriptors before the connection cap does: at most half of
    // what is left after sonde's own 256.
    const std::size_t room =
        rl.rlim_cur > 320 ? static_cast<std::size_t>(rl.rlim_cur - 256) / 2 : 32;
    limits.max_connections = std::min(limits.max_connections, room);
    limits.max_connections_per_client =
        std::min(limits.max_connections_per_client, limits.max_connections);
  }

  // The node only: the engine's other levels are relative to one target process.
  EngineOptions eo;
  eo.reserved_fds = limits.max_connections + 16;  // + the listening sockets, epoll, timers
  eo.roots = roots_from_env();
  eo.target.uid = ::getuid();
  eo.levels = {Level::system};
  const Registry registry = make_registry();
  auto engine_r = Engine::create(*cfg, eo, registry);
  if (!engine_r) {
    print_error(engine_r.error().message);
    return error_exit_status(engine_r.error());
  }
  Engine& engine = **engine_r;

  std::unique_ptr<prom::OwnerScanner> owners;
  std::unique_ptr<GuardedJobGpus> job_gpus;
  if (so.per_user || so.per_job)
    owners = std::make_unique<prom::OwnerScanner>(eo.roots, so.per_user, so.per_job,
                                                  static_cast<std::size_t>(so.max_series));
  // The driver's deadline: a GPU collector's `timeout` (gpu, gpu_nvml or gpu_rocm, whatever its
  // key), else half the interval.
  double deadline_s = cfg->interval_s / 2;
  for (const auto& c : cfg->collectors)
    if (c.enabled && c.target.starts_with("sonde.collectors.gpu") && c.timeout_s)
      deadline_s = *c.timeout_s;
  if (so.per_job)
    if (std::shared_ptr<JobGpus> g = JobGpus::open()) {
      job_gpus = std::make_unique<GuardedJobGpus>(std::move(g), deadline_s);
      owners->set_gpu_attributor(
          [j = job_gpus.get()](const auto& pids) { return j->attribute(pids); });
    }
  SinkSet sinks;
  auto exporter = std::make_unique<prom::PrometheusSink>(
      engine, prom::ExporterOptions{.per_user = so.per_user, .per_job = so.per_job},
      std::move(owners));
  // GPUs in MIG mode: their MIG devices' series (sonde_gpu_mig_*), when the gpu collector runs.
  std::unique_ptr<GuardedMigGpus> mig_gpus;
  const bool gpu_collector = std::any_of(
      cfg->collectors.begin(), cfg->collectors.end(),
      [](const auto& c) { return c.enabled && c.target.starts_with("sonde.collectors.gpu"); });
  if (gpu_collector && (mig_gpus = GuardedMigGpus::open(deadline_s)))
    exporter->set_mig_source([m = mig_gpus.get()] { return m->series(); });
  const prom::PrometheusSink& pages = *exporter;
  sinks.add(std::move(exporter));
  std::atomic<std::uint64_t> scrapes{0};
  // The first tick, before the server answers: a scrape always finds a page.
  sinks.on_sample(engine.tick());

  // The gzip'd pages, compressed once per tick (the first gzip scrape of a page pays for it),
  // never per scrape: a scrape appends only its own counters to a copy, as stored gzip blocks.
  // Used on the HTTP thread only.
  struct GzipCache {
    std::shared_ptr<const prom::Page> page;  ///< the page the prefixes were made of
    GzipPrefix prometheus, openmetrics;
    bool have_prometheus = false, have_openmetrics = false;
  };
  GzipCache gz;
  // The page of one scrape: the cached tick plus the exporter's own counters.
  const auto metrics = [&](const http::Request& req, const http::ServerStats* stats) {
    const std::shared_ptr<const prom::Page> p = pages.page();
    const std::uint64_t n = scrapes.fetch_add(1, std::memory_order_relaxed) + 1;
    const bool om = prom::negotiate(req.header("accept")) == prom::Format::openmetrics;
    const std::string& cached = om ? p->openmetrics : p->prometheus;
    std::string tail;
    fmt::format_to(std::back_inserter(tail),
                   "# HELP {0} Scrapes of /metrics answered since sonde started.\n"
                   "# TYPE {0} counter\nsonde_scrapes_total {1}\n",
                   om ? "sonde_scrapes" : "sonde_scrapes_total", n);
    if (stats) append_http_stats(*stats, !so.tls_cert.empty(), om, tail);
    if (om) tail += prom::kOpenMetricsEof;
    http::Response res;
    res.content_type = om ? prom::kOpenMetricsContentType : prom::kPrometheusContentType;
    if (accepts_gzip(req.header("accept-encoding"))) {
      if (gz.page != p) {
        gz = GzipCache{};
        gz.page = p;
      }
      bool& have = om ? gz.have_openmetrics : gz.have_prometheus;
      GzipPrefix& prefix = om ? gz.openmetrics : gz.prometheus;
      if (!have) {
        prefix = gzip_prefix(cached, Z_DEFAULT_COMPRESSION);
        have = true;
      }
      std::string zipped = gzip_finish(prefix, tail);
      if (!zipped.empty()) {
        res.headers.emplace_back("Content-Encoding", "gzip");
        res.body = std::move(zipped);
        return res;
      }
    }
    res.body.reserve(cached.size() + tail.size());
    res.body = cached;
    res.body += tail;
    return res;
  };

  const auto& [host, port_wanted] = *listen;
  const http::ServerStats* stats = nullptr;
  // Routing: GET and HEAD (the server leaves HEAD's body out) of / and /metrics.
  const auto route = [&](const http::Request& req) {
    if (auth && !auth->allows(req.header("authorization"))) {
      http::Response res = http::error_response(401, "authentication required");
      res.close = false;
      res.headers.emplace_back("WWW-Authenticate", "Basic realm=\"sonde\", charset=\"UTF-8\"");
      return res;
    }
    if (req.method != "GET" && req.method != "HEAD") {
      http::Response res = http::error_response(405, "method not allowed");
      res.close = false;
      res.headers.emplace_back("Allow", "GET, HEAD");
      return res;
    }
    if (req.path == "/metrics") return metrics(req, stats);
    if (req.path == "/") {
      http::Response res;
      res.content_type = "text/html; charset=utf-8";
      res.body = kIndexPage;
      return res;
    }
    http::Response res = http::error_response(404, "not found");
    res.close = false;
    return res;
  };
  const http::TlsFiles tls{so.tls_cert, so.tls_key};
  auto server_r =
      http::Server::listen(host, port_wanted, limits, route, so.tls_cert.empty() ? nullptr : &tls);
  if (!server_r && server_r.error().code == Errc::config) {
    print_error(server_r.error().message);
    return kExitUsage;
  }
  if (!server_r) {
    print_error(fmt::format("--listen {}: cannot listen on {} port {}: {}", so.listen, host,
                            port_wanted, server_r.error().message));
    return kExitFailure;
  }
  http::Server& server = **server_r;
  stats = &server.stats();
  const int port = server.port();
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  std::cerr << fmt::format("sonde: serving {}://{}:{}/metrics (interval {} s)\n",
                           server.tls() ? "https" : "http", shown, port, engine.interval_s());
  if (!server.loopback())
    std::cerr << fmt::format(
        "sonde: warning: listening on {}:{}, not a loopback address: this node's metrics{} are "
        "exposed to every host that can reach it (use 127.0.0.1 to keep them local)\n",
        shown, port, so.per_user || so.per_job ? " (with user names and job ids)" : "");
  if (auth && !server.tls())
    std::cerr << "sonde: warning: --basic-auth-file without --tls-cert/--tls-key: passwords "
                 "cross the network in clear text (docs/prometheus.md, \"TLS\")\n";
  if (so.per_job && !prom::node_has_slurm_cgroups(eo.roots))
    std::cerr << "sonde: note: --per-job: Slurm puts no jobs in cgroups here, so a process' job "
                 "is its SLURM_JOB_ID, which any user can set (docs/prometheus.md)\n";
  std::cerr << std::flush;
  // The HTTP thread's entry: a server that fails (an error or an exception) ends serve cleanly
  // with a one-line error and exit 1, never the process from that thread.
  std::atomic<bool> http_failed{false};
  std::thread http = start_thread([&] {
    std::string error;
    try {
      if (auto r = server.run(); !r) error = r.error().message;
    } catch (const std::exception& e) {
      error = fmt::format("the HTTP server failed: {}", e.what());
    } catch (...) {
      error = "the HTTP server failed";
    }
    if (error.empty()) return;
    print_error(fmt::format("sonde serve: {}", error));
    http_failed = true;
    ::kill(::getpid(), SIGTERM);  // to the sampler's signalfd: the run ends as on a signal
  });

  // Sampling on an absolute schedule (from the first tick) until SIGINT/SIGTERM/SIGHUP.
  SamplerOptions sampling;
  sampling.primed = true;
  Sampler(engine, sampling, &signals).run(sinks);
  server.stop();
  http.join();
  return http_failed ? kExitFailure : kExitOk;
}

}  // namespace sonde::cli
