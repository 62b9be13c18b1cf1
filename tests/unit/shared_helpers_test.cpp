// The helpers that used to exist in several copies (issue 24, "One implementation of each
// helper"): base64, write_all, the perf_<level>.csv writer, program spawning and the cgroup
// path -> Slurm job rule. Each is now the only implementation its callers use.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base64.hpp"
#include "core/fs.hpp"
#include "core/nan.hpp"
#include "core/slurm_job.hpp"
#include "core/spawn.hpp"
#include "sinks/run_csv.hpp"

namespace sonde {
namespace {
namespace fs = std::filesystem;

TEST(Base64, KnownVectors) {
  // RFC 4648, section 10.
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(Base64, RoundTripOfEveryLengthAndByte) {
  std::mt19937 rng(24);
  for (std::size_t len = 0; len < 300; ++len) {
    std::string in(len, '\0');
    for (char& c : in) c = static_cast<char>(rng() & 0xff);
    const std::string enc = base64_encode(in);
    EXPECT_EQ(enc.size(), (len + 2) / 3 * 4);
    std::string out = "junk";
    ASSERT_TRUE(base64_decode(enc, out)) << len;
    EXPECT_EQ(out, in) << len;
  }
  std::string out;
  EXPECT_FALSE(base64_decode("Zg=", out));
  EXPECT_FALSE(base64_decode("Z===", out));  // padding where data must be
  EXPECT_FALSE(base64_decode("Zg==Zg==", out));
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
  }
};

TEST(WriteAll, WritesMoreThanThePipeHoldsWhileTheReaderDrainsIt) {
  // 4 MiB through a 64 KiB pipe: write() returns short counts; every byte arrives in order.
  Pipe p;
  std::string text(4 << 20, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7);
  std::string got;
  std::thread reader([&] {
    char buf[8192];
    ssize_t n;
    while ((n = ::read(p.r, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  });
  EXPECT_TRUE(write_all(p.w, text));
  ::close(p.w);
  p.w = -1;
  reader.join();
  EXPECT_EQ(got, text);
}

TEST(WriteAll, FailsWithErrnoWhenTheReaderIsGone) {
  Pipe p;
  ::close(p.r);
  p.r = -1;
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  errno = 0;
  EXPECT_FALSE(write_all(p.w, "abc"));
  EXPECT_EQ(errno, EPIPE);
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(RunCsv, OneNumberFormat) {
  std::string out;
  const std::vector<std::string> cols = {"a", "b"};
  append_run_header(out, cols);
  EXPECT_EQ(out, "time,wallclock,a,b\n");
  out.clear();
  const double inf = std::numeric_limits<double>::infinity();
  const double values[] = {1.0 / 3, kNaN, inf, 1e-12, 123456789012.0, -0.5, 0};
  append_run_row(out, 10'000'000.000123, 1'700'000'000.25, values);
  // Time and wallclock to the microsecond, values with 10 significant digits, NaN and
  // infinities as empty fields.
  EXPECT_EQ(out, "10000000.000123,1700000000.250000,0.3333333333,,,1e-12,1.23456789e+11,-0.5,0\n");
  out.clear();
  append_run_row(out, kNaN, kNaN, {});
  EXPECT_EQ(out, ",\n");
}

class CsvScratch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sonde_run_csv_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  void TearDown() override {
    ::close(fd_);
    fs::remove_all(dir_);
  }
  std::string slurp(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  fs::path dir_;
  int fd_ = -1;
};

TEST_F(CsvScratch, FileHoldsTheHeaderAndOneLinePerRow) {
  const std::vector<std::string> cols = {"cpu", "mem"};
  auto f = RunCsvFile::create(fd_, "perf_system.csv", "shown", cols);
  ASSERT_TRUE(f) << f.error().message;
  const double r1[] = {1.5, kNaN};
  const double r2[] = {2, 3};
  EXPECT_TRUE(f->append(1, 100, r1));
  EXPECT_TRUE(f->append(2, 101, r2));
  f->sync_and_close();
  EXPECT_FALSE(*f);
  EXPECT_EQ(slurp("perf_system.csv"),
            "time,wallclock,cpu,mem\n"
            "1.000000,100.000000,1.5,\n"
            "2.000000,101.000000,2,3\n");
  // Created new: an existing entry is never written through.
  auto again = RunCsvFile::create(fd_, "perf_system.csv", "shown", cols);
  EXPECT_FALSE(again);
}

TEST(Spawn, CapturesOutputAndStatus) {
  const Captured c = run_captured({"sh", "-c", "echo out; echo err >&2; exit 3"}, "/bin/sh", 30);
  EXPECT_EQ(c.status, 3);
  EXPECT_EQ(c.out, "out\n");
  EXPECT_EQ(c.err, "err\n");
}

TEST(Spawn, StdinIsDevNull) {
  const Captured c = run_captured({"sh", "-c", "cat; echo end"}, "/bin/sh", 30);
  EXPECT_EQ(c.status, 0);
  EXPECT_EQ(c.out, "end\n");
}

TEST(Spawn, PastTheDeadlineTheProcessGroupIsKilled) {
  // The child of the shell holds the pipes too: killing only the shell would leave the read
  // waiting for it. The truth is the status and that the call returned at all.
  const Captured c = run_captured({"sh", "-c", "sleep 30 & sleep 30; wait"}, "/bin/sh", 0.2);
  EXPECT_EQ(c.status, Captured::kTimedOut);
  EXPECT_NE(c.err.find("did not answer within 0.2 s"), std::string::npos) << c.err;
}

TEST(Spawn, AProgramNotFoundDoesNotStart) {
  EXPECT_EQ(run_captured({"no-such-program"}, "", 1).status, -1);
  EXPECT_EQ(run_captured({"x"}, "/nonexistent/program", 1).status, -1);
}

TEST(Spawn, EnvironmentDescriptorsAndProcessGroup) {
  Pipe p;
  const std::vector<std::string> env = {"SONDE_SPAWN_TEST=42"};
  SpawnOptions o;
  o.program = "/bin/sh";
  o.env = &env;
  o.stdout_fd = p.w;
  o.stdin_null = true;
  o.own_process_group = true;
  sigset_t none;
  sigemptyset(&none);
  o.sigmask = &none;
  pid_t pid = -1;
  ASSERT_EQ(spawn_program({"sh", "-c",
                           "echo \"$SONDE_SPAWN_TEST $(ps -o pgid= -p $$)\"; "
                           "echo pid $$"},
                          o, pid),
            0);
  ::close(p.w);
  p.w = -1;
  std::string got;
  char buf[256];
  ssize_t n;
  while ((n = ::read(p.r, buf, sizeof buf)) > 0) got.append(buf, static_cast<std::size_t>(n));
  int ws = 0;
  ASSERT_EQ(::waitpid(pid, &ws, 0), pid);
  EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  std::istringstream in(got);
  std::string value, pgid, word, child;
  in >> value >> pgid >> word >> child;
  EXPECT_EQ(value, "42");
  EXPECT_EQ(pgid, child);  // its own group: the group id is its pid
  EXPECT_EQ(child, std::to_string(pid));
}

TEST(SlurmJobRule, PathGivesTheIdItsDirectoryAndTheUid) {
  const std::string v1 = "/slurm/uid_1000/job_12/step_0";
  auto j = slurm_job_of_cgroup_path(v1);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->id, "12");
  EXPECT_EQ(v1.substr(0, j->prefix), "/slurm/uid_1000/job_12");
  EXPECT_EQ(j->uid, 1000u);
  j = slurm_job_of_cgroup_path("/slurm_n1/uid_x/job_7");
  ASSERT_TRUE(j);
  EXPECT_EQ(j->id, "7");
  EXPECT_FALSE(j->uid);
  const std::string v2 = "/system.slice/slurmstepd.scope/job_77/step_batch/user";
  j = slurm_job_of_cgroup_path(v2);
  ASSERT_TRUE(j);
  EXPECT_EQ(v2.substr(0, j->prefix), "/system.slice/slurmstepd.scope/job_77");
  // A user's own subtree is anyone's: never a job.
  EXPECT_FALSE(slurm_job_of_cgroup_path(
      "/user.slice/user-1000.slice/user@1000.service/slurmstepd.scope/job_5"));
  EXPECT_FALSE(slurm_job_of_cgroup_path("/slurm/job_5"));
  // slurm_job_from_cgroup is the first line that passes the same rule.
  EXPECT_EQ(slurm_job_from_cgroup("0::/user.slice/slurmstepd.scope/job_9\n"
                                  "4:memory:/slurm/uid_1/job_3/step_0\n"),
            "3");
}

}  // namespace
}  // namespace sonde
