// `sonde report RUN [-o FILE]` and the report written at the end of `sonde run --report`.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "sinks/run_data.hpp"
#include "views/report.hpp"

namespace sonde::cli {

Result<std::vector<ChartRule>> load_chart_rules(const std::vector<std::string>& files) {
  std::vector<ChartRule> rules = default_chart_rules();
  // The user's charts.yaml next to config.yaml, then the files given on the command line.
  std::vector<std::pair<std::string, bool>> sources;
  std::string xdg;
  if (const char* env = std::getenv("XDG_CONFIG_HOME"); env && *env)
    xdg = env;
  else if (const char* home = std::getenv("HOME"); home && *home)
    xdg = std::string(home) + "/.config";
  if (!xdg.empty()) sources.emplace_back(xdg + "/sonde/charts.yaml", false);
  for (const auto& f : files) sources.emplace_back(f, true);
  for (const auto& [path, required] : sources) {
    auto text = read_file(path);
    if (!text) {
      std::error_code ec;
      if (!required && !std::filesystem::exists(path, ec)) continue;
      return make_error(Errc::config, fmt::format("--charts: cannot read {}", path));
    }
    if (auto ok = merge_chart_rules(rules, *text, path); !ok) return ok.error();
  }
  return rules;
}

int write_run_report(const std::string& run_spec, const std::string& output,
                     const std::vector<std::string>& chart_files, bool compress,
                     const std::string& node) {
  auto rules = load_chart_rules(chart_files);
  if (!rules) {
    print_error(rules.error().message);
    return kExitUsage;
  }
  auto run = read_run(run_spec);
  if (!run) {
    print_error(run.error().message);
    return run.error().code == Errc::parse ? kExitUsage : kExitFailure;
  }
  if (!node.empty() && !is_aggregate_node_name(node)) {
    const RunData* n = run->find_node(node);
    if (!n) {
      std::string names;
      for (const auto& x : run->nodes) names += (names.empty() ? "" : ", ") + x.node;
      print_error(run->nodes.empty()
                      ? fmt::format("--node {}: {} is not a multi-node run", node, run_spec)
                      : fmt::format("--node {}: no such node in {} (its nodes: {}; or aggregate)",
                                    node, run_spec, names));
      return kExitUsage;
    }
    RunData one = *n;
    run = std::move(one);
  }
  std::string out = output;
  if (out.empty()) {
    std::error_code ec;
    out = std::filesystem::is_directory(run_spec, ec)
              ? (std::filesystem::path(run_spec) / "report.html").string()
              : std::string("report.html");
  }
  ReportOptions options;
  options.charts = std::move(*rules);
  options.compress = compress;
  if (auto ok = write_report(*run, options, out); !ok) {
    // A directory of another user's, a link at the file's name: refused, nothing written.
    print_error(ok.error().code == Errc::config && output.empty()
                    ? ok.error().message + " (choose where the report goes with -o FILE)"
                    : ok.error().message);
    return error_exit_status(ok.error());
  }
  std::cerr << "sonde: report written to " << out << "\n";
  // A run without rows (a command that was not started, a run killed at once): the page has no
  // chart to show, and the user should hear why before opening it.
  bool rows = false;
  for (const auto& t : run->levels) rows = rows || !t.rows.empty();
  if (!rows) {
    std::string why;
    if (run->manifest.contains("notes") && run->manifest["notes"].is_array())
      for (const auto& n : run->manifest["notes"])
        if (n.is_string()) why += (why.empty() ? "" : "; ") + n.get<std::string>();
    if (why.empty() && run->manifest.value("complete", true) == false)
      why = "the run did not finish (sonde was killed, or is still running)";
    std::cerr << "sonde: warning: " << run_spec << " has no rows"
              << (why.empty() ? std::string() : ": " + why) << "\n";
  }
  return kExitOk;
}

}  // namespace sonde::cli
