// One run for a multi-node Slurm job (docs/multinode.md), through the real binary with a fake
// launcher (tests/multinode/fake_srun: N local `sonde agent`s, their lines labeled as srun
// --label does) and fake squeue/scontrol (tests/multinode/fake_slurm). Every fake node sees the
// same machine, so a process of the job is seen by each of them: the aggregate is N times one
// node, and every aggregate row is checked against the nodes' own files.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sinks/run_data.hpp"
#include "support/multinode_fakes.hpp"
#include "support/run_helpers.hpp"

namespace sonde::test {
namespace {

RunOptions in_allocation(const std::string& job, int nodes,
                         std::vector<std::pair<std::string, std::string>> extra = {}) {
  RunOptions o;
  o.env = {
      {"SLURM_JOB_ID", job},
      {"SLURM_JOB_NUM_NODES", std::to_string(nodes)},
      {"SONDE_SRUN", kFakeSrun},
      {"PATH", kFakeSlurm + ":" + std::string(std::getenv("PATH") ? std::getenv("PATH") : "")}};
  for (auto& e : extra) o.env.push_back(std::move(e));
  o.unset_env = {"SLURM_NNODES", "SLURM_JOB_NODELIST"};
  o.timeout_s = 120;
  return o;
}

double cell(const CsvTable& t, std::size_t row, const std::string& col) {
  const std::string& s = t.rows[row][t.index(col)];
  return s.empty() ? std::nan("") : std::stod(s);
}

/// The node rows that may stand for the aggregate row at head wallclock `w` (the head's rule:
/// node wallclock − clock offset within (w − 1.5 I, w + 0.5 I]).
std::vector<std::size_t> candidates(const CsvTable& node, double offset, double w, double I) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < node.rows.size(); ++i) {
    const double aligned = cell(node, i, "wallclock") - offset;
    if (aligned > w - 1.5 * I - 1e-6 && aligned <= w + 0.5 * I + 1e-6) out.push_back(i);
  }
  return out;
}

struct Node {
  std::string name;
  CsvTable slurm;
  double offset = 0;
  double cpus = 0;
};

std::vector<Node> read_nodes(const fs::path& run, const nlohmann::json& manifest) {
  std::vector<Node> nodes;
  for (const auto& n : manifest["nodes"]) {
    Node node;
    node.name = n["name"];
    node.slurm = read_csv(run / "nodes" / node.name / "perf_slurm.csv");
    node.offset = n["clock_offset_s"].is_number() ? n["clock_offset_s"].get<double>() : 0;
    const auto& ni = n["node_info"];
    node.cpus = ni.contains("cpus_per_level")
                    ? ni["cpus_per_level"]["slurm"]["num_cpus"].get<double>()
                    : ni["num_system_cpus"].get<double>();
    nodes.push_back(std::move(node));
  }
  return nodes;
}

/// Rows of a query as text cells ("NULL" for NULL).
std::vector<std::vector<std::string>> query(const fs::path& db, const std::string& sql) {
  sqlite3* h = nullptr;
  std::vector<std::vector<std::string>> out;
  if (sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << "cannot open " << db << ": " << sqlite3_errmsg(h);
    sqlite3_close(h);
    return out;
  }
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << db << ": " << sql << ": " << sqlite3_errmsg(h);
  } else {
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const auto* t = sqlite3_column_text(st, i);
        row.emplace_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out.push_back(std::move(row));
    }
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

std::string scalar(const fs::path& db, const std::string& sql) {
  const auto rows = query(db, sql);
  return rows.empty() || rows[0].empty() ? "<none>" : rows[0][0];
}

/// The "tags" line of a summary text (the head's or `sonde runs show`'s), after `from`.
std::string tags_line(const std::string& text, std::size_t from = 0) {
  const auto at = text.find("  tags ", from);
  if (at == std::string::npos) return "<no tags line>";
  return text.substr(at, text.find('\n', at) - at);
}

