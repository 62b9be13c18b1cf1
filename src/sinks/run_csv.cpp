#include "sinks/run_csv.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "sinks/format.hpp"

namespace sonde {

void append_run_header(std::string& out, std::span<const std::string> columns) {
  out += "time,wallclock";
  for (const auto& c : columns) {
    out += ',';
    out += c;
  }
  out += '\n';
}

void append_run_row(std::string& out, double time_s, double wallclock_s,
                    std::span<const double> values) {
  append_time(out, time_s, "");
  out += ',';
  append_time(out, wallclock_s, "");
  for (double v : values) {
    out += ',';
    append_number(out, v, "");
  }
  out += '\n';
}

Result<RunCsvFile> RunCsvFile::create(int dir_fd, const std::string& name, const std::string& shown,
                                      std::span<const std::string> columns) {
  auto fd = create_file_in(dir_fd, name, shown, O_APPEND);
  if (!fd) return fd.error();
  RunCsvFile f;
  f.fd_ = std::move(*fd);
  append_run_header(f.line_, columns);
  if (!write_all(f.fd_.get(), f.line_))
    return make_error(Errc::io, fmt::format("cannot write {}: {}", shown, std::strerror(errno)));
  return f;
}

bool RunCsvFile::append(double time_s, double wallclock_s, std::span<const double> values) {
  line_.clear();
  append_run_row(line_, time_s, wallclock_s, values);
  return write_all(fd_.get(), line_);
}

void RunCsvFile::sync_and_close() {
  if (!fd_) return;
  ::fsync(fd_.get());
  fd_.close();
}

}  // namespace sonde
