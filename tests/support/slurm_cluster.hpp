#pragma once
// Helpers for tests on the Slurm test cluster (tests/slurm/README.md): where it is, its client
// environment, its control script (tests/slurm/cluster), and srun --label output put back into
// each task's lines.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/built_paths.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test::slurm {

namespace fs = std::filesystem;

/// The cluster's state directory, from SONDE_SLURM_CLUSTER_DIR (set by ctest for the tests that
/// require the fixture slurm_cluster); nullopt when unset.
inline std::optional<fs::path> cluster_dir() {
  const char* dir = std::getenv("SONDE_SLURM_CLUSTER_DIR");
  if (!dir || !*dir) return std::nullopt;
  return fs::path(dir);
}

/// The exports of DIR/env (`export SLURM_CONF=...` lines) as RunOptions::env. Throws naming the
/// file when it is missing or has no SLURM_CONF (the cluster is not up).
inline std::vector<std::pair<std::string, std::string>> cluster_env(const fs::path& dir) {
  const fs::path file = dir / "env";
  std::ifstream in(file);
  if (!in)
    throw std::runtime_error(file.string() +
                             ": missing; the Slurm test cluster is not up (fixture slurm_cluster)");
  std::vector<std::pair<std::string, std::string>> env;
  const std::regex line_re(R"(^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$)");
  std::string line;
  std::smatch m;
  bool conf = false;
  while (std::getline(in, line)) {
    if (!std::regex_match(line, m, line_re)) continue;
    env.emplace_back(m[1], m[2]);
    conf = conf || m[1] == "SLURM_CONF";
  }
  if (!conf) throw std::runtime_error(file.string() + ": expected an 'export SLURM_CONF=...' line");
  return env;
}

/// Runs `tests/slurm/cluster SUBCOMMAND DIR ARGS...` (pids, stop-node, start-node, status).
inline RunResult cluster(const std::string& subcommand, const fs::path& dir,
                         const std::vector<std::string>& args = {}) {
  std::vector<std::string> argv{std::string(SONDE_SOURCE_DIR) + "/tests/slurm/cluster", subcommand,
                                dir.string()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_command(argv, {.env = {}, .unset_env = {}, .timeout_s = 120});
}

/// srun --label output (`K: ` before every piece) as each task's lines, in order. srun moves a
/// task's output in messages of at most 1024 bytes and labels each with its own newline
/// (tests/slurm/README.md, "Lines through srun --label"). This joins a task's consecutive
/// pieces: a line starting with '{' until it is a complete JSON value (right with or without
/// --unbuffered), another line while its pieces are exactly 1024 bytes (right without
/// --unbuffered); it drops the empty piece of a newline that came alone (so an empty line of a
/// task is dropped too). Lines without a label (srun's own) are ignored.
inline std::map<int, std::vector<std::string>> split_labelled(const std::string& out) {
  std::map<int, std::vector<std::string>> lines;
  std::map<int, std::string> pending;
  const std::regex label_re(R"(^ *([0-9]+): )");
  std::size_t pos = 0;
  while (pos < out.size()) {
    std::size_t end = out.find('\n', pos);
    if (end == std::string::npos) end = out.size();
    const std::string piece_line = out.substr(pos, end - pos);
    pos = end + 1;
    std::smatch m;
    if (!std::regex_search(piece_line, m, label_re)) continue;
    const int task = std::stoi(m[1]);
    const std::string piece = m.suffix();
    std::string& joined = pending[task];
    if (piece.empty() && joined.empty()) continue;  // a newline that came alone
    joined += piece;
    const bool complete =
        joined.front() == '{' ? nlohmann::json::accept(joined) : piece.size() < 1024;
    if (!complete) continue;
    lines[task].push_back(std::move(joined));
    joined.clear();
  }
  for (auto& [task, rest] : pending)
    if (!rest.empty()) lines[task].push_back(std::move(rest));
  return lines;
}

}  // namespace sonde::test::slurm