/// Every aggregate row with all nodes is, for one choice of each node's candidate rows, exactly
/// their sum (num_procs, memory), weighted mean (cpu_util_avg) and max (cpu_util_max).
void check_aggregate_arithmetic(const CsvTable& agg, const std::vector<Node>& nodes, double I,
                                std::size_t& checked) {
  for (std::size_t r = 0; r < agg.rows.size(); ++r) {
    if (cell(agg, r, "nodes") != static_cast<double>(nodes.size())) continue;
    const double w = cell(agg, r, "wallclock");
    std::vector<std::vector<std::size_t>> cand;
    for (const auto& n : nodes) cand.push_back(candidates(n.slurm, n.offset, w, I));
    bool found = false;
    std::vector<std::size_t> pick(nodes.size(), 0);
    std::function<void(std::size_t)> search = [&](std::size_t k) {
      if (found) return;
      if (k == nodes.size()) {
        double procs = 0, mem = 0, cpu_w = 0, cpus = 0, cpu_max = -1;
        for (std::size_t i = 0; i < nodes.size(); ++i) {
          const auto& t = nodes[i].slurm;
          procs += cell(t, pick[i], "num_procs");
          mem += cell(t, pick[i], "memory");
          cpu_w += cell(t, pick[i], "cpu_util_avg") * nodes[i].cpus;
          cpus += nodes[i].cpus;
          cpu_max = std::max(cpu_max, cell(t, pick[i], "cpu_util_max"));
        }
        auto near = [](double a, double b) {
          return std::fabs(a - b) <= 1e-6 * (1 + std::fabs(b));
        };
        found = near(cell(agg, r, "num_procs"), procs) && near(cell(agg, r, "memory"), mem) &&
                near(cell(agg, r, "cpu_util_avg"), cpu_w / cpus) &&
                near(cell(agg, r, "cpu_util_max"), cpu_max);
        return;
      }
      for (std::size_t c : cand[k]) {
        pick[k] = c;
        search(k + 1);
      }
    };
    search(0);
    EXPECT_TRUE(found) << "aggregate row " << r << " (wallclock " << w
                       << ") is not the sum of the nodes' rows";
    ++checked;
  }
}

TEST(Multinode, AggregateIsTheNodesSumAndEveryNodeSeesTheJob) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir();
  const RunResult r =
      run_command({sonde_binary(), "run", "--slurm", "--interval", "0.5", "--out",
                   (dir / "out").string(), "--", workload_binary(), "burn", "4"},
                  in_allocation(job, 3, {{"SONDE_WORKLOAD_RUSAGE", (dir / "rusage").string()}}));
  ASSERT_EQ(r.status, 0) << r.describe();
  // Not run_dir(): its invariants read the aggregate levels with the top-level node_info (the
  // head node's CPUs) until they use the readers' run_node_info (the nodes' sum).
  const fs::path run = find_run_dir(dir / "out");
  const nlohmann::json m = read_json(run / "manifest.json");
  ASSERT_TRUE(m.contains("multinode")) << m.dump(2);
  EXPECT_EQ(m["multinode"]["aggregate_num_cpus"]["slurm"].get<double>(),
            m["node_info"]["cpus_per_level"]["process"]["num_cpus"].get<double>() * 3)
      << "the aggregate's 100 %: every node's CPUs";
  EXPECT_EQ(m["multinode"]["job"], job);
  EXPECT_EQ(m["multinode"]["grid"], "head");
  EXPECT_EQ(m["multinode"]["launcher"][0], kFakeSrun);
  EXPECT_EQ(m["multinode"]["aggregate_levels"], nlohmann::json::array({"slurm", "system"}));
  EXPECT_TRUE(m["complete"].get<bool>());
  ASSERT_EQ(m["nodes"].size(), 3u);
  std::vector<std::string> names;
  for (const auto& n : m["nodes"]) {
    names.push_back(n["name"]);
    EXPECT_EQ(n["status"], "complete") << n.dump();
    EXPECT_EQ(n["reason"], "");
    EXPECT_GE(n["rows"].get<int>(), 5) << n.dump();
    EXPECT_TRUE(n["clock_offset_s"].is_number());
    EXPECT_LT(std::fabs(n["clock_offset_s"].get<double>()), 0.5) << "one machine, one clock";
    EXPECT_TRUE(n["node_info"].contains("num_system_cpus"));
    EXPECT_TRUE(fs::exists(run / "nodes" / n["name"].get<std::string>() / "perf_system.csv"));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"n1", "n2", "n3"}));
  // The head's own command, as in a single-node run.
  // The head's own command, as in a single-node run: its rows hold the burner's CPU time, against
  // the burner's own rusage (however much of a core a loaded machine gave it).
  const CsvTable process = read_csv(run / "perf_process.csv");
  ASSERT_GE(process.rows.size(), 5u);
  const double cpus = m["node_info"]["cpus_per_level"]["process"]["num_cpus"].get<double>();
  const std::vector<double> times = process.numbers("time"), util = process.numbers("cpu_util_avg");
  double rows_cpu = 0;
  for (std::size_t i = 1; i < times.size(); ++i)
    if (std::isfinite(util[i])) rows_cpu += util[i] / 100 * cpus * (times[i] - times[i - 1]);
  if (std::isfinite(util[0])) rows_cpu += util[0] / 100 * cpus * 0.5;  // the first interval
  const double truth = workload_rusage_cpu(dir / "rusage");
  EXPECT_GT(truth, 0.1) << "the burner wrote its rusage";
  EXPECT_NEAR(rows_cpu, truth, 0.1 * truth + 0.1) << "process rows against the burner's rusage";

  const CsvTable agg = read_csv(run / "perf_slurm.csv");
  for (const char* c : {"time", "wallclock", "cpu_util_avg", "cpu_util_min", "cpu_util_max",
                        "memory", "num_procs", "cpu_util_node_min", "cpu_util_node_max", "nodes"})
    EXPECT_TRUE(agg.has_column(c)) << c;
  EXPECT_TRUE(agg.numbered_columns("cpu_util_").empty()) << "per-device columns stay per node";
  ASSERT_GE(agg.rows.size(), 5u);
  EXPECT_TRUE(m["levels"].get<std::vector<std::string>>() ==
              (std::vector<std::string>{"process", "slurm", "system"}))
      << m["levels"].dump();
  EXPECT_EQ(m["files"]["slurm"], "perf_slurm.csv");

  const std::vector<Node> nodes = read_nodes(run, m);
  std::size_t checked = 0;
  check_aggregate_arithmetic(agg, nodes, 0.5, checked);
  EXPECT_GE(checked, 4u) << "aggregate rows with all 3 nodes";

  // Every node sees the burning command (one core), so the job's aggregate is three cores.
  std::vector<double> node_cores;
  for (const auto& n : nodes) {
    const auto cpu = n.slurm.numbers("cpu_util_avg");
    const auto t = n.slurm.numbers("time");
    node_cores.push_back(integrate(t, cpu) / 100 * n.cpus);  // CPU seconds seen on the node
  }
  for (double c : node_cores) {
    EXPECT_GT(c, 2.0) << "each node saw the 4 s burn";
    EXPECT_NEAR(c, node_cores[0], 0.15 * node_cores[0] + 0.2) << "all nodes see the same job";
  }
  double total_cpus = 0;
  for (const auto& n : nodes) total_cpus += n.cpus;
  const double agg_cpu_s =
      integrate(agg.numbers("time"), agg.numbers("cpu_util_avg")) / 100 * total_cpus;
  const double sum_nodes = node_cores[0] + node_cores[1] + node_cores[2];
  EXPECT_NEAR(agg_cpu_s, sum_nodes, 0.2 * sum_nodes) << "the aggregate sums the nodes";
  // The summary on stderr: the aggregate, then one line per node.
  const auto at = r.err.find("sonde multi-node summary");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string tail = r.err.substr(at);
  EXPECT_NE(tail.find("all nodes"), std::string::npos) << tail;
  for (const char* n : {"\n  n1 ", "\n  n2 ", "\n  n3 "})
    EXPECT_NE(tail.find(n), std::string::npos) << tail;
}

