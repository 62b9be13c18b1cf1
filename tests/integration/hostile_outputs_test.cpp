// Issue 12: what another user of the machine can plant where sonde writes (links, directories of
// theirs) and what a hostile stored run can make sonde read (zip bombs, damaged databases),
// through the real binary. The planted files stand for another user's: when the tests run as
// root, the directories are handed to a real other user (sonde-test-other).
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

/// Another user of this machine (made when running as root), or nullopt.
std::optional<uid_t> other_uid() {
  const auto u = other_user();
  if (!u) return std::nullopt;
  return u->uid;
}

/// A file that stands for one of root's: what a planted link points at.
fs::path victim(const fs::path& dir) {
  const fs::path v = dir / "victim";
  std::ofstream(v) << "precious\n";
  return v;
}

/// A finished run directory to read back.
fs::path stored_run(const fs::path& dir) {
  const fs::path run = dir / "run";
  const RunResult r = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", run.string()});
  EXPECT_EQ(r.status, 0) << r.describe();
  return run;
}

TEST(HostileOutputs, APlantedLinkInTheRunDirectoryIsNeverWrittenThrough) {
  const fs::path dir = scratch_dir();
  const fs::path v = victim(dir);
  const fs::path out = dir / "D";
  fs::create_directories(out);
  fs::create_symlink(v, out / "perf_system.csv");
  const RunResult r = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", out.string()});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find("perf_system.csv"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(v), "precious\n");
  EXPECT_FALSE(fs::exists(out / "manifest.json"));
}

TEST(HostileOutputs, ARunDirectoryOfAnotherUserIsRefused) {
  const auto other = other_uid();
  if (!other) GTEST_SKIP() << "needs root to make a directory of another user";
  const fs::path dir = scratch_dir();
  const fs::path v = victim(dir);
  const fs::path out = dir / "D";
  fs::create_directories(out);
  // What the other user planted: links named as sonde's files and its old temporary names.
  for (const std::string name : {"perf_system.csv", "manifest.json.tmp.1", "report.html"})
    fs::create_symlink(v, out / name);
  ASSERT_EQ(::chown(out.c_str(), *other, *other), 0);
  const RunResult r = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--report", "--out", out.string()});
  EXPECT_EQ(r.status, 2) << r.describe();
  EXPECT_NE(r.err.find(out.string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("owned by"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(v), "precious\n");
  // Their run directory is read, but the report's default place (inside it) is refused.
  const fs::path run = stored_run(dir);
  ASSERT_EQ(::chown(run.c_str(), *other, *other), 0);
  const RunResult rep = sonde({"report", run.string()});
  EXPECT_EQ(rep.status, 2) << rep.describe();
  EXPECT_NE(rep.err.find("-o FILE"), std::string::npos) << rep.err;
  EXPECT_FALSE(fs::exists(run / "report.html"));
  EXPECT_EQ(sonde({"report", run.string(), "-o", (dir / "mine.html").string()}).status, 0);
  // A link to a directory is refused as well.
  fs::create_directory_symlink(dir, dir / "L");
  const RunResult l = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", (dir / "L").string()});
  EXPECT_EQ(l.status, 2) << l.describe();
  EXPECT_NE(l.err.find("symbolic link"), std::string::npos) << l.err;
}

TEST(HostileOutputs, ReportSummaryAndExportNeverFollowALink) {
  const fs::path dir = scratch_dir();
  const fs::path v = victim(dir);
  const fs::path run = stored_run(dir);

  fs::create_symlink(v, dir / "report.html");
  const RunResult rep = sonde({"report", run.string(), "-o", (dir / "report.html").string()});
  EXPECT_EQ(rep.status, 2) << rep.describe();
  EXPECT_NE(rep.err.find("symbolic link"), std::string::npos) << rep.err;
  EXPECT_EQ(read_file(v), "precious\n");

  // The report's default place, inside the run directory.
  fs::create_symlink(v, run / "report.html");
  const RunResult def = sonde({"report", run.string()});
  EXPECT_EQ(def.status, 2) << def.describe();
  EXPECT_EQ(read_file(v), "precious\n");

  fs::create_symlink(v, dir / "summary.json");
  const RunResult sum =
      sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1", "--quiet", "--out",
             (dir / "run2").string(), "--summary-json", (dir / "summary.json").string()});
  EXPECT_NE(sum.err.find("summary.json"), std::string::npos) << sum.err;
  EXPECT_EQ(read_file(v), "precious\n");

  const fs::path db = dir / "runs.sqlite";
  ASSERT_EQ(sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1", "--quiet",
                   "--out", db.string()})
                .status,
            0);
  fs::create_symlink(v, dir / "export.json");
  const RunResult ex = sonde(
      {"runs", "export", db.string(), "--format", "json", "-o", (dir / "export.json").string()});
  EXPECT_NE(ex.status, 0) << ex.describe();
  EXPECT_EQ(read_file(v), "precious\n");
  fs::create_directories(dir / "exported");
  fs::create_symlink(v, dir / "exported" / "perf_system.csv");
  const RunResult exd = sonde({"runs", "export", db.string(), "-o", (dir / "exported").string()});
  EXPECT_NE(exd.status, 0) << exd.describe();
  EXPECT_EQ(read_file(v), "precious\n");
}

