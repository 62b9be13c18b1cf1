#include "cli/arg_check.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

namespace sonde::cli {

namespace {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

bool is_number(std::string_view s) {
  if (s.empty()) return false;
  const std::string t(s);
  char* end = nullptr;
  std::strtod(t.c_str(), &end);
  return end != t.c_str() && *end == '\0';
}

const CLI::App* find_command(const CLI::App& app, std::string_view name) {
  for (const CLI::App* sub : visible_commands(app))
    if (sub->check_name(std::string(name))) return sub;
  // Hidden commands (plugin-host) are found too, but never suggested.
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->check_name(std::string(name))) return sub;
  return nullptr;
}

std::string command_path(const CLI::App* app) {
  std::string path;
  for (const CLI::App* a = app; a != nullptr && a->get_parent() != nullptr; a = a->get_parent())
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  return path;
}

std::string unknown_command(const CLI::App& parent, std::string_view word) {
  std::vector<std::string> names;
  for (const CLI::App* sub : visible_commands(parent)) names.push_back(sub->get_name());
  const std::string where = parent.get_parent() ? command_path(&parent) + ": " : "";
  if (auto near = did_you_mean(word, names))
    return fmt::format("{}unknown command '{}' (did you mean '{}'?)", where, word, *near);
  return fmt::format("{}unknown command '{}' (expected one of: {})", where, word,
                     fmt::join(names, ", "));
}

}  // namespace

std::vector<const CLI::App*> visible_commands(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* sub) { return !sub->get_group().empty(); });
}

std::vector<std::string> option_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  return names;
}

std::optional<std::string> did_you_mean(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  const std::size_t limit = std::clamp<std::size_t>(word.size() / 3, 1, 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  std::vector<std::string> prefixed;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
    if (word.size() >= 3 && c.starts_with(word)) prefixed.push_back(c);
  }
  if (best) return best;
  if (prefixed.size() == 1) return prefixed.front();
  return std::nullopt;
}

std::optional<std::string> check_words(const CLI::App& app, std::vector<std::string>& args) {
  if (args.empty() || args.front().starts_with("-")) return std::nullopt;  // CLI11's --help etc.
  const CLI::App* cmd = find_command(app, args.front());
  if (cmd == nullptr) return unknown_command(app, args.front());
  std::size_t i = 1;
  // One level of sub-commands (config show, runs list): the next word, unless it is an option.
  if (!visible_commands(*cmd).empty() && i < args.size() && !args[i].starts_with("-")) {
    const CLI::App* sub = find_command(*cmd, args[i]);
    if (sub == nullptr) return unknown_command(*cmd, args[i]);
    cmd = sub;
    ++i;
  }
  const auto dashdash = std::find(args.begin() + static_cast<std::ptrdiff_t>(i), args.end(), "--");
  for (; i < args.size() && args[i] != "--"; ++i) {
    const std::string& w = args[i];
    if (w.size() < 2 || w[0] != '-' || is_number(w)) continue;  // a value or a positional
    const std::string name = w.substr(0, w.find('='));
    const CLI::Option* opt = cmd->get_option_no_throw(name);
    if (opt == nullptr) {
      const std::string where = command_path(cmd);
      if (auto near = did_you_mean(name, option_names(*cmd)))
        return fmt::format("{}: unknown option '{}' (did you mean {}?)", where, name, *near);
      return fmt::format("{}: unknown option '{}' ('sonde {} --help' lists them)", where, name,
                         where);
    }
    // `--report FILE -- CMD`: the flag takes its value only as --report=FILE (so that
    // `--report -- CMD` does not eat CMD); with a `--` further on, the next word is the file.
    if (w == "--report" && dashdash != args.end() && i + 1 < args.size() &&
        args.begin() + static_cast<std::ptrdiff_t>(i + 1) < dashdash &&
        !args[i + 1].starts_with("-")) {
      args[i] = "--report=" + args[i + 1];
      args.erase(args.begin() + static_cast<std::ptrdiff_t>(i + 1));
      return check_words(app, args);  // iterators moved: check again from the start
    }
  }
  return std::nullopt;
}

std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e) {
  // The deepest command that was parsed names where the error is.
  const CLI::App* cmd = &app;
  for (;;) {
    const auto parsed = cmd->get_subcommands();
    if (parsed.empty()) break;
    cmd = parsed.front();
  }
  std::string what = e.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  while (!what.empty() && what.back() == ' ') what.pop_back();
  const std::string path = command_path(cmd);
  const std::string where = path.empty() ? "" : path + ": ";
  const std::string type = e.get_name();
  if (type == "RequiredError" && what.find("subcommand") != std::string::npos) {
    std::vector<std::string> names;
    for (const CLI::App* sub : visible_commands(*cmd)) names.push_back(sub->get_name());
    return fmt::format("{}a command is required: one of {} ('sonde {}--help')", where,
                       fmt::join(names, ", "), path.empty() ? "" : path + " ");
  }
  if (type == "ExtrasError") {
    const std::string prefix = "The following argument was not expected: ";
    const std::string prefix_n = "The following arguments were not expected: ";
    std::string extra = what;
    if (extra.starts_with(prefix)) extra = extra.substr(prefix.size());
    if (extra.starts_with(prefix_n)) extra = extra.substr(prefix_n.size());
    const bool takes_command = cmd->get_option_no_throw("command") != nullptr;
    return fmt::format(
        "{}unexpected argument{} '{}'{}", where, extra.find(' ') != std::string::npos ? "s" : "",
        extra,
        takes_command ? " (the command goes after --: sonde " + path + " [OPTIONS] -- CMD [ARGS])"
                      : "");
  }
  if (type == "ConversionError") {
    // "Could not convert: --watch = abc"
    const std::string prefix = "Could not convert: ";
    if (what.starts_with(prefix)) {
      const std::string rest = what.substr(prefix.size());
      const std::size_t eq = rest.find(" = ");
      if (eq != std::string::npos)
        return fmt::format("{}{}: expected a number, got '{}'", where, rest.substr(0, eq),
                           rest.substr(eq + 3));
    }
  }
  if (type == "ArgumentMismatch") {
    // "--out: 1 required TEXT missing"
    const std::size_t colon = what.find(": ");
    if (colon != std::string::npos && what.find("required", colon) != std::string::npos)
      return fmt::format("{}{}: expected a value after it", where, what.substr(0, colon));
  }
  if (type == "RequiredError" && cmd->get_option_no_throw("command") != nullptr)
    return fmt::format("{}{} (sonde {} [OPTIONS] -- CMD [ARGS])", where, what, path);
  return fmt::format("{}{}", where, what);
}

}  // namespace sonde::cli
