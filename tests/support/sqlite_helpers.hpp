#pragma once
// A temporary directory and two one-statement helpers over a second SQLite connection, for the
// unit tests that check what the SQLite sinks wrote (tests/unit/*sqlite*_test.cpp).
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

#include <gtest/gtest.h>
#include <sqlite3.h>

namespace sonde::test {

/// A fresh directory under $TMPDIR, removed with everything in it at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "sonde-test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

/// A query's first value as text through a separate connection: "NULL", "<none>" (no row) or
/// "<error>" (the failure is reported to gtest).
inline std::string query(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  std::string out = "<error>";
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &s, nullptr) == SQLITE_OK) {
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
      out = sqlite3_column_text(s, 0) ? reinterpret_cast<const char*>(sqlite3_column_text(s, 0))
                                      : "NULL";
    else if (rc == SQLITE_DONE)
      out = "<none>";
  } else {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(h);
  }
  sqlite3_finalize(s);
  sqlite3_close(h);
  return out;
}

/// Runs `sql` through a separate connection (creating the file if needed).
inline void exec(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr),
            SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << sql << ": " << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(h);
}

}  // namespace sonde::test
