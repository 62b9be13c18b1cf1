// sonde status [--json] [-i [SECONDS]]  and  sonde gpustat [gpustat's flags] (also as a link
// named `gpustat`): one query of the node through the status hooks, printed once or redrawn in
// place on the alternate screen.
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"
#include "cli/status_common.hpp"
#include "core/fs.hpp"
#include "core/json_text.hpp"
#include "core/trust.hpp"
#include "gpu/gpu.hpp"
#include "plugins/plugins.hpp"
#include "views/status.hpp"
#include "views/status_hooks.hpp"

namespace sonde::cli {
namespace {

// ---- watch mode: signals and the terminal ----

std::atomic<bool> g_quit{false};
std::atomic<bool> g_resized{false};
std::atomic<int> g_wake_fd{-1};  // the write end of watch()'s wake pipe, for the handler

void on_signal(int sig) {
  if (sig == SIGWINCH)
    g_resized = true;
  else
    g_quit = true;
  const int saved = errno;
  if (const int fd = g_wake_fd.load(); fd >= 0) {
    const char b = 1;
    [[maybe_unused]] auto n = ::write(fd, &b, 1);
  }
  errno = saved;
}

// Cuts a line to `cols` visible columns, keeping ANSI escape sequences (and resetting colours
// when something was cut).
std::string fit_columns(const std::string& line, int cols) {
  std::string out;
  int visible = 0;
  for (std::size_t i = 0; i < line.size();) {
    const auto ch = static_cast<unsigned char>(line[i]);
    if (ch == 0x1b) {
      std::size_t j = i + 1;
      if (j < line.size() && line[j] == '[') {
        ++j;
        while (j < line.size() && !(line[j] >= 0x40 && line[j] <= 0x7e)) ++j;
      }
      out.append(line, i, j + 1 - i);
      i = j + 1;
      continue;
    }
    std::size_t len = ch < 0x80 ? 1 : (ch >> 5) == 0x6 ? 2 : (ch >> 4) == 0xe ? 3 : 4;
    if (visible >= cols) {
      out += "\x1b[0m";
      return out;
    }
    out.append(line, i, len);
    ++visible;
    i += len;
  }
  return out;
}

/// Redraws `render()` every `interval_s` until SIGINT/SIGTERM. On a terminal: the alternate
/// screen, cursor home and overwrite (each line cleared to its end, then the rest of the
/// screen), lines cut to the window, redrawn at once on SIGWINCH; the terminal is restored on the
/// way out. Elsewhere: frames one after another.
int watch(double interval_s, const std::function<std::string()>& render) {
  const bool tty = ::isatty(STDOUT_FILENO) == 1;
  int pipe_fds[2] = {-1, -1};
  if (::pipe(pipe_fds) != 0) {
    print_error(fmt::format("watch: pipe: {}", std::strerror(errno)));
    return kExitFailure;
  }
  const UniqueFd wake_read(pipe_fds[0]), wake_write(pipe_fds[1]);
  g_wake_fd = wake_write.get();
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll returns at once
  struct sigaction old_int {
  }, old_term{}, old_winch{}, old_hup{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  ::sigaction(SIGHUP, &sa, &old_hup);
  ::sigaction(SIGWINCH, &sa, &old_winch);

  if (tty) write_all(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J");
  std::string frame;
  auto draw = [&] {
    if (!tty) {
      write_all(STDOUT_FILENO, frame + "\n");
      return;
    }
    struct winsize ws {};
    int rows = 24, cols = 80;
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      rows = ws.ws_row;
      cols = ws.ws_col;
    }
    std::string out = "\x1b[H";
    int row = 0;
    std::size_t start = 0;
    while (start < frame.size() && row < rows) {
      std::size_t end = frame.find('\n', start);
      if (end == std::string::npos) end = frame.size();
      if (row > 0) out += "\r\n";
      out += fit_columns(frame.substr(start, end - start), cols) + "\x1b[K";
      ++row;
      start = end + 1;
    }
    out += "\x1b[J";
    write_all(STDOUT_FILENO, out);
  };

  int status = kExitOk;
  auto next = std::chrono::steady_clock::now();
  while (!g_quit) {
    frame = render();
    draw();
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(interval_s));
    if (next < std::chrono::steady_clock::now()) next = std::chrono::steady_clock::now();
    while (!g_quit) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            next - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      struct pollfd pfd {
        wake_read.get(), POLLIN, 0
      };
      const int rc = ::poll(&pfd, 1, static_cast<int>(left));
      if (rc > 0) {
        char buf[64];
        [[maybe_unused]] auto n = ::read(wake_read.get(), buf, sizeof buf);
      }
      if (g_resized.exchange(false) && !g_quit) draw();  // same data, new size
    }
  }
  if (tty) write_all(STDOUT_FILENO, "\x1b[0m\x1b[?25h\x1b[?1049l");
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGHUP, &old_hup, nullptr);
  ::sigaction(SIGWINCH, &old_winch, nullptr);
  g_wake_fd = -1;
  return status;
}

