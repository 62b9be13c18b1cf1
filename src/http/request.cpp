#include "http/request.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>

namespace sonde::http {

namespace {

Parsed fail(int status, std::string text) {
  Parsed p;
  p.state = Parsed::State::error;
  p.error_status = status;
  p.error_text = std::move(text);
  return p;
}

bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Does the comma-separated list `value` hold `token` (case-insensitive)?
bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    std::string_view item = trim(value.substr(0, comma));
    if (item.size() == token.size() &&
        std::equal(item.begin(), item.end(), token.begin(),
                   [](char a, char b) { return lower(a) == lower(b); }))
      return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

constexpr std::array<std::string_view, 9> kKnownMethods = {
    "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"};

/// A line ends at '\n'; a '\r' before it is dropped.
std::string_view strip_cr(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

std::string_view Request::header(std::string_view lower_name) const {
  for (const auto& [name, value] : headers)
    if (name == lower_name) return value;
  return {};
}

namespace {

/// The request line and headers of a complete head (`line`: the request line without its end;
/// the header lines from `headers_at` to `head_end`): the request, or an error.
Parsed parse_head(std::string_view buf, std::string_view line, std::size_t headers_at,
                  std::size_t head_end, const Limits& limits);

}  // namespace

Parsed parse_request(std::string_view buf, const Limits& limits) {
  RequestScan scan;
  return parse_request(buf, limits, scan);
}

Parsed parse_request(std::string_view buf, const Limits& limits, RequestScan& s) {
  // A complete or failed parse starts the next request afresh.
  const auto done = [&s](Parsed p) {
    const std::size_t examined = s.examined;
    s = {};
    s.examined = examined;
    return p;
  };
  if (s.have_head) {  // only the body was missing
    if (buf.size() < s.need) return {};
    Parsed p;
    p.state = Parsed::State::complete;
    p.consumed = s.need;
    p.request = std::move(s.request);
    return done(std::move(p));
  }
  // Every byte is looked at once: `scanned` only grows, and a call looks only past it.
  const auto find_nl = [&](std::size_t from) {
    const std::size_t nl = buf.find('\n', from);
    const std::size_t to = nl == std::string_view::npos ? buf.size() : nl + 1;
    s.examined += to > from ? to - from : 0;
    s.scanned = to;
    return nl;
  };
  if (!s.started) {
    // Empty lines before a request line are ignored (RFC 9112 2.2), within the head's bound.
    while (s.scanned < buf.size() && (buf[s.scanned] == '\r' || buf[s.scanned] == '\n')) {
      ++s.scanned;
      ++s.examined;
    }
    if (s.scanned > limits.max_head_bytes)
      return done(fail(400, "empty lines instead of a request"));
    if (s.scanned == buf.size()) return {};
    s.started = true;
    s.start = s.line_start = s.scanned;
  }
  const std::size_t start = s.start;
  if (!s.have_request_line) {
    const std::size_t line_end = find_nl(s.scanned);
    if (line_end == std::string_view::npos) {
      if (buf.size() - start > limits.max_request_line_bytes)
        return done(fail(414, "request line too long"));
      return {};
    }
    if (strip_cr(buf.substr(start, line_end - start)).size() > limits.max_request_line_bytes)
      return done(fail(414, "request line too long"));
    s.have_request_line = true;
    s.request_line_end = line_end;
    s.line_start = line_end + 1;
  }

  // Find the end of the head, checking each line's length on the way: an over-long line is an
  // error as soon as it is seen, not when (if ever) it ends.
  std::size_t head_end = std::string_view::npos;
  while (true) {
    const std::size_t nl = find_nl(s.scanned);
    const std::size_t len = (nl == std::string_view::npos ? buf.size() : nl) - s.line_start;
    if (len > limits.max_header_line_bytes + 1) return done(fail(400, "header line too long"));
    if (nl == std::string_view::npos) {
      if (buf.size() - start > limits.max_head_bytes)
        return done(fail(431, "request head too large"));
      return {};
    }
    if (nl + 1 - start > limits.max_head_bytes) return done(fail(431, "request head too large"));
    if (strip_cr(buf.substr(s.line_start, len)).empty()) {
      head_end = nl + 1;
      break;
    }
    if (++s.header_lines > limits.max_headers) return done(fail(431, "too many header lines"));
    s.line_start = nl + 1;
  }

  const std::string_view line = strip_cr(buf.substr(start, s.request_line_end - start));
  Parsed p = parse_head(buf, line, s.request_line_end + 1, head_end, limits);
  if (p.state != Parsed::State::incomplete) return done(std::move(p));
  // The body is still on its way: keep the parsed head, wait for `need` bytes.
  s.have_head = true;
  s.need = p.consumed;
  s.request = std::move(p.request);
  return {};
}

namespace {

Parsed parse_head(std::string_view buf, std::string_view line, std::size_t headers_at,
                  std::size_t head_end, const Limits& limits) {
  Parsed p;
  Request& r = p.request;
  // Request line: METHOD SP TARGET SP HTTP/1.x
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    return fail(400, "malformed request line");
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), is_tchar))
    return fail(400, "malformed method");
  if (std::find(kKnownMethods.begin(), kKnownMethods.end(), method) == kKnownMethods.end())
    return fail(400, "unknown method");
  if (version == "HTTP/1.1") {
    r.minor_version = 1;
  } else if (version == "HTTP/1.0") {
    r.minor_version = 0;
  } else {
    return fail(400, "unsupported HTTP version");
  }
  if (target.empty() || (target.front() != '/' && !(target == "*" && method == "OPTIONS")))
    return fail(400, "malformed request target");
  for (char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return fail(400, "malformed target");
  r.method = method;
  r.target = target;
  r.path = target.substr(0, target.find_first_of("?#"));

  // Header lines: name ":" OWS value OWS; no folding, no space before the colon.
  std::size_t pos = headers_at;
  while (pos < head_end) {
    const std::size_t nl = buf.find('\n', pos);
    const std::string_view h = strip_cr(buf.substr(pos, nl - pos));
    pos = nl + 1;
    if (h.empty()) break;
    const std::size_t colon = h.find(':');
    if (colon == 0 || colon == std::string_view::npos) return fail(400, "malformed header line");
    const std::string_view name = h.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_tchar)) return fail(400, "malformed header name");
    const std::string_view value = trim(h.substr(colon + 1));
    for (char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return fail(400, "control character in a header value");
    std::string lname(name);
    std::transform(lname.begin(), lname.end(), lname.begin(), lower);
    r.headers.emplace_back(std::move(lname), std::string(value));
  }

