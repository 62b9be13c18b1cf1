// A stored multi-node run through the real binary: `sonde report` with its node selector and
// `--node`, of the directory and of a zip of it (the page itself: tests/browser/test_report.py).
#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

const fs::path kFixtures = fs::path(SONDE_SOURCE_DIR) / "tests" / "fixtures";

TEST(MultinodeReportCli, ReportOfTheAggregateAndOfOneNode) {
  const fs::path dir = scratch_dir("multinode_report");
  for (const char* what : {"run_multinode", "run_multinode.zip"}) {
    const fs::path out = dir / (std::string(what) + ".html");
    auto r = run_command({sonde_binary(), "report", (kFixtures / what).string(), "-o", out.string(),
                          "--uncompressed"});
    ASSERT_EQ(r.status, 0) << r.describe();
    const std::string html = read_file(out);
    EXPECT_NE(html.find("\"nodes\":[{\"name\":\"n1\""), std::string::npos) << what;
    EXPECT_NE(html.find("node-imbalance"), std::string::npos) << what;
  }
  for (const char* node : {"n2", "N2"}) {
    const fs::path out = dir / (std::string(node) + ".html");
    auto r = run_command({sonde_binary(), "report", (kFixtures / "run_multinode").string(),
                          "--node", node, "-o", out.string(), "--uncompressed"});
    if (std::string(node) == "N2") {
      // Names are exact; the error lists the nodes.
      EXPECT_EQ(r.status, 2) << r.describe();
      EXPECT_NE(r.err.find("--node N2: no such node in"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("its nodes: n1, n2, n3; or aggregate"), std::string::npos) << r.err;
      EXPECT_FALSE(fs::exists(out));
      continue;
    }
    ASSERT_EQ(r.status, 0) << r.describe();
    const std::string html = read_file(out);
    EXPECT_EQ(html.find("\"nodes\":[{\"name\""), std::string::npos);
    EXPECT_NE(html.find("\"host\":\"n2\""), std::string::npos);
    EXPECT_NE(html.find("\"cpu_util_1\""), std::string::npos);
  }
  auto agg = run_command({sonde_binary(), "report", (kFixtures / "run_multinode").string(),
                          "--node", "<Aggregated>", "-o", (dir / "agg.html").string()});
  EXPECT_EQ(agg.status, 0) << agg.describe();
  auto single = run_command({sonde_binary(), "report", (kFixtures / "run_basic").string(), "--node",
                             "n1", "-o", (dir / "single.html").string()});
  EXPECT_EQ(single.status, 2) << single.describe();
  EXPECT_NE(single.err.find("is not a multi-node run"), std::string::npos) << single.err;
}

}  // namespace
}  // namespace sonde::test
