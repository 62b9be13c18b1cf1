#include "sinks/prometheus.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sinks/prometheus_owners.hpp"

namespace sonde::prom {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(PrometheusRender, EscapesLabelValues) {
  EXPECT_EQ(escape_label_value(R"(a"b\c)"
                               "\n"),
            R"(a\"b\\c\n)");
  EXPECT_EQ(escape_label_value("plain"), "plain");
}

TEST(PrometheusRender, EscapesHelpPerFormat) {
  EXPECT_EQ(escape_help("a\\b\n\"q\"", Format::prometheus), "a\\\\b\\n\"q\"");
  EXPECT_EQ(escape_help("a\\b\n\"q\"", Format::openmetrics), "a\\\\b\\n\\\"q\\\"");
}

TEST(PrometheusRender, SanitizesNames) {
  EXPECT_EQ(sanitize_name("sonde_plugin_My-Lustre.read"), "sonde_plugin_my_lustre_read");
  EXPECT_EQ(sanitize_name("__a__b__"), "a_b");
  EXPECT_EQ(sanitize_name("0abc"), "x_0abc");
  EXPECT_EQ(sanitize_name(""), "x_");
}

TEST(PrometheusRender, FormatsSpecialValues) {
  EXPECT_EQ(format_value(kNaN), "NaN");
  EXPECT_EQ(format_value(kInf), "+Inf");
  EXPECT_EQ(format_value(-kInf), "-Inf");
  EXPECT_EQ(format_value(-0.0), "0");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(std::stod(format_value(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

std::vector<Family> sample_families() {
  return {
      {"sonde_disk_read_bytes", Type::counter, "Bytes read.", "bytes", {{{}, 42}}},
      {"sonde_cpu_utilization_ratio",
       Type::gauge,
       "Busy \"fraction\".",
       "ratio",
       {{{{"cpu", "0"}}, 0.5}, {{{"cpu", "1"}}, kNaN}}},
      {"sonde_build", Type::info, "Version.", "", {{{{"version", "1\"2"}}, 1}}},
      {"sonde_empty", Type::gauge, "No samples: left out.", "", {}},
  };
}

TEST(PrometheusRender, TextFormat004) {
  std::string out;
  render(sample_families(), Format::prometheus, out);
  EXPECT_EQ(out,
            "# HELP sonde_disk_read_bytes_total Bytes read.\n"
            "# TYPE sonde_disk_read_bytes_total counter\n"
            "sonde_disk_read_bytes_total 42\n"
            "# HELP sonde_cpu_utilization_ratio Busy \"fraction\".\n"
            "# TYPE sonde_cpu_utilization_ratio gauge\n"
            "sonde_cpu_utilization_ratio{cpu=\"0\"} 0.5\n"
            "sonde_cpu_utilization_ratio{cpu=\"1\"} NaN\n"
            "# HELP sonde_build_info Version.\n"
            "# TYPE sonde_build_info gauge\n"
            "sonde_build_info{version=\"1\\\"2\"} 1\n");
}

TEST(PrometheusRender, OpenMetrics) {
  std::string out;
  render(sample_families(), Format::openmetrics, out);
  EXPECT_EQ(out,
            "# HELP sonde_disk_read_bytes Bytes read.\n"
            "# TYPE sonde_disk_read_bytes counter\n"
            "# UNIT sonde_disk_read_bytes bytes\n"
            "sonde_disk_read_bytes_total 42\n"
            "# HELP sonde_cpu_utilization_ratio Busy \\\"fraction\\\".\n"
            "# TYPE sonde_cpu_utilization_ratio gauge\n"
            "# UNIT sonde_cpu_utilization_ratio ratio\n"
            "sonde_cpu_utilization_ratio{cpu=\"0\"} 0.5\n"
            "sonde_cpu_utilization_ratio{cpu=\"1\"} NaN\n"
            "# HELP sonde_build Version.\n"
            "# TYPE sonde_build info\n"
            "sonde_build_info{version=\"1\\\"2\"} 1\n");
  EXPECT_EQ(kOpenMetricsEof, "# EOF\n");
}

TEST(PrometheusRender, Negotiation) {
  EXPECT_EQ(negotiate(""), Format::prometheus);
  EXPECT_EQ(negotiate("text/plain;version=0.0.4"), Format::prometheus);
  EXPECT_EQ(negotiate("application/openmetrics-text;version=1.0.0,application/"
                      "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5"),
            Format::openmetrics);
}

TEST(PrometheusRateIntegrator, GivesTheCounterBack) {
  // A counter read at t = 10, 10.5, (failed at 11), 11.5, 12: 1000, 1050, -, 1250, 1250. The
  // rate handler gives 0 (baseline), 100/s, NaN, 200/s (over the 1 s since the last good read), 0.
  RateIntegrator c;
  EXPECT_EQ(c.add(kNaN, 9.5), 0);  // not measured yet
  EXPECT_EQ(c.add(0, 10), 0);
  EXPECT_EQ(c.add(100, 10.5), 50);
  EXPECT_EQ(c.add(kNaN, 11), 50);
  EXPECT_EQ(c.add(200, 11.5), 250);
  EXPECT_EQ(c.add(0, 12), 250);
  // Rounded to whole units; the scale converts units.
  RateIntegrator r;
  r.add(0, 0);
  EXPECT_EQ(r.add(1.0 / 3.0, 3.0), 1);
  EXPECT_EQ(r.add(1, 4, 1024), 1025);
}

TEST(PrometheusOwners, SlurmJobFromCgroup) {
  EXPECT_EQ(slurm_job_from_cgroup("4:memory:/slurm/uid_1000/job_1234/step_0\n"), "1234");
  EXPECT_EQ(slurm_job_from_cgroup("0::/system.slice/slurmstepd.scope/job_77/step_batch/user\n"),
            "77");
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice/job_x/\n"), std::nullopt);
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice\n"), std::nullopt);
}

PidRecord pid(int p, std::uint32_t uid, double cpu, std::uint64_t rss,
              std::optional<std::string> job = std::nullopt) {
  PidRecord r;
  r.pid = p;
  r.starttime_ticks = 100;
  r.uid = uid;
  r.cpu_s = cpu;
  r.rss_bytes = rss;
  r.job = std::move(job);
  return r;
}

std::string name_of(std::uint32_t uid) {
  return "u" + std::to_string(uid);
}

TEST(PrometheusOwners, CountersGrowFromPerPidDeltas) {
  OwnerAggregator agg(true, true, 10);
  agg.update({pid(1, 0, 5, 100), pid(2, 1000, 2, 50, "7")}, name_of);
  const OwnerUsage& u =
      agg.update({pid(1, 0, 6, 100), pid(2, 1000, 2.5, 60, "7"), pid(3, 1000, 1, 10)}, name_of);
  ASSERT_EQ(u.users.size(), 2u);
  EXPECT_EQ(u.users[0].key, "u0");
  EXPECT_DOUBLE_EQ(u.users[0].cpu_seconds_total, 6);  // whole life at first sight, then growth
  EXPECT_EQ(u.users[1].key, "u1000");
  EXPECT_DOUBLE_EQ(u.users[1].cpu_seconds_total, 3.5);
  EXPECT_DOUBLE_EQ(u.users[1].rss_bytes, 70);
  EXPECT_DOUBLE_EQ(u.users[1].processes, 2);
  ASSERT_EQ(u.jobs.size(), 1u);
  EXPECT_EQ(u.jobs[0].key, "7");
  EXPECT_DOUBLE_EQ(u.jobs[0].cpu_seconds_total, 2.5);

  // A process that exits does not make the counter go down.
  const OwnerUsage& after = agg.update({pid(1, 0, 6, 100), pid(3, 1000, 1.5, 10)}, name_of);
  EXPECT_DOUBLE_EQ(after.users[1].cpu_seconds_total, 4);
  EXPECT_TRUE(after.jobs.empty());  // no process left in job 7: its series ends
}

TEST(PrometheusOwners, CapFoldsTheRestIntoOther) {
  OwnerAggregator agg(true, false, 2);
  agg.update({pid(1, 1, 1, 1), pid(2, 2, 1, 1)}, name_of);
  const OwnerUsage& u =
      agg.update({pid(1, 1, 1, 1), pid(2, 2, 1, 1), pid(3, 3, 4, 8), pid(4, 4, 2, 2)}, name_of);
  ASSERT_EQ(u.users.size(), 3u);
  EXPECT_EQ(u.users[2].key, "other");
  EXPECT_DOUBLE_EQ(u.users[2].cpu_seconds_total, 6);
  EXPECT_DOUBLE_EQ(u.users[2].rss_bytes, 10);
  EXPECT_DOUBLE_EQ(u.users[2].processes, 2);
  EXPECT_EQ(u.users_folded, 2u);
  // u1 leaves: its slot frees, but folded users stay in "other" (its counter stays monotonic).
  const OwnerUsage& v = agg.update({pid(2, 2, 1, 1), pid(3, 3, 5, 8)}, name_of);
  ASSERT_EQ(v.users.size(), 2u);
  EXPECT_EQ(v.users[0].key, "u2");
  EXPECT_EQ(v.users[1].key, "other");
  EXPECT_DOUBLE_EQ(v.users[1].cpu_seconds_total, 7);
  EXPECT_EQ(v.users_folded, 1u);
}

TEST(PrometheusOwners, ReusedPidCountsItsWholeLife) {
  OwnerAggregator agg(true, false, 10);
  agg.update({pid(1, 1, 10, 1)}, name_of);
  PidRecord reused = pid(1, 1, 3, 1);
  reused.starttime_ticks = 200;
  const OwnerUsage& u = agg.update({reused}, name_of);
  EXPECT_DOUBLE_EQ(u.users[0].cpu_seconds_total, 13);
}

}  // namespace
}  // namespace sonde::prom
