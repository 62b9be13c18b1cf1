// Fuzz target: the parsers of Prometheus' API answers (src/http/prometheus_response.hpp), text a
// remote server controls (`sonde jobstats`, `sonde report --prometheus`). The input's first byte
// chooses the parser (query/query_range or series), the rest is the body. Checks: never throws or
// crashes (deep nesting included); an error names the context and has no control byte of the
// body in it (it reaches a terminal); a parsed answer's series have string labels and a sample
// per point, never more points than the body has bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "http/prometheus_response.hpp"

using sonde::fuzz::check;

namespace {

void check_message(const std::string& m) {
  check(m.starts_with("ctx"), "an error names its context");
  for (char c : m)
    check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f,
          "an error holds no control byte of the server's text");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    auto r = sonde::promq::parse_series_response(body, "ctx");
    if (!r) {
      check_message(r.error().message);
      return 0;
    }
    check(r->size() <= body.size(), "no more label sets than bytes");
    return 0;
  }
  auto r = sonde::promq::parse_query_response(body, "ctx");
  if (!r) {
    check_message(r.error().message);
    return 0;
  }
  std::size_t samples = 0;
  for (const auto& s : *r) samples += s.samples.size();
  check(samples <= body.size(), "no more samples than bytes");
  check(r->size() <= body.size(), "no more series than bytes");
  return 0;
}
