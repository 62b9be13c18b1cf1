// The Prometheus API client of the report commands (src/http/prometheus_api.*, client.*) on
// responses captured from a real Prometheus 2.42 (tests/fixtures/prometheus/), and the job
// statistics' text (src/views/prom_jobstats.*).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "http/client.hpp"
#include "http/prometheus_api.hpp"
#include "support/built_paths.hpp"
#include "views/prom_jobstats.hpp"

namespace {
using namespace sonde;

std::string fixture(const std::string& name) {
  std::ifstream f(std::string(SONDE_FIXTURES_DIR) + "/prometheus/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

TEST(PromApi, ParsesAVector) {
  auto r = promq::parse_query_response(fixture("vector.json"), "ctx");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].label("instance"), "10.0.0.1:9850");
  EXPECT_EQ((*r)[0].label("absent"), "");
  ASSERT_EQ((*r)[0].samples.size(), 1u);
  EXPECT_DOUBLE_EQ((*r)[0].samples[0].t, 1796296393);
  EXPECT_DOUBLE_EQ((*r)[0].samples[0].v, 30);
  EXPECT_DOUBLE_EQ((*r)[2].samples[0].v, 1);
}

TEST(PromApi, ParsesAMatrix) {
  auto r = promq::parse_query_response(fixture("matrix.json"), "ctx");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[1].label("gpu"), "1");
  ASSERT_EQ((*r)[1].samples.size(), 3u);
  EXPECT_DOUBLE_EQ((*r)[1].samples[2].t, 1796296378);
  EXPECT_DOUBLE_EQ((*r)[1].samples[2].v, 0.6);
  // A range vector (an instant query of `x[3s]`) is a matrix of raw samples with their labels.
  auto rv = promq::parse_query_response(fixture("range_vector.json"), "ctx");
  ASSERT_TRUE(rv) << rv.error().message;
  ASSERT_EQ(rv->size(), 1u);
  EXPECT_EQ((*rv)[0].label("__name__"), "sonde_job_processes");
  EXPECT_EQ((*rv)[0].label("jobid"), "4242");
  EXPECT_EQ((*rv)[0].samples.size(), 3u);
}

TEST(PromApi, ParsesAScalarAndSpecialValues) {
  auto r = promq::parse_query_response(fixture("scalar_nan.json"), "ctx");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_TRUE((*r)[0].labels.empty());
  EXPECT_TRUE(std::isnan((*r)[0].samples[0].v));
  auto inf = promq::parse_query_response(
      R"({"status":"success","data":{"resultType":"vector","result":[)"
      R"({"metric":{},"value":[1,"+Inf"]},{"metric":{},"value":[1,"-Inf"]}]}})",
      "ctx");
  ASSERT_TRUE(inf) << inf.error().message;
  EXPECT_EQ((*inf)[0].samples[0].v, INFINITY);
  EXPECT_EQ((*inf)[1].samples[0].v, -INFINITY);
}

TEST(PromApi, PrometheusErrorsKeepTheirText) {
  auto r = promq::parse_query_response(fixture("error_bad_data.json"), "http://p:9090 (q)");
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("http://p:9090 (q)"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("bad_data"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("unclosed left parenthesis"), std::string::npos)
      << r.error().message;
}

TEST(PromApi, MalformedAnswersAreClearErrors) {
  for (const char* body : {"<html>proxy error</html>", "{}", R"({"status":"success"})",
                           R"({"status":"success","data":{"resultType":"string","result":[]}})",
                           R"({"status":"success","data":{"resultType":"vector","result":[{}]}})",
                           R"({"status":"success","data":{"resultType":"vector","result":[)"
                           R"({"metric":{},"value":[1,"x"]}]}})",
                           R"({"status":"success","data":{"resultType":"matrix","result":[)"
                           R"({"metric":{"a":1},"values":[]}]}})"}) {
    auto r = promq::parse_query_response(body, "URL (Q)");
    ASSERT_FALSE(r) << body;
    EXPECT_EQ(r.error().message.rfind("URL (Q): ", 0), 0u) << r.error().message;
  }
}

TEST(PromApi, ParsesSeries) {
  auto r = promq::parse_series_response(fixture("series.json"), "ctx");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[2].at("nodename"), "n3");
  EXPECT_FALSE(promq::parse_series_response(fixture("vector.json"), "ctx"));
}