TEST(HostileOutputs, SqliteFilesThatAreLinksAreRefused) {
  const fs::path dir = scratch_dir();
  const fs::path v = victim(dir);
  fs::create_symlink(v, dir / "a.sqlite");
  const RunResult a = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", (dir / "a.sqlite").string()});
  EXPECT_EQ(a.status, 2) << a.describe();
  EXPECT_NE(a.err.find("symbolic link"), std::string::npos) << a.err;
  EXPECT_EQ(read_file(v), "precious\n");
  // SQLite creates -wal and -shm next to the database: links there are refused too.
  fs::create_symlink(v, dir / "b.sqlite-wal");
  const RunResult b = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", (dir / "b.sqlite").string()});
  EXPECT_EQ(b.status, 2) << b.describe();
  EXPECT_NE(b.err.find("b.sqlite-wal"), std::string::npos) << b.err;
  EXPECT_EQ(read_file(v), "precious\n");
  const RunResult l = sonde({"runs", "list", (dir / "b.sqlite").string()});
  EXPECT_NE(l.status, 0) << l.describe();
  EXPECT_EQ(read_file(v), "precious\n");
}

TEST(HostileOutputs, AnotherUsersDatabaseIsReadButNothingIsCreatedBesideIt) {
  const auto other = other_uid();
  if (!other) GTEST_SKIP() << "needs root to make a directory of another user";
  const fs::path dir = scratch_dir();
  const fs::path theirs = dir / "theirs";
  fs::create_directories(theirs);
  const fs::path db = theirs / "runs.sqlite";
  ASSERT_EQ(sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1", "--quiet",
                   "--out", db.string()})
                .status,
            0);
  ASSERT_EQ(::chown(theirs.c_str(), *other, *other), 0);
  ASSERT_EQ(::chown(db.c_str(), *other, *other), 0);
  const RunResult l = sonde({"runs", "list", db.string()});
  EXPECT_EQ(l.status, 0) << l.describe();
  EXPECT_NE(l.out.find("(node)"), std::string::npos) << l.out;
  const RunResult rep = sonde({"report", db.string(), "-o", (dir / "r.html").string()});
  EXPECT_EQ(rep.status, 0) << rep.describe();
  // SQLite would create runs.sqlite-wal and -shm (root's, read-write) in their directory.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(theirs)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{"runs.sqlite"});
  const RunResult w = sonde({"record", "--system", "--duration", "0.2", "--interval", "0.1",
                             "--quiet", "--out", db.string()});
  EXPECT_EQ(w.status, 2) << w.describe();
  EXPECT_NE(w.err.find("owned by"), std::string::npos) << w.err;
}

TEST(HostileInputs, RunsListOnADamagedDatabaseFails) {
  const fs::path dir = scratch_dir();
  const fs::path db = dir / "runs.sqlite";
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(sonde({"record", "--system", "--duration", "0.3", "--interval", "0.05", "--quiet",
                     "--out", db.string()})
                  .status,
              0);
  ASSERT_EQ(sonde({"runs", "list", db.string()}).status, 0);
  // Overwrite the page of the index that `runs list` counts ticks with.
  const RunResult root =
      run_command({"sqlite3", db.string(),
                   "SELECT rootpage FROM sqlite_schema WHERE name = 'sqlite_autoindex_samples_1'"});
  const RunResult psize = run_command({"sqlite3", db.string(), "PRAGMA page_size"});
  ASSERT_EQ(root.status, 0) << root.describe();
  const long page = std::stol(root.out), size = std::stol(psize.out);
  ASSERT_GT(page, 1);
  {
    std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp((page - 1) * size);
    const std::string garbage(static_cast<std::size_t>(size), 'Z');
    f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  const RunResult l = sonde({"runs", "list", db.string()});
  EXPECT_NE(l.status, 0) << l.describe();
  EXPECT_NE(l.err.find(db.string()), std::string::npos) << l.err;
  EXPECT_NE(l.err.find("corrupt"), std::string::npos) << l.err;
  const RunResult j = sonde({"runs", "list", "--json", db.string()});
  EXPECT_NE(j.status, 0) << j.describe();
}

TEST(HostileInputs, ReportOfAManifestNamingSystemFilesFailsWithoutQuotingThem) {
  const fs::path dir = scratch_dir();
  const fs::path run = stored_run(dir);
  std::ofstream(dir / "secret") << "TOP-SECRET-LINE\n";
  nlohmann::json m = read_json(run / "manifest.json");
  for (const std::string& target :
       {(dir / "secret").string(), std::string("../secret"), std::string("/dev/zero")}) {
    m["files"]["system"] = target;
    std::ofstream(run / "manifest.json", std::ios::trunc) << m.dump();
    const RunResult r = sonde({"report", run.string(), "-o", (dir / "r.html").string()});
    EXPECT_EQ(r.status, 2) << target << ": " << r.describe();
    EXPECT_EQ(r.err.find("TOP-SECRET"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace sonde::test
