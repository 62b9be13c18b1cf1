#include "sinks/run_reader.hpp"

#include <filesystem>
#include <system_error>

#include "sinks/run_data.hpp"
#include "sinks/sqlite.hpp"
#include "sinks/zip_reader.hpp"

namespace sonde {

Result<RunData> read_run(const std::string& spec) {
  // A directory is a run directory; a .zip file a zipped one; another file (or a name ending in
  // .sqlite/.sqlite3/.db), with or without #ID, is a SQLite database.
  std::error_code ec;
  if (std::filesystem::is_directory(spec, ec)) return read_run_dir(spec);
  if (spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".zip") == 0 &&
      std::filesystem::is_regular_file(spec, ec))
    return read_run_zip(spec);
  const std::size_t hash = spec.rfind('#');
  const std::string file = hash == std::string::npos ? spec : spec.substr(0, hash);
  if (is_sqlite_path(file) || std::filesystem::is_regular_file(file, ec)) {
    auto loc = parse_sqlite_location(spec);
    if (!loc) return loc.error();
    return read_run_sqlite(loc->first, loc->second);
  }
  return read_run_dir(spec);
}

}  // namespace sonde
