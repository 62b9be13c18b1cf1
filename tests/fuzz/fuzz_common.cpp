#include "fuzz_common.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace sonde::fuzz {

namespace {
struct Scratch {
  std::string path;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/sonde-fuzz-XXXXXX";
    check(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp for the scratch directory");
    path = tmpl;
  }
  ~Scratch() { remove_tree(path); }
};
}  // namespace

const std::string& scratch_dir() {
  static const Scratch scratch;
  return scratch.path;
}

void write_file(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  check(static_cast<bool>(out), "writing a scratch file");
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace sonde::fuzz