TEST(PromApi, BuildsQueries) {
  EXPECT_EQ(promq::quote("12"), "\"12\"");
  EXPECT_EQ(promq::quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
  EXPECT_EQ(promq::exact_regex({"10.0.0.1:9850", "n(1)|x"}), "10\\.0\\.0\\.1:9850|n\\(1\\)\\|x");
  EXPECT_EQ(promq::duration(1.5), "1500ms");
  EXPECT_EQ(promq::duration(0), "1ms");
  EXPECT_EQ(promq::duration(86400), "86400000ms");
  EXPECT_EQ(promq::api_time(1796296374.5), "1796296374.500");
  EXPECT_EQ(http::form_encode({{"query", "sum(x{a=\"b c\"})"}, {"t", "1.5"}}),
            "query=sum%28x%7Ba%3D%22b%20c%22%7D%29&t=1.5");
}

TEST(PromApi, StepKeepsSeriesUnderPrometheusLimit) {
  // 20 s at 1 s resolution: every second.
  EXPECT_DOUBLE_EQ(promq::choose_step(20, 1), 1);
  // A day: at most 11,000 points, whole seconds.
  const double day = promq::choose_step(86400, 0.001);
  EXPECT_DOUBLE_EQ(day, 8);
  EXPECT_LE(86400 / day + 1, 11000);
  // A week with a smaller budget.
  const double week = promq::choose_step(7 * 86400, 0.001, 2000);
  EXPECT_LE(7 * 86400 / week + 1, 2000);
  // Short ranges: milliseconds.
  EXPECT_DOUBLE_EQ(promq::choose_step(2, 0.001, 11), 0.2);
}

TEST(PromClient, RefusesMalformedUrlsAndOptions) {
  http::ClientOptions o;
  for (const char* url :
       {"localhost:9090", "ftp://h:1", "http://", "http://u@h:1", "http://h:1/p?x=1"}) {
    auto c = http::Client::create(url, o);
    ASSERT_FALSE(c) << url;
    EXPECT_NE(c.error().message.find(url), std::string::npos) << c.error().message;
  }
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_FALSE(http::Client::create("http://h:1", o));  // a CA without https
  auto c = http::Client::create("https://h:1", o);      // a CA that cannot be read
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("/nonexistent/ca.pem"), std::string::npos);
  http::ClientOptions both;
  both.user = "u";
  both.token = "t";
  EXPECT_FALSE(http::Client::create("http://h:1", both));
}

TEST(PromClient, ConnectionRefusedNamesTheUrl) {
  // A port nothing listens on: bind one, close it.
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  ::close(s);
  http::ClientOptions o;
  o.timeout_s = 2;
  auto c = http::Client::create("http://127.0.0.1:" + std::to_string(port) + "/prefix/", o);
  ASSERT_TRUE(c) << c.error().message;
  promq::Api api(std::move(*c));
  auto r = api.query("up", 1);
  ASSERT_FALSE(r);
  EXPECT_NE(
      r.error().message.find("http://127.0.0.1:" + std::to_string(port) + "/prefix/api/v1/query"),
      std::string::npos)
      << r.error().message;
  EXPECT_EQ(api.stats().requests, 1u);
}

TEST(PromJobStats, TextTable) {
  nlohmann::json s = nlohmann::json::parse(R"({
    "job": "77", "user": "alice", "prometheus": "http://p:9090", "from": 1796296374,
    "to": 1796296393, "elapsed_s": 20, "scrape_interval_s": 1,
    "nodes": [
      {"name": "n1", "instance": "a:1", "cpus": 2, "cpu_seconds": 30, "cpu_efficiency": 0.75,
       "memory_peak_bytes": 1073741824, "memory_limit_bytes": 4294967296,
       "memory_efficiency": 0.25, "gpus": [{"gpu": "0", "utilization_mean": 0.3,
       "memory_peak_bytes": 3221225472}], "tags": ["cpu-bound"]},
      {"name": "n2", "instance": "b:1", "cpus": null, "cpu_seconds": null,
       "cpu_efficiency": null, "memory_peak_bytes": null, "memory_limit_bytes": null,
       "memory_efficiency": null, "gpus": [], "tags": []}],
    "overall": {"nodes": 2, "cpus": null, "cpu_seconds": 30, "cpu_efficiency": null,
       "memory_peak_bytes": 1073741824, "memory_limit_bytes": null, "memory_efficiency": null,
       "gpus": 1, "gpu_utilization_mean": 0.3, "gpu_memory_peak_bytes": 3221225472,
       "tags": []}})");
  const std::string t = promq::job_stats_text(s);
  EXPECT_NE(t.find("Job 77 (alice): 2 node(s)"), std::string::npos) << t;
  EXPECT_NE(t.find("75.0%"), std::string::npos) << t;
  EXPECT_NE(t.find("cpu-bound"), std::string::npos) << t;
  EXPECT_NE(t.find("n1 gpu 0: utilisation 30.0%, memory peak 3.00 GiB"), std::string::npos) << t;
  EXPECT_NE(t.find("overall"), std::string::npos) << t;
}

}  // namespace
