// `sonde report --prometheus URL --job ID` and `sonde jobstats ID --prometheus URL`: a Slurm job
// from the fleet's Prometheus (src/views/prom_job*.hpp), with basic auth or a bearer token.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "core/json_text.hpp"
#include "http/client.hpp"
#include "http/prometheus_api.hpp"
#include "sinks/run_data.hpp"
#include "views/admin_comment.hpp"
#include "views/prom_job.hpp"
#include "views/prom_job_run.hpp"
#include "views/prom_jobstats.hpp"
#include "views/report.hpp"

namespace sonde::cli {
namespace {

/// Epoch seconds, `now`, `now-2h` (s, m, h, d), or an ISO 8601 UTC time
/// (`2026-12-03T11:00:00[Z]`, also with a space).
std::optional<double> parse_time(const std::string& s, double now) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end && *end == '\0' && std::isfinite(v)) return v;
  if (s == "now") return now;
  if (s.rfind("now-", 0) == 0 && s.size() > 5) {
    const double n = std::strtod(s.c_str() + 4, &end);
    if (!end || end == s.c_str() + 4 || !(n >= 0)) return std::nullopt;
    const std::string unit(end);
    const double mul = unit == "s" || unit.empty() ? 1
                       : unit == "m"               ? 60
                       : unit == "h"               ? 3600
                       : unit == "d"               ? 86400
                                                   : -1;
    if (mul < 0) return std::nullopt;
    return now - n * mul;
  }
  std::tm tm{};
  const char* rest = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (!rest) rest = ::strptime(s.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (!rest || !(*rest == '\0' || (rest[0] == 'Z' && rest[1] == '\0'))) return std::nullopt;
  return static_cast<double>(::timegm(&tm));
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// The API client from the options: secrets from files or the environment, never from argv.
std::unique_ptr<promq::Api> make_api(const PrometheusOptions& o, int& status) {
  status = kExitUsage;
  http::ClientOptions co;
  co.ca_file = o.ca_file;
  co.timeout_s = o.timeout_s;
  co.command_timeout_s = o.command_timeout_s;
  co.max_body_bytes = static_cast<std::uint64_t>(o.max_body_mib * 1024 * 1024);
  if (!o.user.empty()) {
    co.user = o.user;
    if (!o.password_file.empty()) {
      auto p = http::read_secret_file(o.password_file, "--prometheus-password-file");
      if (!p) return print_error(p.error().message), nullptr;
      co.password = *p;
    } else if (const char* env = std::getenv("SONDE_PROMETHEUS_PASSWORD"); env && *env) {
      co.password = env;
    } else {
      print_error(
          "--prometheus-user: give the password in --prometheus-password-file FILE or in "
          "the environment variable SONDE_PROMETHEUS_PASSWORD (never on the command line)");
      return nullptr;
    }
    if (!o.token_file.empty()) {
      print_error("--prometheus-user and --prometheus-token-file exclude each other");
      return nullptr;
    }
  } else if (!o.password_file.empty()) {
    print_error("--prometheus-password-file: only with --prometheus-user USER");
    return nullptr;
  } else if (!o.token_file.empty()) {
    auto t = http::read_secret_file(o.token_file, "--prometheus-token-file");
    if (!t) return print_error(t.error().message), nullptr;
    co.token = *t;
  } else if (const char* env = std::getenv("SONDE_PROMETHEUS_TOKEN"); env && *env) {
    co.token = env;
  }
  auto client = http::Client::create(o.url, co);
  if (!client) return print_error(client.error().message), nullptr;
  status = kExitOk;
  return std::make_unique<promq::Api>(std::move(*client));
}

/// find_job with the options' times; prints the error.
std::optional<promq::JobWindow> find(promq::Api& api, const PrometheusOptions& o, int& status) {
  promq::JobQuery q;
  q.job = o.job;
  q.now = now_s();
  for (auto [text, flag, out] :
       {std::tuple{&o.from, "--from", &q.from}, std::tuple{&o.to, "--to", &q.to}}) {
    if (text->empty()) continue;
    *out = parse_time(*text, q.now);
    if (!*out) {
      print_error(
          fmt::format("{} {}: expected epoch seconds, now, now-N[smhd] or "
                      "YYYY-MM-DDTHH:MM:SS (UTC)",
                      flag, *text));
      status = kExitUsage;
      return std::nullopt;
    }
  }
  if (o.lookback_s) q.lookback_s = *o.lookback_s;
  if (o.job.empty() || o.job.find_first_of("\"\\\n") != std::string::npos) {
    print_error("--job: expected a Slurm job id");
    status = kExitUsage;
    return std::nullopt;
  }
  auto w = promq::find_job(api, q);
  if (!w) {
    print_error(w.error().message);
    status = error_exit_status(w.error());
    return std::nullopt;
  }
  return *w;
}

void print_costs(const promq::Api& api) {
  const auto& s = api.stats();
  std::cerr << fmt::format(
      "sonde: {} Prometheus requests, {} bytes, {} samples, {:.3f} s "
      "(parsing the answers {:.3f} s)\n",
      s.requests, s.bytes, s.samples, s.wall_s, s.parse_s);
}

}  // namespace

void add_prometheus_options(CLI::App* app, PrometheusOptions& o, bool required) {
  auto* url =
      app->add_option("--prometheus", o.url, "Prometheus' base URL (http[s]://HOST:PORT[/PATH])");
  if (required) url->required();
  app->add_option("--prometheus-user", o.user, "basic auth user (password: file or environment)");
  app->add_option("--prometheus-password-file", o.password_file,
                  "file holding the basic auth password (else $SONDE_PROMETHEUS_PASSWORD)");
  app->add_option("--prometheus-token-file", o.token_file,
                  "file holding a bearer token (else $SONDE_PROMETHEUS_TOKEN)");
  app->add_option("--prometheus-ca", o.ca_file, "PEM file of the CA of Prometheus' certificate");
  app->add_option("--prometheus-timeout", o.timeout_s,
                  "seconds one request may take, whole (default 60)")
      ->check(CLI::Range(0.001, 86400.0));
  app->add_option("--prometheus-command-timeout", o.command_timeout_s,
                  "seconds all requests of the command may take together (default 600)")
      ->check(CLI::Range(0.001, 604800.0));
  app->add_option("--prometheus-max-mib", o.max_body_mib,
                  "largest answer accepted, in MiB after decompression (default 256)")
      ->check(CLI::Range(0.001, 65536.0));
  app->add_option("--from", o.from,
                  "start (epoch seconds, now-N[smhd], YYYY-MM-DDTHH:MM:SS UTC); default: the "
                  "job's first sample");
  app->add_option("--to", o.to, "end (same forms); default: the job's last sample");
  app->add_option("--lookback", o.lookback_s,
                  "seconds before --to (default now) searched for the job (default 30 days)");
  app->add_flag("--costs", o.costs, "print the requests' count, bytes and time on stderr");
}

int cmd_report_prometheus(const PrometheusOptions& o, const std::string& output,
                          const std::vector<std::string>& chart_files, bool compress,
                          const std::string& run_dir, double step) {
  auto rules = load_chart_rules(chart_files);
  if (!rules) {
    print_error(rules.error().message);
    return kExitUsage;
  }
  int status = kExitOk;
  auto api = make_api(o, status);
  if (!api) return status;
  auto w = find(*api, o, status);
  if (!w) return status;
  namespace fs = std::filesystem;
  std::string dir = run_dir;
  std::string tmp;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "sonde-prom-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) {
      print_error(fmt::format("cannot create a temporary directory in {}",
                              fs::temp_directory_path().string()));
      return kExitFailure;
    }
    dir = tmp = tmpl;
  }
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      if (!d.empty()) fs::remove_all(d, ec);
    }
  } cleanup{tmp};
  promq::RunOptions ro;
  ro.step = step;
  if (auto ok = promq::write_job_run(*api, *w, dir, ro); !ok) {
    print_error(ok.error().message);
    return error_exit_status(ok.error());
  }
  if (o.costs) print_costs(*api);
  auto run = read_run(dir);
  if (!run) {
    print_error(run.error().message);
    return kExitFailure;
  }
  run->source = fmt::format("Slurm job {} from {}", w->job, api->url());
  const std::string out = output.empty() ? fmt::format("report-{}.html", w->job) : output;
  ReportOptions options;
  options.charts = std::move(*rules);
  options.compress = compress;
  if (auto ok = write_report(*run, options, out); !ok) {
    print_error(ok.error().message);
    return error_exit_status(ok.error());
  }
  if (!run_dir.empty()) std::cerr << "sonde: run directory written to " << run_dir << "\n";
  std::cerr << fmt::format("sonde: report of job {} ({} node(s)) written to {}\n", w->job,
                           w->nodes.size(), out);
  return kExitOk;
}

int cmd_jobstats(const PrometheusOptions& o, const JobstatsOptions& js) {
  int status = kExitOk;
  auto api = make_api(o, status);
  if (!api) return status;
  auto w = find(*api, o, status);
  if (!w) return status;
  auto s = promq::job_stats(*api, *w);
  if (!s) {
    print_error(s.error().message);
    return kExitFailure;
  }
  if (o.costs) print_costs(*api);
  if (js.admin_comment) {
    const std::string line = promq::admin_comment(*s, js.max_bytes);
    if (line.empty()) {
      print_error(fmt::format("jobstats --admin-comment: the summary does not fit in {} bytes",
                              js.max_bytes));
      return kExitFailure;
    }
    std::cout << line << "\n";
  } else if (js.json)
    std::cout << json_text(*s) << "\n";
  else
    std::cout << promq::job_stats_text(*s);
  return kExitOk;
}

}  // namespace sonde::cli
