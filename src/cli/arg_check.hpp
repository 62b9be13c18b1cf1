#pragma once
// The command line checked word by word before CLI11 parses it, so that an error names the word
// the user got wrong ("unknown option '--intervl' (did you mean --interval?)") instead of what
// CLI11 makes of it later ("The following argument was not expected: true"); CLI11's own errors
// turned into one `sonde: error: …` line.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
class ParseError;
}  // namespace CLI

namespace sonde::cli {

/// The candidate closest to `word` when it is likely what was meant: an edit distance of at most
/// a third of the word's length (at least 1, at most 3), or `word` a prefix of exactly one.
std::optional<std::string> did_you_mean(std::string_view word,
                                        const std::vector<std::string>& candidates);

/// Checks `args` (argv without the program name) against `app`: the command (and sub-command)
/// must exist, and every option before `--` must be one of the command's. Rewrites `--report FILE`
/// to `--report=FILE` where a `--` follows (the command is then unambiguous). Returns the error
/// line (without "sonde: error: ") for the first word that is wrong.
std::optional<std::string> check_words(const CLI::App& app, std::vector<std::string>& args);

/// One line for an error CLI11 raised while parsing (without "sonde: error: "), naming the
/// command it concerns.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& e);

/// The commands of `app` a user may type (hidden ones left out), and the long and short options
/// of one (with their dashes).
std::vector<const CLI::App*> visible_commands(const CLI::App& app);
std::vector<std::string> option_names(const CLI::App& app);

}  // namespace sonde::cli
