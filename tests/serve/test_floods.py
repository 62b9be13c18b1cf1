"""`sonde serve` under floods of hostile or greedy clients (issue 21, finding 8): a scrape that
behaves is answered in time, refused clients read the documented 503, connections whose output
is not taken give their slot to a new client, and memory comes back after a flood.

Run by ctest (tests/CMakeLists.txt, serve_floods) with SONDE_BINARY set. The floods run in a
child process (its own interpreter), so that the measuring client here is not slowed by them.
"""

import gzip
import http.client
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

# The ASan stage runs these too (scripts/test sets ASAN_OPTIONS): the server's code under floods,
# with a latency bound for a slower build; its quarantine keeps freed memory, so the memory check
# is the normal build's. The TSan stage leaves this file out (a 5-15x slower server measures TSan).
SANITIZED = "ASAN_OPTIONS" in os.environ or "TSAN_OPTIONS" in os.environ
P99_BOUND_S = 3.0 if SANITIZED else 1.0

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_serve import Server, read_responses, samples  # noqa: E402

MAX_PER_CLIENT = 128

# A plugin with many devices: a page of a few hundred kB, as on a large node with per-job series
# (the 7 kB page of this test machine compresses too fast to show anything).
BIG_PLUGIN = textwrap.dedent("""\
    import sys
    N = 6000
    for line in sys.stdin:
        if '"op":"setup"' in line:
            print('{"ok":true,"devices":{"system":%d},"context":false}' % N, flush=True)
        elif '"op":"tick"' in line:
            tick = int(line.split('"tick":')[1].split(',')[0].split('}')[0])
            vals = ",".join(str((i * 7919 + tick * 13) % 100003 / 7.0) for i in range(N))
            print('{"ok":true,"tick":%d,"values":{"system":[%s]}}' % (tick, vals), flush=True)
        elif '"op":"shutdown"' in line:
            break
""")

# The flooding clients: CONNS connections spread over loopback addresses, each sending pipelined
# gzip'd requests as fast as the server takes them and reading (and dropping) every answer.
FLOOD = textwrap.dedent("""\
    import selectors, socket, sys, time
    port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    req = (b"GET /metrics HTTP/1.1\\r\\nHost: x\\r\\nAccept-Encoding: gzip\\r\\n\\r\\n") * 20
    sel = selectors.DefaultSelector()
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5,
                                     source_address=("127.0.0.%d" % (1 + i % 3), 0))
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    print("ready", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, ev in sel.select(0.2):
            s = key.fileobj
            try:
                if ev & selectors.EVENT_READ:
                    s.recv(1 << 20)
                if ev & selectors.EVENT_WRITE:
                    s.send(req)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                sel.unregister(s)
""")


def write_big_plugin_config(tmp_path):
    plugin = tmp_path / "big.py"
    plugin.write_text(BIG_PLUGIN)
    config = tmp_path / "sonde.yaml"
    config.write_text(
        "collectors:\n  Big:\n    _target_: exec\n"
        f"    command: [{sys.executable}, {plugin}]\n"
        "    handler: {_target_: PerDeviceAggregateHandler, prefix: v_}\n")
    return config


def good_scrape(port, source="127.0.0.4", timeout=15):
    """One scrape as Prometheus makes it (gzip, its own connection): (seconds, text)."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                      source_address=(source, 0))
    conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
    r = conn.getresponse()
    body = r.read()
    conn.close()
    took = time.monotonic() - t0
    assert r.status == 200
    assert r.getheader("Content-Encoding") == "gzip"
    return took, gzip.decompress(body).decode()


def test_gzip_flood_does_not_delay_a_good_scrape(tmp_path):
    """300 connections from 3 addresses pipeline gzip'd /metrics: a good scrape's p99 stays
    under 1 s (it took 5-12 s when every scrape compressed the page on the loop's thread)."""
    s = Server("--config", str(write_big_plugin_config(tmp_path)))
    flood = None
    try:
        time.sleep(1)
        _, text = good_scrape(s.port)
        assert "sonde_plugin_big_v_5999 " in text, text[:500]  # the big page is there
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, str(s.port), "300", "12"],
                                 stdout=subprocess.PIPE, text=True)
        assert flood.stdout.readline().strip() == "ready"
        time.sleep(1)
        took = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            t, text = good_scrape(s.port)
            took.append(t)
            # Each scrape's own lines follow the cached page, in the same gzip member.
            v = samples(text)
            assert v["sonde_http_connections"] >= 250, "\n".join(l for l in text.splitlines() if l.startswith("sonde_http"))
            time.sleep(0.1)
        took.sort()
        p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
        print(f"good scrapes: {len(took)}, median {took[len(took) // 2]:.3f} s, p99 {p99:.3f} s")
        assert p99 < P99_BOUND_S, took
    finally:
        if flood:
            flood.kill()
            flood.wait()
        assert s.stop()[0] == 0


