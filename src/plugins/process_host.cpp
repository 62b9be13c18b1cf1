// Process plugins, the factories: `exec` (the `command` kwarg), `python:MODULE.CLASS` (the
// shipped runner) and the child of an isolated native plugin (`sonde plugin-host`). The child
// process is child_process.cpp's, the protocol and restarts process_collector.cpp's, the Python
// bridge lookup python_bridge.cpp's.
#include <sys/stat.h>

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/trust.hpp"
#include "plugins/plugins.hpp"
#include "plugins/process_collector.hpp"
#include "plugins/protocol.hpp"
#include "plugins/python_bridge.hpp"

namespace sonde::plugins {

namespace fs = std::filesystem;

Result<std::unique_ptr<Collector>> make_process_collector(std::vector<std::string> command,
                                                          std::string source, std::string file,
                                                          const CollectorArgs& args) {
  if (command.empty() || command[0].empty())
    return make_error(Errc::config, fmt::format("collector '{}': empty command", args.name));
  SpawnSpec spec;
  spec.argv = std::move(command);
  spec.name = args.name;
  return make_child_collector(std::move(spec), std::move(source), std::move(file), args, {});
}

TargetFactory exec_factory() {
  return {"exec",
          [](const std::string&, const CollectorArgs& args) -> Result<std::unique_ptr<Collector>> {
            auto it = args.raw_kwargs.find("command");
            if (it == args.raw_kwargs.end())
              return make_error(Errc::config,
                                fmt::format("collector '{}' (_target_: exec) needs 'command': the "
                                            "program and its arguments, a non-empty list of "
                                            "strings",
                                            args.name));
            const YAML::Node& n = it->second.value;
            std::vector<std::string> command;
            bool ok = n.IsSequence() && n.size() > 0;
            if (ok)
              for (const auto& item : n) {
                if (!item.IsScalar() || item.Scalar().empty()) {
                  ok = false;
                  break;
                }
                command.push_back(item.Scalar());
              }
            if (!ok)
              return make_error(Errc::config,
                                fmt::format("{}: collector '{}': 'command' expected a non-empty "
                                            "list of strings (the program and its arguments)",
                                            it->second.origin.str(), args.name));
            // A relative program path is relative to the file that names it (a snippet in a
            // plugin directory next to its script), when the program is there.
            const std::string& origin_file = it->second.origin.file;
            if (command[0].find('/') != std::string::npos && command[0][0] != '/' &&
                !origin_file.empty() && origin_file[0] != '<') {
              std::error_code ec;
              const fs::path beside = fs::path(origin_file).parent_path() / command[0];
              if (fs::exists(beside, ec) && !fs::exists(command[0], ec))
                command[0] = fs::absolute(beside, ec).lexically_normal().string();
            }
            SpawnSpec spec;
            spec.argv = command;
            spec.name = args.name;
            const std::string file = fmt::format("{}", fmt::join(command, " "));
            return make_child_collector(std::move(spec), "exec", file, args, {"command"});
          }};
}

TargetFactory python_factory() {
  return {
      "python:",
      [](const std::string& target,
         const CollectorArgs& args) -> Result<std::unique_ptr<Collector>> {
        const std::string what = target.substr(std::string_view("python:").size());
        bool ok = what.find('.') != std::string::npos;
        for (std::size_t start = 0; ok && start <= what.size();) {
          const auto dot = what.find('.', start);
          ok = is_python_identifier(std::string_view(what).substr(
              start, dot == std::string::npos ? std::string::npos : dot - start));
          if (dot == std::string::npos) break;
          start = dot + 1;
        }
        if (!ok)
          return make_error(Errc::config,
                            fmt::format("collector '{}': _target_ '{}' expected "
                                        "python:MODULE.CLASS (e.g. python:my_site.ib.IbCollector)",
                                        args.name, target));
        auto dir = python_dir();
        if (!dir) return dir.error();
        std::vector<std::string> candidates = {*dir};
        if (const char* existing = program_env("PYTHONPATH"))
          for (std::string_view rest = existing; !rest.empty();) {
            const auto colon = rest.find(':');
            if (colon != 0) candidates.emplace_back(rest.substr(0, colon));
            rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
          }
        // The import path is built here, only of directories that pass the rule for code
        // (docs/security.md): never the current directory, never one others can write, sticky
        // or not (a json.py there would be imported by the bridge itself). One that does not
        // exist is skipped, as Python skips it.
        auto path_dirs = trusted_python_path(candidates);
        if (!path_dirs) return path_dirs.error();
        if (auto checked = check_python_module(what, *path_dirs); !checked) return checked.error();
        SpawnSpec spec;
        spec.argv = python_runner_argv(what);
        spec.env["SONDE_PYTHON_PATH"] = fmt::format("{}", fmt::join(*path_dirs, ":"));
        spec.name = args.name;
        return make_child_collector(std::move(spec), "python", what, args, {});
      }};
}

}  // namespace sonde::plugins