TEST(Multinode, AnAgentKilledMidRunIsLostAndTheRunGoesOn) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir();
  const fs::path pids = dir / "pids";
  BackgroundProcess head({sonde_binary(), "run", "--slurm", "--interval", "0.3", "--out",
                          (dir / "out").string(), "--", workload_binary(), "hold", "32", "8"},
                         in_allocation(job, 3, {{"FAKE_SRUN_PIDS", pids.string()}}));
  for (int i = 0; i < 100 && !fs::exists(pids); ++i) sleep_for(0.1);
  ASSERT_TRUE(fs::exists(pids)) << head.err();
  // Killed once the head has rows from n2 (waited for, not slept: under a sanitizer on a busy
  // machine the agents start slower).
  const auto n2_rows = [&] {
    std::ifstream csv(dir / "out" / "nodes" / "n2" / "perf_slurm.csv");
    std::string line;
    int lines = 0;
    while (std::getline(csv, line)) ++lines;
    return lines >= 3;
  };
  for (int i = 0; i < 300 && !n2_rows(); ++i) sleep_for(0.1);
  ASSERT_TRUE(n2_rows()) << "no rows from n2 in 30 s: " << head.err();
  std::ifstream in(pids);
  int task = 0, pid = 0, victim = 0;
  while (in >> task >> pid)
    if (task == 1) victim = pid;
  ASSERT_GT(victim, 0);
  const double killed_at = static_cast<double>(std::time(nullptr));
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto status = head.wait(60);
  ASSERT_TRUE(status.has_value()) << head.err();
  EXPECT_EQ(*status, 0) << "the command's status: " << head.err();
  EXPECT_NE(head.err().find("node n2 (task 1) lost"), std::string::npos) << head.err();

  const fs::path run = find_run_dir(dir / "out");
  const nlohmann::json m = read_json(run / "manifest.json");
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& n : m["nodes"]) by_name[n["name"]] = n;
  ASSERT_EQ(by_name.size(), 3u);
  EXPECT_EQ(by_name["n1"]["status"], "complete");
  EXPECT_EQ(by_name["n3"]["status"], "complete");
  EXPECT_EQ(by_name["n2"]["status"], "lost") << by_name["n2"].dump();
  EXPECT_NE(by_name["n2"]["reason"].get<std::string>().find("no line for"), std::string::npos)
      << by_name["n2"].dump();
  const double lost_at = by_name["n2"]["status_wallclock"].get<double>();
  EXPECT_GE(lost_at, killed_at - 1);
  // Its rows stop; the others go on to the end.
  const double n2_last = by_name["n2"]["last_wallclock"].get<double>();
  EXPECT_LT(n2_last, killed_at + 1.5);
  EXPECT_GT(by_name["n1"]["last_wallclock"].get<double>(), n2_last + 1.5);
  const CsvTable n2 =
      read_csv(run / "nodes" / "n2" / "perf_slurm.csv", {.allow_incomplete_last_line = true});
  EXPECT_LE(cell(n2, n2.rows.size() - 1, "wallclock"), n2_last + 1e-3);
  // The aggregate covers 3 nodes before, 2 after the loss.
  const CsvTable agg = read_csv(run / "perf_slurm.csv");
  int three = 0, two_after = 0;
  for (std::size_t i = 0; i < agg.rows.size(); ++i) {
    const double n = cell(agg, i, "nodes"), w = cell(agg, i, "wallclock");
    if (n == 3) {
      ++three;
      EXPECT_LT(w, lost_at + 1e-3) << "n2 counted after it was lost";
    }
    if (w > lost_at + 0.01) {
      EXPECT_EQ(n, 2) << "row at " << w;
      ++two_after;
    }
  }
  EXPECT_GE(three, 2);
  EXPECT_GE(two_after, 3);
  // The local command is recorded to its end.
  const CsvTable process = read_csv(run / "perf_process.csv");
  EXPECT_GE(process.rows.size(), 12u);
}

