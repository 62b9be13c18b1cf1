"""`sonde serve` against real clients: urllib, raw sockets, promtool and a Prometheus server.

Run by ctest (tests/CMakeLists.txt) with SONDE_BINARY set; needs Debian's prometheus package
(promtool and prometheus), see scripts/install-deps --tests.
"""

import concurrent.futures
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

SONDE = os.environ.get("SONDE_BINARY", "sonde")
OM_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
             "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


class Server:
    """A `sonde serve` child on an ephemeral loopback port."""

    def __init__(self, *args, listen="127.0.0.1:0"):
        self.proc = subprocess.Popen(
            [SONDE, "serve", "--listen", listen, "--interval", "0.2", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stderr.readline()
        self.first_line = line
        m = re.search(r"http://[0-9.]+:(\d+)/metrics", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"no listening line from sonde serve: {line!r}")
        self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"

    def get(self, path="/metrics", headers=None, method="GET", timeout=10):
        req = urllib.request.Request(self.base + path, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read().decode()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()
        return rc, err


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


def assert_promtool_clean(body):
    """`promtool check metrics` finds neither an error nor a lint problem in `body`."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


def samples(text):
    """name{labels} -> value for every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


def test_prometheus_text_format(server):
    status, headers, body = server.get()
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    s = samples(body)
    assert s["sonde_memory_used_bytes"] > 0
    assert s["sonde_memory_total_bytes"] >= s["sonde_memory_used_bytes"]
    assert any(k.startswith('sonde_cpu_utilization_ratio{cpu="') for k in s)
    assert s["sonde_processes"] >= 1
    assert 'sonde_collector_duration_seconds_total{collector="cpu"}' in s
    assert 'sonde_collector_errors_total{collector="cpu"}' in s
    assert 'sonde_collector_disabled{collector="cpu"}' in s
    assert s['sonde_build_info{version="0.1.0"}'] == 1
    assert s["sonde_scrapes_total"] == 1
    assert samples(server.get()[2])["sonde_scrapes_total"] == 2
    # Every family has HELP and TYPE before its samples.
    typed = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    helped = set(re.findall(r"^# HELP (\S+) ", body, re.M))
    assert typed == helped
    for key in s:
        assert key.split("{")[0] in typed, key
    assert "# EOF" not in body


def test_counters_never_decrease(server):
    first = samples(server.get()[2])
    time.sleep(0.6)
    second = samples(server.get()[2])
    counters = [k for k in first if k.split("{")[0].endswith("_total")]
    assert "sonde_disk_written_bytes_total" in counters
    for k in counters:
        assert second[k] >= first[k], k
    assert second["sonde_ticks_total"] > first["sonde_ticks_total"]


def test_openmetrics_when_asked(server):
    status, headers, body = server.get(headers={"Accept": OM_ACCEPT})
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n")
    assert "# TYPE sonde_disk_read_bytes counter\n# UNIT sonde_disk_read_bytes bytes\n" in body
    assert "\nsonde_disk_read_bytes_total " in body
    assert "# TYPE sonde_build info\n" in body


def test_promtool_check_metrics_no_errors_no_lint(server):
    # A second tick has rates; also run it on the per-user/per-job variant below.
    time.sleep(0.5)
    assert_promtool_clean(server.get()[2])


def test_promtool_per_user_per_job():
    s = Server("--per-user", "--per-job", "--max-series", "1")
    try:
        time.sleep(0.5)
        body = s.get()[2]
        values = samples(body)
        users = [k for k in values if k.startswith("sonde_user_processes{")]
        assert users, body
        assert len(users) <= 2  # one own series, then "other"
        assert 'sonde_series_folded{label="user"}' in values
        assert_promtool_clean(body)
    finally:
        assert s.stop()[0] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="adds a user to /etc/passwd: root only")
def test_a_user_name_that_is_not_utf8_keeps_the_page_valid():
    """Issue 21, finding 9: a real user whose name is Latin-1 (not UTF-8) running a process; the
    --per-user page names it by its uid (two such names made valid with U+FFFD could collide)
    and promtool accepts the whole page."""
    import fcntl
    uid = 45678
    name = b"caf\xe9-\xff"
    line = name + b":x:%d:%d::/nonexistent:/usr/sbin/nologin\n" % (uid, uid)

    def edit_passwd(change):
        # As lckpwdf(3) does, so that a useradd of another test never interleaves with this.
        with open("/etc/.pwd.lock", "w") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX)
            with open("/etc/passwd", "rb") as f:
                text = f.read()
            with open("/etc/passwd", "wb") as f:
                f.write(change(text))

    edit_passwd(lambda t: t + line)
    child = None
    s = None
    try:
        child = subprocess.Popen(["sleep", "60"], user=uid, group=uid)
        s = Server("--per-user", "--max-series", "100")
        time.sleep(0.6)
        body = s.get()[2]
        assert 'sonde_user_processes{user="%d"} 1' % uid in body, \
            [l for l in body.splitlines() if "user=" in l]
        assert_promtool_clean(body)
    finally:
        if child:
            child.kill()
            child.wait()
        if s:
            assert s.stop()[0] == 0
        edit_passwd(lambda t: b"".join(l for l in t.splitlines(keepends=True) if l != line))


def test_index_404_405_head(server):
    status, headers, body = server.get("/")
    assert status == 200 and 'href="/metrics"' in body
    assert server.get("/nope")[0] == 404
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, _ = server.get("/metrics", method=method)
        assert status == 405, method
        assert headers.get("Allow") == "GET, HEAD"
    status, headers, body = server.get("/metrics", method="HEAD")
    assert status == 200 and body == ""


def test_100_concurrent_scrapes(server):
    def scrape(_):
        status, headers, body = server.get()
        return status, body

    with concurrent.futures.ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(scrape, range(100)))
    assert len(results) == 100
    for status, body in results:
        assert status == 200
        assert "sonde_memory_used_bytes " in body
        assert re.search(r"^sonde_scrapes_total \d+$", body, re.M)
    counts = sorted(samples(body)["sonde_scrapes_total"] for _, body in results)
    assert counts == sorted(set(counts))  # every scrape counted once