class LimitedServer(Server):
    """A `sonde serve` child whose open-file limit is `nofile` (soft and hard), so that its
    connection cap is (nofile - 256) / 2 (cmd_serve.cpp): 128 for 512."""

    def __init__(self, *args, nofile=512):
        import resource

        def limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        real_popen = subprocess.Popen
        subprocess.Popen = lambda *a, **k: real_popen(*a, preexec_fn=limit, **k)
        try:
            super().__init__(*args)
        finally:
            subprocess.Popen = real_popen


class SlowReaders:
    """`n` connections (spread over `sources`) that pipeline many requests and read nothing: the
    server's answers stay queued (a small receive buffer keeps the kernel from taking them)."""

    def __init__(self, port, n, sources):
        self.socks = []
        for i in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(5)
            s.bind((sources[i % len(sources)], 0))
            s.connect(("127.0.0.1", port))
            # Answers of several MB: more than the kernel's socket buffers take, so that they
            # queue in the server, up to its bound (max_pending_output_bytes).
            s.setblocking(False)
            try:
                s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 1000)
            except OSError:
                pass  # a full buffer, or refused or evicted meanwhile
            self.socks.append(s)

    def close(self):
        for s in self.socks:
            s.close()


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until_idle(pid, timeout=15):
    """Until the server spends under 5% of a CPU for half a second (the floods have filled what
    they can: the kernel's socket buffers, then the server's own bound)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = cpu_s(pid)
        time.sleep(0.5)
        if cpu_s(pid) - before < 0.025:
            return
    raise AssertionError("the server stays busy")


def connections_open(server):
    status, _, body = server.get(timeout=5)
    assert status == 200
    return samples(body)


def test_readers_that_do_not_read_give_their_slot_to_a_new_client():
    """At the connection cap with every connection's answers stalled, a new scraper used to be
    refused until the write deadline (10 s); now a stalled one (1 s without progress) is
    evicted for it."""
    s = LimitedServer()
    slow = None
    try:
        slow = SlowReaders(s.port, 128, ["127.0.0.1", "127.0.0.2"])
        wait_until_idle(s.proc.pid)  # every socket full: nothing moves any more
        time.sleep(1.5)  # their output stalled for over a second
        t0 = time.monotonic()
        took, text = good_scrape(s.port, source="127.0.0.3", timeout=3)
        assert time.monotonic() - t0 < 3
        assert samples(text)['sonde_http_connections_closed_total{reason="evicted"}'] >= 1
    finally:
        if slow:
            slow.close()
        assert s.stop()[0] == 0


def test_refused_clients_read_the_503():
    """Over the per-address cap, a client that has sent its request reads 503 (docs/security.md),
    not a reset that destroys the answer."""
    s = LimitedServer(nofile=1024)  # cap 384, 128 per address
    held = []
    try:
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=5)
                for _ in range(MAX_PER_CLIENT)]
        for s_ in held:  # under way, so that none of them is the one evicted
            s_.send(b"GET / HTTP/1.1\r\n")
        time.sleep(0.3)
        replies = []
        for _ in range(30):
            c = socket.create_connection(("127.0.0.1", s.port), timeout=5)
            c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            replies.append(read_responses(c, timeout=5))
            c.close()
        bad = [r[:40] for r in replies if not r.startswith(b"HTTP/1.1 503 ")]
        assert not bad, f"{len(bad)} of 30 refused clients did not read the 503: {bad[:3]}"
        v = connections_open_from(s, "127.0.0.2")
        assert v['sonde_http_connections_closed_total{reason="per_client_limit"}'] >= 30
    finally:
        for s_ in held:
            s_.close()
        assert s.stop()[0] == 0


def connections_open_from(server, source):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5,
                                      source_address=(source, 0))
    conn.request("GET", "/metrics")
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    assert r.status == 200
    return samples(body)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(SANITIZED, reason="a sanitizer's quarantine keeps freed memory")
def test_memory_comes_back_after_floods_of_slow_readers():
    """Five rounds of readers that do not read (answers queued up to the output bound on every
    connection at the cap): the server's memory afterwards is within 20 MB of the start (it
    kept ~the flood's size, and crept up round after round)."""
    s = LimitedServer(nofile=768)  # cap 256
    try:
        for _ in range(3):
            scrapes_before = connections_open(s)["sonde_scrapes_total"]
        start = rss_kib(s.proc.pid)
        peaks = []
        for _ in range(5):
            slow = SlowReaders(s.port, 256, ["127.0.0.1", "127.0.0.2", "127.0.0.3"])
            time.sleep(1)
            peaks.append(rss_kib(s.proc.pid))
            slow.close()
            deadline = time.monotonic() + 5
            while connections_open_from(s, "127.0.0.4")["sonde_http_connections"] > 1:
                assert time.monotonic() < deadline, "the flood's connections stay open"
                time.sleep(0.1)
        time.sleep(1.2)  # the release is at most once a second
        scrapes = connections_open(s)["sonde_scrapes_total"] - scrapes_before
        end = rss_kib(s.proc.pid)
        print(f"RSS start {start} KiB, flood peaks {peaks} KiB, end {end} KiB, {scrapes} answers")
        assert scrapes > 5 * 256 * 10, "the flood was not answered: not a test"
        assert end - start < 20 * 1024, (start, peaks, end)
    finally:
        assert s.stop()[0] == 0