TEST(Multinode, SplitLinesAreReassembledAndGarbageIsSkipped) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir();
  const RunResult r =
      run_command({sonde_binary(), "run", "--slurm", "--interval", "0.3", "--out",
                   (dir / "out").string(), "--", workload_binary(), "sleep", "2"},
                  in_allocation(job, 2, {{"FAKE_SRUN_SPLIT", "97"}, {"FAKE_SRUN_GARBAGE", "1"}}));
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = find_run_dir(dir / "out");
  const nlohmann::json m = read_json(run / "manifest.json");
  EXPECT_GT(m["multinode"]["reassembled_lines"].get<int>(), 10) << m["multinode"].dump();
  EXPECT_GE(m["multinode"]["garbage_lines"].get<int>(), 3) << m["multinode"].dump();
  for (const auto& n : m["nodes"]) {
    EXPECT_EQ(n["status"], "complete") << n.dump();
    EXPECT_GE(n["rows"].get<int>(), 4);
    const CsvTable t = read_csv(run / "nodes" / n["name"].get<std::string>() / "perf_system.csv");
    EXPECT_EQ(t.rows.size(), n["rows"].get<std::size_t>());
  }
  const CsvTable agg = read_csv(run / "perf_system.csv");
  EXPECT_GE(agg.rows.size(), 4u);
}

TEST(Multinode, ClockOffsetsAreEstimatedAndUsedToAlign) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir();
  const RunResult r = run_command({sonde_binary(), "run", "--slurm", "--interval", "0.5", "--out",
                                   (dir / "out").string(), "--", workload_binary(), "sleep", "3"},
                                  in_allocation(job, 3, {{"FAKE_SRUN_SKEW", "1:5"}}));
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = find_run_dir(dir / "out");
  const nlohmann::json m = read_json(run / "manifest.json");
  std::map<std::string, double> offset;
  for (const auto& n : m["nodes"]) offset[n["name"]] = n["clock_offset_s"].get<double>();
  EXPECT_NEAR(offset["n2"], 5.0, 0.3) << "node n2's clock is 5 s ahead";
  EXPECT_NEAR(offset["n1"], 0.0, 0.3);
  EXPECT_NEAR(offset["n3"], 0.0, 0.3);
  // Aligned by its offset, n2 still contributes to the head's rows.
  const CsvTable agg = read_csv(run / "perf_slurm.csv");
  int three = 0;
  for (std::size_t i = 0; i < agg.rows.size(); ++i) three += cell(agg, i, "nodes") == 3;
  EXPECT_GE(three, 3);
  const std::vector<Node> nodes = read_nodes(run, m);
  std::size_t checked = 0;
  check_aggregate_arithmetic(agg, nodes, 0.5, checked);
  EXPECT_GE(checked, 3u);
  // Nothing converted in the node's own file: its own (skewed) wallclock.
  const CsvTable n2 = read_csv(run / "nodes" / "n2" / "perf_slurm.csv");
  EXPECT_GT(cell(n2, 0, "wallclock"), cell(agg, 0, "wallclock") + 3);
}