Result<std::vector<int>> parse_ids(const std::string& text) {
  std::vector<int> ids;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = text.substr(start, comma - start);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1 << 20)
      return make_error(Errc::config,
                        fmt::format("--id: '{}' is not a GPU index (expected a comma-separated "
                                    "list of indices such as 0,1,2)",
                                    part));
    ids.push_back(static_cast<int>(v));
    start = comma + 1;
  }
  return ids;
}

// shtab's --print-completion for gpustat's options (the names CLI11 knows for this command).
std::string gpustat_completion(const CLI::App& app, const std::string& shell) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const auto& n : opt->get_snames()) names.push_back("-" + n);
    for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
  }
  const std::string words = fmt::format("{}", fmt::join(names, " "));
  if (shell == "bash")
    return fmt::format(
        "# bash completion for gpustat (sonde gpustat)\n"
        "complete -o default -W \"{}\" gpustat\n",
        words);
  if (shell == "zsh")
    return fmt::format(
        "#compdef gpustat\n# zsh completion for gpustat (sonde gpustat)\n"
        "_arguments '*:option:({})'\n",
        words);
  return fmt::format(
      "# tcsh completion for gpustat (sonde gpustat)\ncomplete gpustat 'c/-/({})/'\n", words);
}

int parse_error(CLI::App& app, const CLI::ParseError& e) {
  app.exit(e);
  return e.get_exit_code() == 0 ? kExitOk : kExitUsage;
}

}  // namespace

