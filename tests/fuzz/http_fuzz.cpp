// Fuzz target: the request parser of `sonde serve`'s HTTP server (src/http/request.hpp), as the
// server drives it. The input's first byte chooses the size of the pieces the rest arrives in;
// the pieces are appended to a connection buffer and parsed incrementally (RequestScan), each
// complete request removed from the front, as pipelined requests are. Checks: the incremental
// parse decides as a parse of the whole buffer does (state, length, status, fields); a parsed
// request is within every limit (method known, target and headers within their lengths and
// count, lower-case header names, no control characters in values); an error is 400, 413, 414 or
// 431; the bytes looked at stay linear in the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_common.hpp"
#include "http/request.hpp"

using sonde::fuzz::check;
using namespace sonde::http;

namespace {

Limits small_limits() {
  // Small bounds, so that the fuzzer reaches every one of them with short inputs.
  Limits l;
  l.max_request_line_bytes = 256;
  l.max_header_line_bytes = 128;
  l.max_head_bytes = 1024;
  l.max_headers = 8;
  l.max_body_bytes = 64;
  return l;
}

void check_request(const Parsed& p, std::string_view buf, const Limits& l) {
  const Request& r = p.request;
  check(p.consumed > 0 && p.consumed <= buf.size(), "a request's length is within the buffer");
  check(p.consumed <= l.max_head_bytes + l.max_body_bytes + 2 * l.max_head_bytes,
        "a request is within the head and body bounds (and the empty lines before it)");
  constexpr std::string_view kMethods[] = {"GET",   "HEAD",    "POST",    "PUT",  "DELETE",
                                           "PATCH", "OPTIONS", "CONNECT", "TRACE"};
  check(std::find(std::begin(kMethods), std::end(kMethods), r.method) != std::end(kMethods),
        "a parsed method is a known one");
  check(!r.target.empty() && r.target.size() <= l.max_request_line_bytes,
        "a parsed target is within the request line's bound");
  check(r.target.starts_with(r.path), "the path is the front of the target");
  check(r.minor_version == 0 || r.minor_version == 1, "HTTP/1.0 or 1.1");
  check(r.headers.size() <= l.max_headers, "no more headers than the bound");
  for (const auto& [name, value] : r.headers) {
    check(!name.empty() && name.size() + value.size() < l.max_header_line_bytes + 2,
          "a header is within the header line's bound");
    check(std::none_of(name.begin(), name.end(), [](char c) { return c >= 'A' && c <= 'Z'; }),
          "header names are lower-cased");
    check(std::none_of(value.begin(), value.end(),
                       [](char c) {
                         return (static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f;
                       }),
          "no control characters in a header value");
  }
}

void check_same(const Parsed& a, const Parsed& b) {
  check(a.state == b.state, "incremental and whole parses agree on the outcome");
  if (a.state == Parsed::State::complete) {
    check(a.consumed == b.consumed, "incremental and whole parses agree on the length");
    check(a.request.method == b.request.method && a.request.target == b.request.target &&
              a.request.headers == b.request.headers &&
              a.request.keep_alive == b.request.keep_alive,
          "incremental and whole parses agree on the request");
  }
  if (a.state == Parsed::State::error)
    check(a.error_status == b.error_status, "incremental and whole parses agree on the status");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const Limits l = data[0] & 0x80 ? Limits{} : small_limits();
  const std::size_t piece = 1 + data[0] % 32;
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string buf;
  RequestScan scan;
  std::size_t calls = 0, fed = 0;
  for (std::size_t at = 0; at < stream.size(); at += piece) {
    buf.append(stream.substr(at, piece));
    fed += std::min(piece, stream.size() - at);
    while (!buf.empty()) {
      ++calls;
      const Parsed p = parse_request(buf, l, scan);
      check_same(p, parse_request(buf, l));
      if (p.state == Parsed::State::incomplete) break;
      if (p.state == Parsed::State::error) {
        check(p.error_status == 400 || p.error_status == 413 || p.error_status == 414 ||
                  p.error_status == 431,
              "an error is 400, 413, 414 or 431");
        check(!p.error_text.empty(), "an error says why");
        return 0;  // the server closes the connection
      }
      check_request(p, buf, l);
      buf.erase(0, p.consumed);
    }
  }
  // Each byte is looked at about once (a body's bytes not at all), whatever the pieces.
  check(scan.examined <= fed + calls, "the parser's work is linear in the input");
  return 0;
}