def raw_exchange(port, payload, read_timeout=10.0):
    """Sends bytes, returns what came back (b"" when the server closed the connection)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
                if b"\r\n\r\n" in data:
                    break
        except ConnectionResetError:
            pass
        return data


MALFORMED = {
    "garbage": b"\x00\xff\xfe garbage \x01\x02\r\n\r\n",
    "bad_method": b"BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
    "bad_version": b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
    "no_version": b"GET /metrics\r\n\r\n",
    "huge_uri": b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "huge_header": b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 200_000 + b"\r\n\r\n",
    "huge_body": b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n"
                 + b"c" * 100_000,
    "get_with_body": b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000\r\n\r\n"
                     + b"d" * 100_000,
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_requests_get_4xx_and_server_keeps_serving(server, name):
    reply = raw_exchange(server.port, MALFORMED[name])
    if reply:
        m = re.match(rb"HTTP/1\.[01] (\d{3}) ", reply)
        assert m, reply[:200]
        assert 400 <= int(m.group(1)) < 500, reply[:200]
    # else: the server closed the connection, which is also an answer
    status, _, body = server.get()
    assert status == 200 and "sonde_memory_used_bytes " in body


def test_sigterm_and_sigint_exit_0():
    for sig in (signal.SIGTERM, signal.SIGINT):
        s = Server()
        assert s.get()[0] == 200
        s.proc.send_signal(sig)
        assert s.proc.wait(timeout=10) == 0
        s.stop()


def test_bad_listen_is_a_usage_error():
    r = subprocess.run([SONDE, "serve", "--listen", "nonsense"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2
    assert "--listen" in r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_prometheus_scrapes_sonde(server):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus (Debian package prometheus) is required"
    with tempfile.TemporaryDirectory(prefix="sonde-prom-") as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: sonde\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{server.port}']\n")
        port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w+")
        prom = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            api = f"http://127.0.0.1:{port}/api/v1/query?query="

            def query(q):
                try:
                    with urllib.request.urlopen(api + urllib.parse.quote(q), timeout=5) as r:
                        return json.load(r)["data"]["result"]
                except (urllib.error.URLError, ConnectionError, KeyError, ValueError):
                    return []

            deadline = time.monotonic() + 30
            mem = up = []
            while time.monotonic() < deadline:
                mem = query("sonde_memory_used_bytes")
                up = query('up{job="sonde"}')
                if mem and up:
                    break
                time.sleep(0.5)
            log.seek(0)
            assert mem, "no sonde sample in Prometheus after 30 s; log:\n" + log.read()[-3000:]
            assert float(mem[0]["value"][1]) > 0
            assert up and up[0]["value"][1] == "1"
            # Prometheus scraped in OpenMetrics (its default Accept): the counter's _total sample
            # arrived under the family's name too.
            deadline = time.monotonic() + 10
            ticks = []
            while time.monotonic() < deadline and not ticks:
                ticks = query("sonde_ticks_total")
                time.sleep(0.3)
            assert ticks and float(ticks[0]["value"][1]) >= 1
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            log.close()


def test_plugin_columns_become_gauges(tmp_path):
    """The shipped shell plugin (load_0..2 and their avg/min/max) appears as generic gauges."""
    here = os.path.dirname(os.path.abspath(__file__))
    script = os.path.join(here, "..", "..", "examples", "plugins", "exec_shell", "loadavg.sh")
    config = tmp_path / "sonde.yaml"
    config.write_text(
        "collectors:\n  Load-Avg:\n    _target_: exec\n"
        f"    command: [/bin/sh, {os.path.abspath(script)}]\n"
        "    handler: {_target_: PerDeviceAggregateHandler, prefix: load_}\n")
    s = Server("--config", str(config))
    try:
        time.sleep(0.5)
        body = s.get()[2]
        values = samples(body)
        for col in ("load_0", "load_1", "load_2", "load_avg"):
            assert f"sonde_plugin_load_avg_{col}" in values, body
        assert values["sonde_plugin_load_avg_load_0"] >= 0
        assert 'sonde_collector_errors_total{collector="Load-Avg"}' in values
        assert "# TYPE sonde_plugin_load_avg_load_0 gauge" in body
        assert_promtool_clean(body)
    finally:
        assert s.stop()[0] == 0


def test_gpu_columns_map_to_gpu_metrics(tmp_path):
    """Columns named like the GPU collector's become sonde_gpu_* series with a gpu label."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_gpu.sh")
    config = tmp_path / "sonde.yaml"
    config.write_text(
        "collectors:\n  fakegpu:\n    _target_: exec\n"
        f"    command: [/bin/sh, {script}]\n"
        "    handler: {_target_: PerDeviceMultiAggregateHandler, prefix: gpu_,"
        " metrics: [util, band, mem, power]}\n")
    s = Server("--config", str(config))
    try:
        time.sleep(0.5)
        body = s.get()[2]
        v = samples(body)
        assert v['sonde_gpu_utilization_ratio{gpu="0"}'] == 0.5
        assert v['sonde_gpu_utilization_ratio{gpu="1"}'] == 1
        assert v['sonde_gpu_memory_bandwidth_utilization_ratio{gpu="0"}'] == 0.25
        assert v['sonde_gpu_memory_used_bytes{gpu="0"}'] == 1.5 * 2**30
        assert v['sonde_gpu_memory_used_bytes{gpu="1"}'] == 2 * 2**30
        assert v['sonde_gpu_power_watts{gpu="1"}'] == 300.5
        assert not any("gpu_util_avg" in k or "_avg" in k.split("{")[0].replace(
            "sonde_cpu_utilization_average_ratio", "") for k in v), body
        assert_promtool_clean(body)
    finally:
        assert s.stop()[0] == 0


