#pragma once
// HTTP/1.x requests and responses for sonde's small exporter server (src/http/server.hpp): a pure,
// bounded parser of one request at the front of a buffer (so pipelined requests are parsed one
// after another) and the serialisation of a response. No sockets, no clocks.
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sonde::http {

/// What one connection may send and how long it may take. The defaults are the documented bounds
/// of `sonde serve` (docs/prometheus.md).
struct Limits {
  std::size_t max_request_line_bytes = 8192;  ///< longer: 414
  std::size_t max_header_line_bytes = 8192;   ///< one header line longer: 400
  std::size_t max_head_bytes = 16384;         ///< request line + headers longer: 431
  std::size_t max_headers = 100;              ///< more header lines: 431
  std::size_t max_body_bytes = 4096;          ///< a larger announced body (or chunked): 413
  /// From a connection's accept, or the first byte of a request, to its last byte (total, not
  /// per read): a slow sender is closed when it runs out.
  double header_timeout_s = 10;
  double idle_timeout_s = 5;    ///< kept-alive connection with no request started
  double write_timeout_s = 10;  ///< from a response queued to its last byte taken by the peer
  std::size_t max_connections = 1024;  ///< open at once (lowered to fit RLIMIT_NOFILE)
  /// Open at once from one client address (IPv6: one /64). Over it, a new connection gets 503
  /// and is closed.
  std::size_t max_connections_per_client = 128;
  std::size_t max_pending_output_bytes = 256 << 10;  ///< responses queued before reading stops
  int listen_backlog = 1024;                         ///< listen(2); the kernel caps it (somaxconn)
};

struct Request {
  std::string method;     ///< as sent (methods are case-sensitive)
  std::string target;     ///< as sent, e.g. "/metrics?x=1"
  std::string path;       ///< the target without its query
  int minor_version = 1;  ///< HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  ///< names lower-cased
  bool keep_alive = true;  ///< HTTP/1.1 unless "Connection: close"; 1.0 only with keep-alive

  /// The first header of that (lower-case) name, or "".
  std::string_view header(std::string_view lower_name) const;
};

/// The outcome of parsing the front of a buffer.
struct Parsed {
  enum class State { incomplete, complete, error } state = State::incomplete;
  std::size_t consumed = 0;  ///< complete: bytes of head and body
  int error_status = 0;      ///< error: 400, 413, 414 or 431
  std::string error_text;    ///< error: one line for the response body
  Request request;
};

/// How far parse_request has looked at the request at the front of a connection's buffer, so
/// that each read costs only its new bytes (a head sent a byte at a time is scanned once, not
/// once per byte). Belongs to one buffer whose front does not change between calls: reset it
/// (`= {}`) when the buffer is cleared; parse_request resets it itself when it returns complete
/// or error.
struct RequestScan {
  std::size_t scanned = 0;     ///< bytes of the buffer looked at for line ends
  bool started = false;        ///< the request line's first byte found (empty lines skipped)
  std::size_t start = 0;       ///< started: the request line's first byte
  std::size_t line_start = 0;  ///< the line being scanned
  bool have_request_line = false;
  std::size_t request_line_end = 0;  ///< have_request_line: its '\n'
  std::size_t header_lines = 0;
  bool have_head = false;    ///< the head is complete and parsed: only the body is awaited
  std::size_t need = 0;      ///< have_head: bytes of head and body
  Request request;           ///< have_head: the parsed head
  std::size_t examined = 0;  ///< bytes looked at in all, over every call (tests: linear)
};

/// Parses one request at the front of `buf`. Incomplete as long as nothing seen breaks a limit.
/// A body (at most `max_body_bytes`, by Content-Length) is consumed and dropped: nothing served
/// takes one. Known methods other than GET and HEAD parse (the router answers 405); unknown
/// ones are an error (400). With `scan`, it goes on from where the last call on the same buffer
/// (now perhaps longer) stopped; the outcome is the same as a parse of the whole buffer.
Parsed parse_request(std::string_view buf, const Limits& limits, RequestScan& scan);
Parsed parse_request(std::string_view buf, const Limits& limits);

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  ///< extra, e.g. Allow
  bool close = false;  ///< close the connection after this response
};

/// Appends the response. `head_only` (HEAD) keeps Content-Length but leaves out the body;
/// `keep_alive` false adds "Connection: close", true on HTTP/1.0 "Connection: keep-alive".
void serialize(const Response& r, bool head_only, bool keep_alive, int minor_version,
               std::string& out);

/// "OK", "Not Found", …
std::string_view reason_phrase(int status);

/// A plain-text error response that closes the connection.
Response error_response(int status, std::string_view text);

}  // namespace sonde::http
