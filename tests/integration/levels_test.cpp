// The user and slurm levels include processes outside the monitored tree; the process level
// does not.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

constexpr const char* kJobId = "777123";

// Starts a same-uid process holding `mib` MiB outside the monitored tree and waits until its
// memory is touched.
void start_outsider(std::optional<BackgroundProcess>& outsider, int mib,
                    const RunOptions& options) {
  outsider.emplace(
      std::vector<std::string>{workload_binary(), "outsider", std::to_string(mib), "20"}, options);
  const std::optional<std::string> line = outsider->read_line(30);
  ASSERT_TRUE(line.has_value() && *line == "ready")
      << "outsider did not start: " << outsider->err();
}

TEST(Levels, UserLevelIncludesOtherProcessesOfTheUser) {
  std::optional<BackgroundProcess> outsider;
  ASSERT_NO_FATAL_FAILURE(start_outsider(outsider, 256, {}));

  const fs::path dir = scratch_dir();
  const RunResult r = run_command({sonde_binary(), "run", "--quiet", "--interval", "0.2",
                                   "--levels", "process,user", "--out", (dir / "out").string(),
                                   "--", workload_binary(), "hold", "64", "2"});
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = run_dir(dir / "out");
  const CsvTable process = read_csv(run / "perf_process.csv");
  const CsvTable user = read_csv(run / "perf_user.csv");
  ASSERT_FALSE(process.rows.empty());
  ASSERT_FALSE(user.rows.empty());

  const double process_peak = max_value(process.numbers("memory"));
  const double user_peak = max_value(user.numbers("memory"));
  EXPECT_GE(user_peak - process_peak, 0.2)
      << "user level peak " << user_peak << " GiB, process level peak " << process_peak << " GiB";

  for (double n : process.numbers("num_procs")) EXPECT_EQ(n, 1.0) << "process level num_procs";
  for (double n : user.numbers("num_procs")) EXPECT_GE(n, 2.0) << "user level num_procs";
}

TEST(Levels, SlurmLevelIncludesProcessesOfTheJob) {
  const RunOptions in_job{{{"SLURM_JOB_ID", kJobId}}, {}, 120};
  std::optional<BackgroundProcess> outsider;
  ASSERT_NO_FATAL_FAILURE(start_outsider(outsider, 256, in_job));

  const fs::path dir = scratch_dir();
  const RunResult r = run_command(
      {sonde_binary(), "run", "--quiet", "--interval", "0.2", "--levels", "process,slurm,system",
       "--out", (dir / "out").string(), "--", workload_binary(), "hold", "64", "2"},
      in_job);
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = run_dir(dir / "out");
  ASSERT_TRUE(fs::exists(run / "perf_slurm.csv"));
  const CsvTable process = read_csv(run / "perf_process.csv");
  const CsvTable slurm = read_csv(run / "perf_slurm.csv");
  ASSERT_FALSE(process.rows.empty());
  ASSERT_FALSE(slurm.rows.empty());

  for (double n : slurm.numbers("num_procs")) EXPECT_GE(n, 2.0) << "slurm level num_procs";
  const double process_peak = max_value(process.numbers("memory"));
  const double slurm_peak = max_value(slurm.numbers("memory"));
  EXPECT_GE(slurm_peak - process_peak, 0.2)
      << "slurm level peak " << slurm_peak << " GiB, process level peak " << process_peak << " GiB";
}

TEST(Levels, SlurmLevelOutsideAJobIsAWarning) {
  const fs::path dir = scratch_dir();
  const RunResult r = run_command({sonde_binary(), "run", "--levels", "process,slurm", "--out",
                                   (dir / "out").string(), "--", workload_binary(), "sleep", "0.5"},
                                  {{}, {"SLURM_JOB_ID"}, 120});
  EXPECT_EQ(r.status, 0) << r.describe();
  EXPECT_NE(r.err.find("SLURM_JOB_ID"), std::string::npos)
      << "expected a warning that the slurm level needs SLURM_JOB_ID\n"
      << r.describe();
  const fs::path run = run_dir(dir / "out");
  EXPECT_FALSE(fs::exists(run / "perf_slurm.csv"));
  EXPECT_TRUE(fs::exists(run / "perf_process.csv"));
}

}  // namespace
}  // namespace sonde::test