def test_port_in_use_fails_cleanly(server):
    r = subprocess.run([SONDE, "serve", "--listen", f"127.0.0.1:{server.port}"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "cannot listen" in r.stderr
    assert server.get()[0] == 200


# ---- Bounds of the HTTP server (src/http/request.hpp, Limits; docs/prometheus.md) ----
HEADER_TIMEOUT_S = 10
IDLE_TIMEOUT_S = 5
MAX_PER_CLIENT = 128


def read_responses(sock, timeout=10.0):
    """Every byte until the server closes the connection."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def split_responses(data):
    """[(status, headers, body)] of a stream of HTTP/1.1 responses with Content-Length."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data[:200]
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:])}
        n = int(headers["content-length"])
        out.append((status, headers, rest[:n]))
        data = rest[n:]
    return out


def closed_by_server(sock, timeout):
    """True when the server closes `sock` (FIN or reset) within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except (socket.timeout, TimeoutError):
        return False


class SlowClients:
    """`n` connections sending a request head at 1 byte per second (slowloris)."""

    def __init__(self, port, n, source="127.0.0.1"):
        self.socks = [socket.create_connection(("127.0.0.1", port), timeout=5,
                                               source_address=(source, 0)) for _ in range(n)]
        self.payload = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        i = 0
        while not self.done.is_set() and i < len(self.payload):
            for s in self.socks:
                try:
                    s.send(self.payload[i:i + 1])
                except OSError:
                    pass
            i += 1
            self.done.wait(1.0)

    def close(self):
        self.done.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def test_100_slow_clients_do_not_stop_scrapes(server):
    """Two slow clients used to make every scrape time out (a thread each); now 100 cost a few
    kilobytes each, scrapes answer, and each is closed at the header deadline (total, not per
    byte)."""
    slow = SlowClients(server.port, 100)
    try:
        t0 = time.monotonic()
        seen_open = 0
        # A liveness bound (2 s on a loaded 2-core machine), not a benchmark: bench/serve measures.
        while time.monotonic() - t0 < 4:
            status, _, body = server.get(timeout=2)
            assert status == 200
            seen_open = max(seen_open, samples(body)["sonde_http_connections"])
            time.sleep(0.2)
        assert seen_open >= 100  # the slow ones were open meanwhile
        for s in slow.socks:
            remaining = HEADER_TIMEOUT_S + 5 - (time.monotonic() - t0)
            assert closed_by_server(s, max(remaining, 0.1)), "slow client still open"
        body = server.get()[2]
        assert samples(body)['sonde_http_connections_closed_total{reason="header_timeout"}'] >= 100
        assert_promtool_clean(body)
    finally:
        slow.close()


def test_client_over_the_per_address_cap_is_refused(server):
    held = [socket.create_connection(("127.0.0.1", server.port), timeout=5)
            for _ in range(MAX_PER_CLIENT)]
    try:
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        reply = read_responses(extra)
        extra.close()
        # 503 and closed (or, if the reset won the race, just closed): never served.
        assert reply == b"" or reply.startswith(b"HTTP/1.1 503 "), reply[:200]
        # Another client address is served meanwhile.
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=2,
                                          source_address=("127.0.0.2", 0))
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read().decode()
        conn.close()
        assert r.status == 200
        assert samples(body)['sonde_http_connections_closed_total{reason="per_client_limit"}'] >= 1
    finally:
        for s in held:
            s.close()
    # Slots are given back as connections close.
    deadline = time.monotonic() + 10
    while server.get()[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.get()[0] == 200


def test_pipelined_requests_each_get_an_answer_in_order(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        responses = split_responses(read_responses(s))
    assert [r[0] for r in responses] == [200, 200, 404]
    assert b"sonde_memory_used_bytes " in responses[0][2]
    assert b'href="/metrics"' in responses[1][2]
    assert responses[2][1].get("connection") == "close"


def test_idle_kept_alive_connection_is_closed(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = b""
        while b"</html>" not in head:
            chunk = s.recv(65536)
            assert chunk, head
            head += chunk
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"Connection: close" not in head  # kept alive…
        assert closed_by_server(s, IDLE_TIMEOUT_S + 5)  # …until idle too long
    body = server.get()[2]
    assert samples(body)['sonde_http_connections_closed_total{reason="idle_timeout"}'] >= 1


def test_non_loopback_listen_warns_on_stderr():
    s = Server(listen="0.0.0.0:0")
    try:
        assert s.first_line.startswith("sonde: serving http://0.0.0.0:")
        warning = s.proc.stderr.readline()
        assert "warning" in warning and "0.0.0.0" in warning and "exposed" in warning, warning
        assert s.get()[0] == 200
    finally:
        rc, err = s.stop()
    assert rc == 0


def test_loopback_listen_does_not_warn():
    s = Server()
    try:
        assert s.get()[0] == 200
    finally:
        rc, err = s.stop()
    assert rc == 0 and "warning" not in err, err


@pytest.mark.skipif(os.path.isdir("/sys/fs/cgroup/system.slice/slurmstepd.scope")
                    or bool(glob.glob("/sys/fs/cgroup/*/slurm*")),
                    reason="this node puts Slurm jobs in cgroups")
def test_per_job_says_when_jobs_come_from_the_environment():
    s = Server("--per-job")
    try:
        assert s.get()[0] == 200
    finally:
        rc, err = s.stop()
    assert rc == 0
    assert "SLURM_JOB_ID" in err and "any user can set" in err, err
