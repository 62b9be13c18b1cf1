"""`sonde jobstats` against a Prometheus that does not play fair (issue 21): the client bounds
everything the server sends. A local HTTP server answers every request with one hostile answer:
a body larger than the cap, a gzip bomb, a drip of one byte a second, an error whose fields have
the wrong types, escape sequences meant for the terminal, answers slow enough to exhaust the
command's deadline. Each case: a clear one-line error naming the bound, exit 1 (never a signal),
within its deadline, with memory bounded (the child's own ru_maxrss from wait4).

Run by ctest (tests/CMakeLists.txt) with SONDE_BINARY set.
"""
import gzip
import http.server
import json
import os
import socketserver
import subprocess
import threading
import time
import zlib

import pytest

SONDE = os.environ.get("SONDE_BINARY", "sonde")
# Peak RSS allowed to sonde (MiB): the caps below are 8 and 16 MiB; a sanitizer build's shadow
# memory and quarantine (scripts/test sets ASAN_OPTIONS / TSAN_OPTIONS) multiply what it holds.
RSS_BOUND_MIB = 600 if ("ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ) else 200


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def make_handler(mode):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(n)
            mode(self)

    return Handler


@pytest.fixture
def serve():
    servers = []

    def start(mode):
        s = Server(("127.0.0.1", 0), make_handler(mode))
        threading.Thread(target=s.serve_forever, daemon=True).start()
        servers.append(s)
        return f"http://127.0.0.1:{s.server_address[1]}"

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def jobstats(url, *extra, timeout=120):
    """Runs sonde jobstats; returns (exit status, stderr, seconds)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONDE_PROMETHEUS")}
    t0 = time.monotonic()
    p = subprocess.Popen([SONDE, "jobstats", "4242", "--prometheus", url, *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = b""
    try:
        _, err = p.communicate(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
    return p.returncode, err.decode("utf-8", "replace"), time.monotonic() - t0


def max_rss_mib():
    import resource
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def send(h, body, headers=(), status=200):
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    for k, v in headers:
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def test_a_body_over_the_cap_is_refused_before_it_is_held(serve):
    chunk = b" " * (1 << 20)

    def big(h):  # 64 MiB of JSON whitespace, streamed
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(64 * len(chunk)))
        h.end_headers()
        try:
            for _ in range(64):
                h.wfile.write(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass

    rc, err, _ = jobstats(serve(big), "--prometheus-max-mib", "8")
    assert rc == 1, err
    assert "larger than 8 MiB after decompression (--prometheus-max-mib)" in err, err
    assert max_rss_mib() < RSS_BOUND_MIB, max_rss_mib()


def test_a_gzip_bomb_stops_at_the_cap(serve):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip
    zeros = b"0" * (1 << 20)
    bomb = b"".join(z.compress(zeros) for _ in range(512)) + z.flush()  # 512 MiB inflated
    assert len(bomb) < 2 << 20

    def inflate_me(h):
        send(h, bomb, [("Content-Encoding", "gzip")])

    rc, err, _ = jobstats(serve(inflate_me), "--prometheus-max-mib", "16")
    assert rc == 1, err
    assert "larger than 16 MiB" in err, err
    assert max_rss_mib() < RSS_BOUND_MIB, max_rss_mib()


def test_a_drip_is_cut_at_the_request_deadline(serve):
    def drip(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", "100000")
        h.end_headers()
        try:
            for _ in range(60):
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(0.5)
        except (BrokenPipeError, ConnectionResetError):
            pass

    rc, err, took = jobstats(serve(drip), "--prometheus-timeout", "2")
    assert rc == 1, err
    assert "no complete answer within 2 s (--prometheus-timeout)" in err, err
    assert took < 10, took


def test_slow_answers_end_at_the_command_deadline(serve):
    def slow(h):
        time.sleep(0.8)
        send(h, json.dumps({"status": "success",
                            "data": {"resultType": "vector", "result": []}}).encode())

    rc, err, took = jobstats(serve(slow), "--prometheus-timeout", "5",
                             "--prometheus-command-timeout", "0.5")
    assert rc == 1, err
    assert "--prometheus-command-timeout" in err, err
    assert took < 5, took


@pytest.mark.parametrize("answer", [
    {"status": "error", "errorType": 5},
    {"status": "error", "errorType": ["x"], "error": {"a": 1}},
    {"status": "error", "error": None},
])
def test_an_error_with_fields_of_other_types_is_an_error_not_an_abort(serve, answer):
    def error(h):
        send(h, json.dumps(answer).encode(), status=400)

    rc, err, _ = jobstats(serve(error))
    assert rc == 1, err  # was SIGABRT (rc -6): an uncaught type_error
    assert "Prometheus says error" in err, err


def test_what_the_server_says_reaches_the_terminal_escaped(serve):
    forged = "\x1b[2J\x1b[31mboom\nsonde: jobstats: all is fine\r"

    def evil(h):
        send(h, json.dumps({"status": "error", "errorType": "bad_data",
                            "error": forged}).encode(), status=400)

    rc, err, _ = jobstats(serve(evil))
    assert rc == 1, err
    assert "\x1b" not in err and "\r" not in err, repr(err)
    assert "\\x1b[2J" in err, err
    assert "\nsonde: jobstats: all is fine" not in err, err
