#pragma once
// `sonde completion bash|zsh|fish`: a completion script made from the same CLI11 parser that
// reads the command line, so that it never lists an option sonde does not take.
#include <optional>
#include <string>
#include <string_view>

namespace CLI {
class App;
}  // namespace CLI

namespace sonde::cli {

/// The script for `shell` (bash, zsh or fish); nullopt for another shell.
std::optional<std::string> completion_script(const CLI::App& app, std::string_view shell);

}  // namespace sonde::cli
