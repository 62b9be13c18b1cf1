// Plugin directories, discovery and the factories for plugin targets.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/trust.hpp"
#include "plugins/plugins.hpp"
#include "plugins/protocol.hpp"

namespace sonde::plugins {

Result<std::pair<std::string, std::string>> native_default_entry(const std::string& path);

bool elevated_privileges() {
  return secure_mode();
}

namespace {
std::string self_exe() {
  // Inside another program (the Python package in a Jupyter kernel) the running executable is
  // not sonde: $SONDE_EXECUTABLE names the sonde binary whose prefix and plugin-host are used.
  if (!elevated_privileges())
    if (const char* e = std::getenv("SONDE_EXECUTABLE"); e && *e) return e;
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("sonde") : p.string();
}
}  // namespace

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> dirs;
  if (!elevated_privileges()) {
    if (const char* p = std::getenv("SONDE_PLUGIN_PATH"); p && *p) {
      std::string all = p;
      std::size_t start = 0;
      while (start <= all.size()) {
        const auto colon = all.find(':', start);
        std::string d =
            all.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        if (!d.empty()) dirs.push_back(d);
        if (colon == std::string::npos) break;
        start = colon + 1;
      }
    }
    if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
      dirs.push_back(std::string(x) + "/sonde/plugins");
    else if (const char* h = std::getenv("HOME"); h && *h)
      dirs.push_back(std::string(h) + "/.config/sonde/plugins");
  }
  // <prefix>/lib/sonde/plugins, with <prefix> the directory above sonde's bin/.
  const auto prefix = std::filesystem::path(self_exe()).parent_path().parent_path();
  dirs.push_back((prefix / "lib/sonde/plugins").string());
  return dirs;
}

void register_plugin_factories(Registry& registry) {
  registry.add_factory(
      {"plugin:",
       [](const std::string& target,
          const CollectorArgs& args) -> Result<std::unique_ptr<Collector>> {
         auto path =
             resolve_plugin_file(target.substr(std::string_view("plugin:").size()), plugin_dirs());
         if (!path) return path.error();
         bool isolate = false;
         if (auto it = args.raw_kwargs.find("isolate"); it != args.raw_kwargs.end()) {
           if (!it->second.value.IsScalar() ||
               !YAML::convert<bool>::decode(it->second.value, isolate))
             return make_error(Errc::config, fmt::format("{}: collector '{}': 'isolate' expected a "
                                                         "boolean (true/false)",
                                                         it->second.origin.str(), args.name));
         }
         if (isolate) {
           // The trust checks also hold for the isolated host: check before starting it.
           auto fd = open_trusted(*path);
           if (!fd) return fd.error();
           const UniqueFd checked(*fd);  // only the checks matter here
           return make_process_collector({self_exe(), "plugin-host", *path}, "native", *path, args);
         }
         return make_native_collector(*path, args);
       }});
  registry.add_factory(exec_factory());
  registry.add_factory(python_factory());
}

void discover_plugins(Config& cfg, const std::vector<std::string>& dirs,
                      const std::function<void(const std::string&)>& warn) {
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) continue;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string path = f.string();
      const auto ext = f.extension().string();
      if (ext == ".so") {
        const bool named =
            std::any_of(cfg.collectors.begin(), cfg.collectors.end(), [&](const CollectorSpec& c) {
              return c.target == "plugin:" + path || c.target == "plugin:" + f.filename().string();
            });
        if (named) continue;
        auto entry = native_default_entry(path);
        if (!entry) {
          warn(entry.error().message);
          continue;
        }
        const auto& [name, yaml] = *entry;
        if (name.empty() && yaml.empty()) continue;  // status hooks only: not a collector
        if (cfg.find(name) != nullptr) continue;     // configured explicitly under its name
        if (yaml.empty()) {
          warn(fmt::format(
              "plugin {} has no default entry; add it under collectors: with a handler", path));
          continue;
        }
        YAML::Node doc;
        try {
          YAML::Node body = YAML::Load(yaml);
          body["_target_"] = "plugin:" + path;
          doc["collectors"][name] = body;
        } catch (const YAML::Exception& e) {
          warn(fmt::format("plugin {}: its default entry is not valid YAML: {}", path, e.what()));
          continue;
        }
        YAML::Emitter out;
        out << doc;
        if (auto ok = merge_config_text(cfg, out.c_str(), path + " (default entry)"); !ok)
          warn(ok.error().message);
      } else if (ext == ".yaml" || ext == ".yml") {
        // Read from the descriptor that was checked, not by name again.
        auto fd = open_trusted(path);
        if (!fd) {
          warn(fd.error().message);
          continue;
        }
        auto text = read_trusted(*fd, path, kMaxConfigBytes);
        if (!text) {
          warn(text.error().message);
          continue;
        }
        try {
          YAML::Node doc = YAML::Load(*text);
          bool only_collectors = doc.IsMap();
          for (const auto& kv : doc)
            if (kv.first.Scalar() != "collectors") only_collectors = false;
          if (!only_collectors) {
            warn(fmt::format("{}: a plugin directory snippet may only hold 'collectors:'; skipped",
                             path));
            continue;
          }
        } catch (const YAML::Exception&) {
          // merge_config_text reports it with the line
        }
        Config trial = cfg;
        if (auto ok = merge_config_text(trial, *text, path); !ok) {
          warn(ok.error().message + " (plugin snippet skipped)");
          continue;
        }
        cfg = std::move(trial);
      }
    }
  }
}

}  // namespace sonde::plugins