TEST(Multinode, RefusedWithExitTwoAndNothingStarted) {
  const fs::path dir = scratch_dir();
  {  // Not inside an allocation.
    RunOptions o = in_allocation(job_id(), 2);
    o.unset_env.push_back("SLURM_JOB_ID");
    o.env.erase(o.env.begin());
    const RunResult r = run_command({sonde_binary(), "run", "--slurm", "--out",
                                     (dir / "a").string(), "--", "touch", (dir / "ran").string()},
                                    o);
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(r.err.find("not inside a Slurm allocation"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  {  // The launcher is missing.
    RunOptions o = in_allocation(job_id(), 2);
    o.env[2].second = "/nonexistent/srun";
    const RunResult r = run_command({sonde_binary(), "run", "--slurm", "--out",
                                     (dir / "b").string(), "--", "touch", (dir / "ran").string()},
                                    o);
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(r.err.find("'/nonexistent/srun' was not found"), std::string::npos) << r.err;
  }
  {  // srun missing from PATH.
    RunOptions o = in_allocation(job_id(), 2);
    o.env.erase(o.env.begin() + 2);
    o.unset_env.push_back("SONDE_SRUN");
    o.env.back().second = kFakeSlurm;  // PATH: no srun there
    const RunResult r = run_command(
        {sonde_binary(), "run", "--slurm", "--out", (dir / "c").string(), "--", "/bin/true"}, o);
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(r.err.find("'srun' was not found on PATH"), std::string::npos) << r.err;
  }
  {  // A job that does not exist.
    const RunResult r = run_command(
        {sonde_binary(), "record", "--slurm-job", "99999999", "--out", (dir / "d").string()},
        in_allocation(job_id(), 1, {{"FAKE_SQUEUE_RC", "1"}}));
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(
        r.err.find("no such job, or it has ended (squeue: slurm_load_jobs error: Invalid job id"),
        std::string::npos)
        << r.err;
  }
  {  // squeue that does not answer (slurmctld down): refused at its deadline, not hung.
    const RunResult r = run_command(
        {sonde_binary(), "record", "--slurm-job", "123", "--out", (dir / "h").string()},
        in_allocation(job_id(), 1,
                      {{"FAKE_SQUEUE_HANG", "1"}, {"SONDE_SLURM_COMMAND_TIMEOUT", "0.5"}}));
    EXPECT_EQ(r.status, 1) << r.describe();
    EXPECT_NE(r.err.find("squeue did not answer within 0.5 s"), std::string::npos) << r.err;
  }
  {  // A job that is not running.
    const RunResult r =
        run_command({sonde_binary(), "record", "--slurm-job", "123", "--out", (dir / "e").string()},
                    in_allocation(job_id(), 1, {{"FAKE_SQUEUE_OUT", "PENDING|root|"}}));
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(r.err.find("the job is PENDING, not RUNNING"), std::string::npos) << r.err;
  }
  {  // Not a job id.
    const RunResult r = run_command(
        {sonde_binary(), "record", "--slurm-job", "12;rm", "--out", (dir / "f").string()},
        in_allocation(job_id(), 1));
    EXPECT_EQ(r.status, 2) << r.describe();
  }
  if (::getuid() != 0) {  // Another user's job (root may record any).
    const RunResult r =
        run_command({sonde_binary(), "record", "--slurm-job", "123", "--out", (dir / "g").string()},
                    in_allocation(job_id(), 1, {{"FAKE_SQUEUE_OUT", "RUNNING|someone-else|n1"}}));
    EXPECT_EQ(r.status, 2) << r.describe();
    EXPECT_NE(r.err.find("not yours"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(dir / "ran")) << "a refused run started its command";
  for (const char* d : {"a", "b", "c", "d", "e", "f", "g", "h"})
    EXPECT_FALSE(fs::exists(dir / d)) << "a refused run created its directory " << d;
}

TEST(Multinode, RecordARunningJobFromOutside) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir();
  // A process of the job, as a batch script's would be.
  RunOptions job_env;
  job_env.env = {{"SLURM_JOB_ID", job}};
  BackgroundProcess member({workload_binary(), "outsider", "200", "30"}, job_env);
  ASSERT_EQ(member.read_line(30), std::optional<std::string>("ready")) << member.err();
  RunOptions o = in_allocation(
      job, 2, {{"FAKE_SQUEUE_OUT", "RUNNING|root|n[1-2]"}, {"FAKE_HOSTNAMES", "n1,n2"}});
  // From a login node: not inside the job.
  o.unset_env.push_back("SLURM_JOB_ID");
  o.env.erase(o.env.begin());
  if (::getuid() != 0) return;  // the fake squeue says the job is root's
  const RunResult r = run_command({sonde_binary(), "record", "--slurm-job", job, "--interval",
                                   "0.3", "--duration", "2", "--out", (dir / "out").string()},
                                  o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path run = find_run_dir(dir / "out");
  const nlohmann::json m = read_json(run / "manifest.json");
  EXPECT_EQ(m["mode"], "record");
  EXPECT_TRUE(m["complete"].get<bool>());
  ASSERT_EQ(m["nodes"].size(), 2u);
  for (const auto& n : m["nodes"]) {
    EXPECT_EQ(n["status"], "complete") << n.dump();
    EXPECT_FALSE(n["head"].get<bool>()) << "the login node is none of the job's";
  }
  const CsvTable agg = read_csv(run / "perf_slurm.csv");
  ASSERT_GE(agg.rows.size(), 4u);
  // Both fake nodes see the job's 200 MiB: 0.39 GiB in the aggregate.
  const auto mem = agg.numbers("memory");
  for (std::size_t i = 0; i < agg.rows.size(); ++i)
    if (cell(agg, i, "nodes") == 2) {
      EXPECT_NEAR(mem[i], 2 * 200.0 / 1024, 0.05) << "row " << i;
    }
  EXPECT_FALSE(fs::exists(run / "perf_process.csv"));
  EXPECT_NE(r.err.find("sonde multi-node summary (job " + job + ", 2 nodes"), std::string::npos)
      << r.err;
}

TEST(Multinode, RunIntoSqliteStoresTheNodesAndTheAggregate) {
  const std::string job = job_id();
  const fs::path dir = scratch_dir("multinode_sqlite_run");
  const fs::path db = dir / "runs.sqlite";
  // n1 and n2 see the job burn every CPU; n3's agent records another job (no process): idle.
  const std::string burn = std::string(workload_binary()) + " burn 4";
  const RunResult r =
      run_command({sonde_binary(), "run", "--slurm", "--interval", "0.5", "--out", db.string(),
                   "--", "sh", "-c", "for i in $(seq $(nproc)); do " + burn + " & done; wait"},
                  in_allocation(job, 3, {{"FAKE_SRUN_JOB", "2:" + job_id()}}));
  ASSERT_EQ(r.status, 0) << r.describe();
  ASSERT_EQ(scalar(db, "SELECT count(*) FROM runs"), "1");
  EXPECT_EQ(scalar(db, "SELECT complete FROM runs"), "1");
  const nlohmann::json m = nlohmann::json::parse(scalar(db, "SELECT manifest FROM runs"));
  EXPECT_EQ(m["mode"], "run --slurm");
  EXPECT_TRUE(m["complete"].get<bool>());
  EXPECT_EQ(m["multinode"]["job"], job);
  ASSERT_EQ(m["nodes"].size(), 3u) << m.dump(2);
  EXPECT_TRUE(m["levels"].get<std::vector<std::string>>() ==
              (std::vector<std::string>{"process", "slurm", "system"}))
      << m["levels"].dump();
  // Rows: the head's command and the aggregate as node '', each node's own with its name.
  EXPECT_EQ(scalar(db,
                   "SELECT group_concat(n) FROM (SELECT DISTINCT node AS n FROM samples "
                   "ORDER BY n)"),
            ",n1,n2,n3");
  EXPECT_EQ(scalar(db,
                   "SELECT group_concat(l) FROM (SELECT DISTINCT level AS l FROM samples "
                   "WHERE node = '' ORDER BY l)"),
            "process,slurm,system");
  EXPECT_EQ(scalar(db, "SELECT count(*) FROM samples WHERE node <> '' AND level = 'process'"), "0");
  for (const auto& n : m["nodes"]) {
    const std::string name = n["name"];
    EXPECT_EQ(n["status"], "complete") << n.dump();
    EXPECT_EQ(
        scalar(db, "SELECT count(*) FROM samples WHERE node = '" + name + "' AND level = 'slurm'"),
        std::to_string(n["rows"].get<int>()))
        << name << ": the manifest's rows are the stored rows";
    EXPECT_EQ(scalar(db, "SELECT count(*) FROM columns WHERE node = '" + name +
                             "' AND level = 'slurm' AND name = 'cpu_util_avg'"),
              "1");
  }
  EXPECT_EQ(scalar(db,
                   "SELECT count(*) FROM columns WHERE node = '' AND level = 'slurm' AND "
                   "name IN ('cpu_util_node_min', 'cpu_util_node_max', 'nodes')"),
            "3");
  EXPECT_GE(std::stoi(scalar(db,
                             "SELECT count(*) FROM samples WHERE node = '' AND level = "
                             "'slurm'")),
            5);

  // `sonde runs show`: the nodes, and the same tags as the head printed at the end of the run.
  const RunResult show = run_command({sonde_binary(), "runs", "show", db.string(), "1"});
  ASSERT_EQ(show.status, 0) << show.describe();
  EXPECT_NE(show.out.find("nodes (3, figures of their slurm level):"), std::string::npos)
      << show.out;
  for (const char* n : {"\n  n1", "\n  n2", "\n  n3"})
    EXPECT_NE(show.out.find(n), std::string::npos) << show.out;
  const auto head_at = r.err.find("sonde multi-node summary");
  ASSERT_NE(head_at, std::string::npos) << r.err;
  const std::string head_tags = tags_line(r.err, head_at);
  const bool live = head_tags.find("node-imbalance") != std::string::npos;
  // The stored summary's tags (the text part of `runs show`, before its manifest).
  const std::string show_tags = tags_line(show.out);
  const bool stored = show_tags.find("node-imbalance") != std::string::npos;
  EXPECT_EQ(live, stored) << "head: " << head_tags << "\nruns show:\n" << show.out;
  EXPECT_EQ(tags_line(r.err).find("node-imbalance") != std::string::npos, live)
      << "the command's summary has the job's tags: " << r.err;
  EXPECT_NE(r.err.find("nodes (3, figures of their slurm level):", head_at), std::string::npos)
      << r.err;

  // Exported: the multi-node run directory, whose aggregate is the sum of its nodes' rows.
  const fs::path out = dir / "export";
  const RunResult ex =
      run_command({sonde_binary(), "runs", "export", db.string(), "1", "-o", out.string()});
  ASSERT_EQ(ex.status, 0) << ex.describe();
  auto back = read_run_dir(out.string());
  ASSERT_TRUE(back) << back.error().message;
  ASSERT_EQ(back->nodes.size(), 3u);
  const nlohmann::json em = read_json(out / "manifest.json");
  const std::vector<Node> nodes = read_nodes(out, em);
  std::size_t checked = 0;
  check_aggregate_arithmetic(read_csv(out / "perf_slurm.csv"), nodes, 0.5, checked);
  EXPECT_GE(checked, 4u) << "aggregate rows with all 3 nodes";
  EXPECT_GE(read_csv(out / "perf_process.csv").rows.size(), 5u);
  // The imbalance the rule sees in the stored rows (busiest node above 50 % for half its rows,
  // another below a quarter of it): then both the head and `runs show` said so. The rule's means
  // are time-weighted and this one is not, so the busiest node is any within 20 % of the top
  // mean, and the verdict counts only when it holds for every such node.
  struct NodeCpu {
    double mean = 0, busy_share = 0;
  };
  std::vector<NodeCpu> node_cpu;
  for (const auto& n : nodes) {
    std::size_t busy = 0, measured = 0;
    double sum = 0;
    for (double v : n.slurm.numbers("cpu_util_avg")) {
      if (!std::isfinite(v)) continue;
      sum += v;
      ++measured;
      busy += v > 50;
    }
    if (measured == 0) continue;
    const double count = static_cast<double>(measured);
    node_cpu.push_back({sum / count, static_cast<double>(busy) / count});
  }
  double busiest = 0, idlest = 1e9;
  for (const auto& n : node_cpu) {
    busiest = std::max(busiest, n.mean);
    idlest = std::min(idlest, n.mean);
  }
  // Whether every candidate for the busiest node has `pred`.
  auto every_busiest = [&](auto pred) {
    for (const auto& n : node_cpu)
      if (n.mean >= 0.8 * busiest && !pred(n)) return false;
    return true;
  };
  EXPECT_LT(idlest, 5.0) << "n3 sees none of the job's processes";
  if (every_busiest([](const NodeCpu& n) { return n.busy_share >= 0.6; }) &&
      idlest < 0.2 * busiest) {
    EXPECT_TRUE(live && stored) << head_tags << "\n" << show.out;
  }

  // The report of the stored run, and of one node.
  const RunResult rep = run_command({sonde_binary(), "report", db.string() + "#1", "--node", "n3",
                                     "-o", (dir / "n3.html").string(), "--uncompressed"});
  ASSERT_EQ(rep.status, 0) << rep.describe();
  EXPECT_NE(read_file(dir / "n3.html").find("\"host\":\"n3\""), std::string::npos);
  const RunResult all = run_command({sonde_binary(), "report", db.string() + "#1", "-o",
                                     (dir / "all.html").string(), "--uncompressed"});
  ASSERT_EQ(all.status, 0) << all.describe();
  // The report's tag: the stored summary's rule on the stored rows, as `runs show` said above. A
  // verdict recomputed here from plain means is only an estimate of the rule's time-weighted
  // ones, and on a loaded machine the two fall on different sides of its edge; the rule itself
  // is checked on exact rows by the unit tests (Tags.*). The page's style sheet names every tag, so
  // the tag is looked for in its embedded summary.
  const nlohmann::json data = report_data(dir / "all.html");
  ASSERT_TRUE(data.is_object()) << "the page embeds its data";
  const nlohmann::json tags = data["summary"].value("tags", nlohmann::json::array());
  const bool in_report = std::find(tags.begin(), tags.end(), "node-imbalance") != tags.end();
  EXPECT_EQ(in_report, stored) << "report and `runs show` disagree; report's tags " << tags.dump()
                               << "; runs show:\n"
                               << show.out;
}

TEST(Multinode, RecordARunningJobIntoSqlite) {
  if (::getuid() != 0) GTEST_SKIP() << "the fake squeue says the job is root's";
  const std::string job = job_id();
  const fs::path dir = scratch_dir("multinode_sqlite_record");
  const fs::path db = dir / "runs.sqlite";
  RunOptions job_env;
  job_env.env = {{"SLURM_JOB_ID", job}};
  BackgroundProcess member({workload_binary(), "outsider", "200", "30"}, job_env);
  ASSERT_EQ(member.read_line(30), std::optional<std::string>("ready")) << member.err();
  RunOptions o = in_allocation(
      job, 2, {{"FAKE_SQUEUE_OUT", "RUNNING|root|n[1-2]"}, {"FAKE_HOSTNAMES", "n1,n2"}});
  o.unset_env.push_back("SLURM_JOB_ID");
  o.env.erase(o.env.begin());
  // --format sqlite: the name need not say so.
  const RunResult r =
      run_command({sonde_binary(), "record", "--slurm-job", job, "--interval", "0.3", "--duration",
                   "2", "--format", "sqlite", "--out", (dir / "runs.db").string()},
                  o);
  ASSERT_EQ(r.status, 0) << r.describe();
  const fs::path file = dir / "runs.db";
  EXPECT_EQ(scalar(file, "SELECT complete FROM runs"), "1");
  const nlohmann::json m = nlohmann::json::parse(scalar(file, "SELECT manifest FROM runs"));
  EXPECT_EQ(m["mode"], "record");
  ASSERT_EQ(m["nodes"].size(), 2u);
  EXPECT_EQ(m["summary"]["job"], job);
  EXPECT_EQ(scalar(file, "SELECT count(*) FROM samples WHERE node = '' AND level = 'process'"),
            "0");
  // Both fake nodes see the job's 200 MiB: 0.39 GiB in the aggregate.
  const auto agg =
      query(file, "SELECT s.vals FROM samples s WHERE s.node = '' AND s.level = 'slurm'");
  ASSERT_GE(agg.size(), 4u);
  const RunResult ex = run_command(
      {sonde_binary(), "runs", "export", file.string(), "1", "-o", (dir / "export").string()});
  ASSERT_EQ(ex.status, 0) << ex.describe();
  const CsvTable t = read_csv(dir / "export" / "perf_slurm.csv");
  std::size_t full = 0;
  for (std::size_t i = 0; i < t.rows.size(); ++i)
    if (cell(t, i, "nodes") == 2) {
      ++full;
      EXPECT_NEAR(cell(t, i, "memory"), 2 * 200.0 / 1024, 0.05) << "row " << i;
    }
  EXPECT_GE(full, 3u);
  EXPECT_TRUE(fs::is_regular_file(dir / "export" / "nodes" / "n2" / "perf_slurm.csv"));
  EXPECT_NE(r.err.find("run " + file.string() + "#1"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(db));
}

}  // namespace
}  // namespace sonde::test
