// Fuzz target: the YAML configuration parser (src/core/config.hpp), merging the input over the
// built-in defaults as a configuration file would be. Checks what the parser promises: an error
// names the file; an accepted configuration, printed by `sonde config show` (dump_config), reads
// back to the same configuration.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/config.hpp"
#include "fuzz_common.hpp"

using sonde::fuzz::check;

namespace {

const sonde::Config& defaults() {
  static const sonde::Config cfg = [] {
    sonde::Config c;
    check(sonde::merge_config_text(c, sonde::default_config_yaml(), "<defaults>").ok(),
          "the built-in defaults parse");
    return c;
  }();
  return cfg;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  sonde::Config cfg = defaults();
  auto merged = sonde::merge_config_text(cfg, text, "fuzz.yaml");
  if (!merged) {
    check(merged.error().message.find("fuzz.yaml") != std::string::npos,
          "a configuration error names the file");
    return 0;
  }
  const std::string shown = sonde::dump_config(cfg);
  sonde::Config again = defaults();
  auto reread = sonde::merge_config_text(again, shown, "fuzz.yaml");
  if (!reread) std::fprintf(stderr, "%s\n---\n%s\n", reread.error().message.c_str(), shown.c_str());
  check(reread.ok(), "config show's output reads back");
  const std::string shown_again = sonde::dump_config(again);
  if (shown_again != shown)
    std::fprintf(stderr, "first:\n%s\n---\nread back:\n%s\n", shown.c_str(), shown_again.c_str());
  check(shown_again == shown, "config show's output reads back unchanged");
  return 0;
}