int cmd_status(int argc, char** argv, bool gpustat) {
  const std::string name = gpustat ? "gpustat" : "status";
  CLI::App app{gpustat ? "gpustat-compatible view of the GPUs (sonde gpustat)"
                       : "one-shot view of the node: GPUs, their processes, host CPU and memory",
               gpustat ? "gpustat" : "sonde status"};
  bool json = false, force_color = false, no_color = false, debug = false;
  std::optional<double> watch_s;
  double cpu_interval_s = 0.1;
  status::GpustatOptions go;
  std::string codec, power, ids_text;
  bool show_all = false, no_header = false;
  std::string completion_shell;
  CLI::Option* codec_opt = nullptr;
  CLI::Option* power_opt = nullptr;
  CLI::Option* watch_opt = nullptr;

  app.add_flag("--json", json, "print the data as JSON");
  auto* fc = app.add_flag("--force-color,--color", force_color, "colours even in a pipe");
  auto* nc = app.add_flag("--no-color", no_color, "no colours");
  fc->excludes(nc);
  watch_opt = app.add_option(gpustat ? "-i,--interval,--watch" : "-i,--watch,--interval", watch_s,
                             "redraw every SECONDS (default 1) until Ctrl-C")
                  ->expected(0, 1);
  app.add_option("--cpu-interval", cpu_interval_s,
                 "seconds over which CPU utilisation is measured (0: not measured)")
      ->capture_default_str();
  if (gpustat) {
    app.add_flag("-a,--show-all", show_all, "all of -c -u -p -F -e -P");
    app.add_flag("-c,--show-cmd", go.show_cmd, "command name of each process");
    app.add_flag("-f,--show-full-cmd", go.show_full_cmd, "full command and CPU of each process");
    app.add_flag("-u,--show-user", go.show_user, "user of each process");
    app.add_flag("-p,--show-pid", go.show_pid, "pid of each process");
    app.add_flag("-F,--show-fan-speed,--show-fan", go.show_fan, "fan speed");
    codec_opt = app.add_option("-e,--show-codec", codec,
                               "encoder/decoder utilisation: enc, dec "
                               "or enc,dec (default)")
                    ->expected(0, 1);
    power_opt = app.add_option("-P,--show-power", power,
                               "power draw and/or limit: draw, limit, draw,limit (default)")
                    ->expected(0, 1);
    app.add_option("--id", ids_text, "only these GPU indices (e.g. --id 0,1,2)");
    app.add_flag("--no-header", no_header, "no header line");
    app.add_option("--gpuname-width", go.gpuname_width, "width of the GPU name column")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--no-processes", go.no_processes, "no process information");
    app.add_flag("--debug", debug, "print why devices could not be queried");
    // gpustat's -v/--version and shtab's --print-completion.
    app.set_version_flag("-v,--version", fmt::format("gpustat {} (sonde gpustat)", SONDE_VERSION));
    app.add_option("--print-completion", completion_shell, "print a shell completion script")
        ->check(CLI::IsMember({"bash", "zsh", "tcsh"}));
  }

  status::StatusSettings settings = status_settings(name);
  status::StatusHooks hooks(all_status_plugins(), settings);
  hooks.add_options(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return parse_error(app, e);
  }

  // gpustat: -i 0 (or less) is no watch mode.
  const bool watching = watch_opt->count() > 0 && (!gpustat || watch_s.value_or(1.0) > 0);
  if (gpustat && !completion_shell.empty()) {
    std::cout << gpustat_completion(app, completion_shell);
    return kExitOk;
  }
  const double interval = std::max(0.1, watch_s.value_or(1.0));
  if (gpustat) {
    if (show_all) {
      go.show_cmd = go.show_user = go.show_pid = go.show_fan = true;
      codec = "enc,dec";
      power = "draw,limit";
    }
    if (codec_opt->count() > 0 && codec.empty()) codec = "enc,dec";
    if (power_opt->count() > 0 && power.empty()) power = "draw,limit";
    for (const auto& [opt, value, choices] :
         {std::tuple{"--show-codec", codec, std::vector<std::string>{"", "enc", "dec", "enc,dec"}},
          std::tuple{"--show-power", power,
                     std::vector<std::string>{"", "draw", "limit", "draw,limit", "limit,draw"}}}) {
      if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
        print_error(fmt::format("{}: invalid choice '{}' (choose from {})", opt, value,
                                fmt::join(choices, ", ")));
        return kExitUsage;
      }
    }
    go.show_codec = codec;
    go.show_power = power;
    go.show_header = !no_header;
    if (!ids_text.empty()) {
      auto ids = parse_ids(ids_text);
      if (!ids) {
        print_error(ids.error().message);
        return kExitUsage;
      }
      go.ids = *ids;
    }
    if (watching && json) {
      std::cerr << "Error: --json and --interval/-i can't be used together.\n";
      return kExitFailure;
    }
  } else if (watching && json) {
    print_error("--json and --watch cannot be used together");
    return kExitUsage;
  }
  // Ranges from the one settings table (numeric_ranges()): inf, nan and huge values refused.
  for (const auto& [option, value] :
       {std::pair{"--watch", watching ? watch_s.value_or(1.0) : 1.0},
        std::pair{"--cpu-interval", cpu_interval_s},
        std::pair{"--gpuname-width", static_cast<double>(go.gpuname_width.value_or(0))}}) {
    const NumericRange& range = numeric_range(option);
    if (!(value >= range.min && value <= range.max)) {
      print_error(fmt::format("{}: {}, got {}", option, range_expectation(range), value));
      return kExitUsage;
    }
  }

  const bool color = !json && (force_color || (!no_color && auto_color()));
  hooks.settings().json = json;
  hooks.settings().color = color;
  hooks.settings().watch_interval_s = watching ? interval : 0;
  hooks.settings().cpu_interval_s = cpu_interval_s;
  if (auto ok = hooks.configure(); !ok) {
    print_error(ok.error().message);
    return kExitUsage;
  }

  gpu::Gpus gpus = gpu::open_gpus();
  if (gpustat && !gpus.nvml_loaded && !gpus.rocm_loaded) {
    // gpustat's words and status when no driver can be queried.
    std::cerr << "Error on querying NVIDIA devices. Use --debug flag to see more details.\n";
    std::string why;
    for (const auto& n : gpus.notes) why += (why.empty() ? "" : "; ") + n;
    std::cerr << (why.empty() ? std::string("NVML Shared Library Not Found") : why) << "\n";
    if (debug)
      for (const auto& n : gpus.notes) std::cerr << "  " << n << "\n";
    return kExitFailure;
  }

  status::QueryOptions qo;
  qo.proc_root = hooks.settings().proc_root;
  qo.cpu_interval_s = cpu_interval_s;
  if (gpustat) qo.ids = go.ids;

  auto render = [&]() -> std::string {
    status::StatusData data = status::query_status(gpus, hooks, qo);
    if (json)
      return json_text((gpustat ? status::gpustat_json(data, go) : status::status_json(data)), 4) +
             "\n";
    return gpustat ? status::gpustat_text(data, hooks, go, color)
                   : status::status_text(data, hooks, color);
  };

  if (watching) {
    return watch(interval, [&] {
      std::string f = render();
      if (!f.empty() && f.back() == '\n') f.pop_back();
      return f;
    });
  }
  const std::string out = render();
  std::cout << out << std::flush;
  return std::cout ? kExitOk : kExitFailure;
}

}  // namespace sonde::cli
