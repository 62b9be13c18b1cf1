#include "cli/completion.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "cli/arg_check.hpp"

namespace sonde::cli {

namespace {

// Words of one command for bash: its sub-commands and options, space-separated.
std::string words_of(const CLI::App& cmd) {
  std::vector<std::string> w;
  for (const CLI::App* sub : visible_commands(cmd)) w.push_back(sub->get_name());
  for (const std::string& o : option_names(cmd)) w.push_back(o);
  return fmt::format("{}", fmt::join(w, " "));
}

std::string bash(const CLI::App& app) {
  std::string cases;
  for (const CLI::App* cmd : visible_commands(app)) {
    cases += fmt::format("    {}) words=\"{}\" ;;\n", cmd->get_name(), words_of(*cmd));
    for (const CLI::App* sub : visible_commands(*cmd))
      cases += fmt::format("    \"{} {}\") words=\"{}\" ;;\n", cmd->get_name(), sub->get_name(),
                           words_of(*sub));
  }
  return fmt::format(
      R"(# bash completion for sonde (sonde completion bash); source it, or put it in
# /usr/share/bash-completion/completions/sonde.
_sonde() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} path="" i w words
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${{COMP_WORDS[i]}}
    [[ $w == -- ]] && {{ COMPREPLY=(); compopt -o default 2>/dev/null; return; }}
    [[ $w == -* ]] && continue
    case "$path" in
      "") path=$w ;;
      config|runs) path="$path $w" ;;
    esac
  done
  case "$path" in
    "") words="{} --help --version" ;;
{}    *) words="" ;;
  esac
  COMPREPLY=($(compgen -W "$words" -- "$cur"))
  # Past the command, file names too (run directories, databases, the program to run).
  [[ -n $path && $path != config && $path != runs ]] && compopt -o default 2>/dev/null
  return 0
}}
complete -F _sonde sonde
)",
      [&] {
        std::vector<std::string> names;
        for (const CLI::App* cmd : visible_commands(app)) names.push_back(cmd->get_name());
        return fmt::format("{}", fmt::join(names, " "));
      }(),
      cases);
}

std::string fish_quote(std::string s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string fish(const CLI::App& app) {
  std::string out =
      "# fish completion for sonde (sonde completion fish > "
      "~/.config/fish/completions/sonde.fish)\ncomplete -c sonde -f\n";
  std::vector<std::string> names;
  for (const CLI::App* cmd : visible_commands(app)) names.push_back(cmd->get_name());
  const std::string all = fmt::format("{}", fmt::join(names, " "));
  for (const CLI::App* cmd : visible_commands(app)) {
    out += fmt::format("complete -c sonde -n 'not __fish_seen_subcommand_from {}' -a {} -d {}\n",
                       all, cmd->get_name(), fish_quote(cmd->get_description()));
    const std::string cond = fmt::format("__fish_seen_subcommand_from {}", cmd->get_name());
    for (const CLI::App* sub : visible_commands(*cmd))
      out += fmt::format("complete -c sonde -n {} -a {} -d {}\n", fish_quote(cond), sub->get_name(),
                         fish_quote(sub->get_description()));
    for (const CLI::Option* opt : cmd->get_options()) {
      if (opt->get_group().empty()) continue;
      std::string line = fmt::format("complete -c sonde -n {}", fish_quote(cond));
      for (const std::string& l : opt->get_lnames()) line += " -l " + l;
      for (const std::string& s : opt->get_snames()) line += " -s " + s;
      if (opt->get_lnames().empty() && opt->get_snames().empty()) continue;  // positional
      if (opt->get_expected_min() > 0) line += " -r -F";  // takes a value: files allowed
      out += line + " -d " + fish_quote(opt->get_description()) + "\n";
    }
    // Commands that take files or a command line complete file names as well.
    out += fmt::format("complete -c sonde -n {} -F\n", fish_quote(cond));
  }
  return out;
}

}  // namespace

std::optional<std::string> completion_script(const CLI::App& app, std::string_view shell) {
  if (shell == "bash") return bash(app);
  if (shell == "zsh")
    // zsh runs bash completion functions through bashcompinit, as many tools ship them.
    return "#compdef sonde\n# zsh completion for sonde (sonde completion zsh > ~/.zfunc/_sonde, "
           "or eval \"$(sonde completion zsh)\")\nautoload -U +X bashcompinit && bashcompinit\n" +
           bash(app);
  if (shell == "fish") return fish(app);
  return std::nullopt;
}

}  // namespace sonde::cli