  const std::string_view connection = r.header("connection");
  r.keep_alive =
      r.minor_version == 1 ? !has_token(connection, "close") : has_token(connection, "keep-alive");

  // A body: nothing served takes one, so only a small one (by Content-Length) is read, to keep
  // the next pipelined request in step; chunked or large ones are refused.
  for (const auto& [name, value] : r.headers)
    if (name == "transfer-encoding") return fail(413, "request body not accepted");
  std::size_t body = 0;
  bool have_length = false;
  for (const auto& [name, value] : r.headers) {
    if (name != "content-length") continue;
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || ec == std::errc::result_out_of_range)
      return fail(ec == std::errc::result_out_of_range ? 413 : 400, "bad Content-Length");
    if (ec != std::errc() || end != value.data() + value.size())
      return fail(400, "bad Content-Length");
    if (have_length && n != body) return fail(400, "conflicting Content-Length");
    body = n;
    have_length = true;
  }
  if (body > limits.max_body_bytes) return fail(413, "request body too large");
  p.consumed = head_end + body;
  // The body is still on its way: incomplete, with the head parsed and `consumed` the bytes
  // that will make it complete.
  if (buf.size() - head_end >= body) p.state = Parsed::State::complete;
  return p;
}

}  // namespace

std::string_view reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
  }
}

Response error_response(int status, std::string_view text) {
  Response r;
  r.status = status;
  r.body = fmt::format("{} {}\n", status, text);
  r.close = true;
  return r;
}

void serialize(const Response& r, bool head_only, bool keep_alive, int minor_version,
               std::string& out) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", r.status,
                 reason_phrase(r.status), r.content_type, r.body.size());
  for (const auto& [name, value] : r.headers) fmt::format_to(it, "{}: {}\r\n", name, value);
  if (!keep_alive || r.close) {
    out += "Connection: close\r\n";
  } else if (minor_version == 0) {
    out += "Connection: keep-alive\r\n";
  }
  out += "\r\n";
  if (!head_only) out += r.body;
}

}  // namespace sonde::http
