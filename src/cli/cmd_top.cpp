// sonde top [--once] [--interval SECONDS] [--readonly] [--no-color] [--sort KEY] [--tree]
// [--group-by user|job|container] [--filter TEXT] [--user NAME] [--job ID] [--width COLUMNS]:
// the node's live view. The model and its text are src/views/top_*; the terminal front end is
// src/cli/top_tui.cpp; this file only parses the options.
#include <malloc.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/status_common.hpp"
#include "cli/top_tui.hpp"
#include "core/config.hpp"
#include "core/fs.hpp"
#include "core/trust.hpp"
#include "gpu/gpu.hpp"
#include "views/top_collect.hpp"
#include "views/top_render.hpp"

namespace sonde::cli {
namespace {

std::optional<top::SortKey> parse_sort_key(std::string name) {
  for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (auto k :
       {top::SortKey::pid, top::SortKey::user, top::SortKey::job, top::SortKey::container,
        top::SortKey::nspid, top::SortKey::cpu, top::SortKey::mem, top::SortKey::read,
        top::SortKey::write, top::SortKey::gpu_mem, top::SortKey::gpu_sm, top::SortKey::command}) {
    std::string n(top::sort_key_name(k));
    if (n == name) return k;
    n.erase(std::remove_if(n.begin(), n.end(), [](char c) { return c == '%' || c == '/'; }),
            n.end());
    if (n == name || (n + "S") == name || n.substr(0, n.size() - 1) == name) return k;
  }
  return std::nullopt;
}

}  // namespace

int cmd_top(int argc, char** argv) {
  CLI::App app{"the node's live view: CPUs, memory, GPUs and every process (keys: h)", "sonde top"};
  bool once = false, readonly = false, no_color = false;
  double interval_s = 1.0;
  std::string sort = "cpu", group = "none";
  top::ViewState view;
  std::optional<int> width;
  app.add_flag("--once", once, "print one screen as plain text and exit (for scripts)");
  app.add_option("--interval,-d", interval_s,
                 "seconds between refreshes; --once measures CPU and rates over it")
      ->capture_default_str();
  app.add_flag("--readonly", readonly, "no signals to processes (the k key is refused)");
  app.add_flag("--no-color", no_color, "no colours");
  app.add_option("--sort", sort,
                 "sort column: pid, user, job, container, nspid, cpu, mem, read, write, gpumem, "
                 "sm, command")
      ->capture_default_str();
  app.add_flag("--reverse", view.reverse, "the other direction of the sort column");
  app.add_flag("--tree", view.tree, "processes as a tree");
  app.add_option("--group-by", group, "one row per user, job or container")
      ->check(CLI::IsMember({"none", "user", "job", "container"}))
      ->capture_default_str();
  app.add_option("--filter", view.filter,
                 "only processes whose pid, user, job, container or "
                 "command line contains this text");
  app.add_option("--user", view.user_filter, "only this user's processes");
  app.add_option("--job", view.job_filter, "only this Slurm job's processes");
  app.add_option("--width", width,
                 "--once: columns of the text (default: the terminal's, else no limit)")
      ->check(CLI::Range(0, 100000));

  status::StatusSettings settings = status_settings("top");
  status::StatusHooks hooks(all_status_plugins(), settings);
  hooks.add_options(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return e.get_exit_code() == 0 ? kExitOk : kExitUsage;
  }
  const NumericRange& range = numeric_range("--watch");
  if (!(interval_s >= range.min && interval_s <= range.max)) {
    print_error(fmt::format("--interval: {}, got {}", range_expectation(range), interval_s));
    return kExitUsage;
  }
  interval_s = std::max(0.1, interval_s);
  if (auto k = parse_sort_key(sort)) {
    view.sort = *k;
  } else {
    print_error(
        fmt::format("--sort: '{}' is not a column (pid, user, job, container, nspid, cpu, "
                    "mem, read, write, gpumem, sm, command)",
                    sort));
    return kExitUsage;
  }
  view.group = group == "user"        ? top::GroupBy::user
               : group == "job"       ? top::GroupBy::job
               : group == "container" ? top::GroupBy::container
                                      : top::GroupBy::none;
  if (!once && (::isatty(STDIN_FILENO) != 1 || ::isatty(STDOUT_FILENO) != 1)) {
    print_error("top: stdin and stdout must be a terminal (for a script: sonde top --once)");
    return kExitUsage;
  }

  hooks.settings().color = false;  // the plugins' lines are drawn by top, in its colours
  hooks.settings().watch_interval_s = once ? 0 : interval_s;
  hooks.settings().cpu_interval_s = 0;  // top measures CPU over its own refresh interval
  // Top has the job and container of every process (read once per process, in columns of their
  // own): the built-in plugins need not read them again for each GPU process at each refresh.
  hooks.settings().skip_process_info = {"slurm", "container"};
  if (auto ok = hooks.configure(); !ok) {
    print_error(ok.error().message);
    return kExitUsage;
  }
  // Each refresh makes and frees the rows of every process (megabytes at 10,000 processes): keep
  // that memory in the heap instead of giving it back to the kernel and faulting it in again.
  ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 128 << 20);
  gpu::Gpus gpus = gpu::open_gpus();
  top::CollectOptions co;
  co.proc_root = hooks.settings().proc_root;
  if (const char* sys = program_env("SONDE_SYS_ROOT")) co.sys_root = sys;
  co.keep_open = open_file_budget(0);  // one stat file per process, kept open
  top::Collector collector(gpus, hooks, co);

  if (once) {
    // Two refreshes, `interval_s` apart: CPU, I/O and network figures are over that time.
    collector.collect();
    std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    const top::Snapshot snap = collector.collect();
    int cols = 0;
    struct winsize ws {};
    if (width)
      cols = *width;
    else if (::isatty(STDOUT_FILENO) == 1 && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0)
      cols = ws.ws_col;
    std::cout << top::render_text(snap, view, cols) << std::flush;
    return std::cout ? kExitOk : kExitFailure;
  }
  TopTuiOptions to;
  to.interval_s = interval_s;
  to.readonly = readonly;
  to.color = !no_color && auto_color();
  return run_top_tui(collector, view, to);
}

}  // namespace sonde::cli
