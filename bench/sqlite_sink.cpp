// The output's own CPU cost per tick, in one process: SqliteSink::write (one transaction per tick,
// one insert per level) against appending the same rows as CSV lines with one write() per level
// (what RunDirSink does). 16 columns per level. Built and run by bench/sqlite.
// Prints: sqlite us/tick, csv us/tick, database bytes/tick.
// Usage: sqlite_sink DIR TICKS LEVELS
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "sinks/format.hpp"
#include "sinks/sqlite.hpp"

using namespace sonde;

static double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sqlite_sink DIR TICKS LEVELS(1|3)\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int n = std::atoi(argv[2]);
  const std::vector<Level> levels =
      std::atoi(argv[3]) == 1 ? std::vector<Level>{Level::system}
                              : std::vector<Level>{Level::process, Level::user, Level::system};
  std::array<std::vector<std::string>, kNumLevels> cols;
  std::array<std::vector<double>, kNumLevels> rows;
  for (Level l : levels)
    for (int i = 0; i < 16; ++i) {
      cols[level_index(l)].push_back("c" + std::to_string(i));
      rows[level_index(l)].push_back(1.23456789 * i);
    }
  auto sink =
      SqliteSink::create(dir + "/sink.sqlite",
                         {{"interval", 0.05}, {"command", nlohmann::json::array()}}, levels, cols);
  if (!sink) {
    std::fprintf(stderr, "%s\n", sink.error().message.c_str());
    return 1;
  }
  const double c0 = cpu_s();
  for (int i = 0; i < n; ++i) sink.value()->write(100.0 + i, 1.7e9 + i, rows);
  const double c1 = cpu_s();
  sink.value().reset();  // closes the database: the WAL is checkpointed into the file
  struct stat st {};
  const double bytes_per_tick =
      ::stat((dir + "/sink.sqlite").c_str(), &st) == 0 ? static_cast<double>(st.st_size) / n : 0;
  std::array<int, kNumLevels> fds{};
  for (Level l : levels)
    fds[level_index(l)] = ::open((dir + "/perf_" + std::string(level_name(l)) + ".csv").c_str(),
                                 O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  std::string line;
  const double c2 = cpu_s();
  for (int i = 0; i < n; ++i)
    for (Level l : levels) {
      line.clear();
      append_number(line, 100.0 + i, "");
      line += ',';
      append_number(line, 1.7e9 + i, "");
      for (double v : rows[level_index(l)]) {
        line += ',';
        append_number(line, v, "");
      }
      line += '\n';
      if (::write(fds[level_index(l)], line.data(), line.size()) < 0) return 1;
    }
  const double c3 = cpu_s();
  std::printf("%.2f %.2f %.1f\n", 1e6 * (c1 - c0) / n, 1e6 * (c3 - c2) / n, bytes_per_tick);
  return 0;
}
