"""`sonde serve --tls-cert/--tls-key` against real TLS clients (curl, Python's ssl, Prometheus)
with a self-signed certificate made by `openssl req` here, and the file errors.

Run by ctest (tests/CMakeLists.txt) with SONDE_BINARY set.
"""

import concurrent.futures
import gzip
import http.client
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

SONDE = os.environ.get("SONDE_BINARY", "sonde")


def make_cert(d, name="sonde", cn="localhost"):
    cert, key = os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={cn}",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True)
    os.chmod(key, 0o600)
    return cert, key


@pytest.fixture(scope="module")
def certs():
    with tempfile.TemporaryDirectory(prefix="sonde-tls-") as d:
        cert, key = make_cert(d)
        other_cert, other_key = make_cert(d, "other")
        yield {"dir": d, "cert": cert, "key": key, "other_cert": other_cert,
               "other_key": other_key}


class TlsServer:
    def __init__(self, cert, key, *args):
        self.proc = subprocess.Popen(
            [SONDE, "serve", "--listen", "127.0.0.1:0", "--interval", "0.2", "--tls-cert", cert,
             "--tls-key", key, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        self.warnings = []
        line = self.proc.stderr.readline()
        while line.startswith("sonde: warning:"):  # e.g. an unsalted hash in the password file
            self.warnings.append(line)
            line = self.proc.stderr.readline()
        m = re.search(r"https://127\.0\.0\.1:(\d+)/metrics", line)
        if not m:
            self.proc.kill()
            raise AssertionError(f"no https listening line: {line!r}")
        self.port = int(m.group(1))
        self.url = f"https://127.0.0.1:{self.port}/metrics"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=10)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return rc, err


@pytest.fixture
def server(certs):
    s = TlsServer(certs["cert"], certs["key"])
    yield s
    rc, err = s.stop()
    assert rc == 0, err


def context(cafile):
    return ssl.create_default_context(cafile=cafile)


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_curl_with_the_ca_certificate(server, certs):
    r = subprocess.run(["curl", "-sS", "--fail", "--cacert", certs["cert"], server.url],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "sonde_memory_used_bytes " in r.stdout
    # Without the CA the client refuses the self-signed certificate.
    r = subprocess.run(["curl", "-sS", server.url], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "certificate" in r.stderr.lower()


def test_python_ssl_keep_alive_gzip_and_promtool(server, certs):
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=10,
                                       context=context(certs["cert"]))
    bodies = []
    for _ in range(5):  # one TLS connection, five requests
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        body = r.read()
        assert r.status == 200
        assert r.getheader("Content-Encoding") == "gzip"
        bodies.append(gzip.decompress(body).decode())
    assert conn.sock.version() in ("TLSv1.2", "TLSv1.3")
    conn.close()
    counts = [samples(b)["sonde_scrapes_total"] for b in bodies]
    assert counts == sorted(counts) and len(set(counts)) == 5
    assert samples(bodies[-1])["sonde_http_connections_accepted_total"] == 1
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    r = subprocess.run([promtool, "check", "metrics"], input=bodies[-1], capture_output=True,
                       text=True)
    assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr


def test_50_concurrent_tls_scrapes(server, certs):
    ctx = context(certs["cert"])

    def scrape(_):
        with urllib.request.urlopen(server.url, timeout=20, context=ctx) as r:
            return r.status, r.read().decode()

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(scrape, range(50)))
    assert all(status == 200 and "sonde_memory_used_bytes " in body for status, body in results)


def test_plain_http_and_garbage_on_the_tls_port_are_closed(server, certs):
    for payload in (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"\x16\x03\x01\x00\x05hello"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(payload)
            data = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except ConnectionResetError:
                pass
            assert b"HTTP/1.1 200" not in data and b"sonde_" not in data
    # A client that trusts another certificate gives up; the server keeps serving.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(server.url, timeout=10, context=context(certs["other_cert"]))
    with urllib.request.urlopen(server.url, timeout=10, context=context(certs["cert"])) as r:
        body = r.read().decode()
    assert samples(body)['sonde_http_connections_closed_total{reason="tls_error"}'] >= 2


def run_serve(*args):
    return subprocess.run([SONDE, "serve", "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=30)


def test_file_errors(certs, tmp_path):
    cert, key = certs["cert"], certs["key"]
    missing = str(tmp_path / "nope.key")
    r = run_serve("--tls-cert", cert, "--tls-key", missing)
    assert r.returncode == 2 and f"--tls-key {missing}: No such file" in r.stderr, r.stderr
    r = run_serve("--tls-cert", str(tmp_path / "nope.crt"), "--tls-key", key)
    assert r.returncode == 2 and "--tls-cert" in r.stderr and "No such file" in r.stderr
    # A private key others can read is refused, as configurations others can write are.
    loose = tmp_path / "loose.key"
    shutil.copy(key, loose)
    os.chmod(loose, 0o644)
    r = run_serve("--tls-cert", cert, "--tls-key", str(loose))
    assert r.returncode == 2, r.stderr
    assert "readable by others" in r.stderr and "chmod 600" in r.stderr and str(loose) in r.stderr
    # The key of another certificate, a certificate that is not PEM, one flag without the other.
    r = run_serve("--tls-cert", cert, "--tls-key", certs["other_key"])
    assert r.returncode == 2 and "does not match" in r.stderr, r.stderr
    garbage = tmp_path / "garbage.crt"
    garbage.write_text("not a certificate\n")
    r = run_serve("--tls-cert", str(garbage), "--tls-key", key)
    assert r.returncode == 2 and "expected a PEM certificate" in r.stderr, r.stderr
    r = run_serve("--tls-cert", cert)
    assert r.returncode == 2 and "--tls-key" in r.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_prometheus_scrapes_over_tls(server, certs):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus (Debian package prometheus) is required"
    with tempfile.TemporaryDirectory(prefix="sonde-prom-tls-") as tmp:
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: sonde\n    scheme: https\n"
                    f"    tls_config:\n      ca_file: {certs['cert']}\n"
                    "    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{server.port}']\n")
        port = free_port()
        log = open(os.path.join(tmp, "prometheus.log"), "w+")
        prom = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            api = f"http://127.0.0.1:{port}/api/v1/query?query="
            found = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not found:
                try:
                    q = urllib.parse.quote('sonde_memory_used_bytes{job="sonde"}')
                    with urllib.request.urlopen(api + q, timeout=5) as r:
                        found = json.load(r)["data"]["result"]
                except (urllib.error.URLError, ConnectionError, KeyError, ValueError):
                    pass
                time.sleep(0.5)
            log.seek(0)
            assert found, "no sample scraped over TLS in 30 s; log:\n" + log.read()[-3000:]
            assert float(found[0]["value"][1]) > 0
        finally:
            prom.terminate()
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
            log.close()


# bcrypt of "secret" at cost 10, as `htpasswd -nbB alice secret` writes it ($2y$) and libxcrypt
# (Python's crypt module, METHOD_BLOWFISH) made it.
BCRYPT_SECRET = "$2y$10$DspCtxjkmkAaWb7Pk2LBCeD.RlJSeoIVV0Gjfp28zq24hBre05Wu2"


def test_basic_auth_over_tls(certs, tmp_path):
    users = tmp_path / "users"
    digest = subprocess.run(["sha256sum"], input="hunter2", capture_output=True, text=True,
                            check=True).stdout.split()[0]
    # alice: bcrypt (as Prometheus' exporter-toolkit takes it); bob: an unsalted SHA-256 of an
    # older file, still accepted but named in a warning.
    users.write_text(f"# who may scrape\nalice:{BCRYPT_SECRET}\nbob:{digest}\n")
    os.chmod(users, 0o600)
    s = TlsServer(certs["cert"], certs["key"], "--basic-auth-file", str(users))
    try:
        curl = ["curl", "-sS", "--cacert", certs["cert"], "-o", "/dev/null", "-w",
                "%{http_code} %header{www-authenticate}"]
        for creds in (["-u", "alice:secret"], ["-u", "bob:hunter2"]):
            for _ in range(3):  # the second and third from the cache of accepted pairs
                out = subprocess.run(curl + creds + [s.url], capture_output=True, text=True,
                                     timeout=30).stdout
                assert out.startswith("200"), (creds, out)
        for creds in ([], ["-u", "alice:wrong"], ["-u", "bob:secret"], ["-u", "alice:hunter2"]):
            out = subprocess.run(curl + creds + [s.url], capture_output=True, text=True,
                                 timeout=30).stdout
            assert out.startswith("401 Basic realm=\"sonde\""), (creds, out)
    finally:
        rc, err = s.stop()
        assert rc == 0, err
    assert any(f"{users}: line 3 holds an unsalted SHA-256" in w for w in s.warnings), s.warnings
    os.chmod(users, 0o644)
    r = run_serve("--basic-auth-file", str(users))
    assert r.returncode == 2 and "readable by others" in r.stderr, r.stderr
    os.chmod(users, 0o600)
    users.write_text("alice:not-a-digest\n")
    r = run_serve("--basic-auth-file", str(users))
    assert r.returncode == 2 and f"{users}:1: expected a crypt(3) hash" in r.stderr, r.stderr


def test_secrets_under_the_trust_rule(certs, tmp_path):
    """Issue 21, finding 4: the key, the certificate and the password file pass the trust rule on
    the descriptor they are read from (owner, mode, every directory above them); basic auth
    without TLS is said on stderr."""
    cert, key = certs["cert"], certs["key"]
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    for name, src in (("k.key", key), ("c.crt", cert)):
        shutil.copy(src, open_dir / name)
        os.chmod(open_dir / name, 0o600)
    r = run_serve("--tls-cert", cert, "--tls-key", str(open_dir / "k.key"))
    assert r.returncode == 2, r.stderr
    assert f"refusing --tls-key {open_dir}/k.key: its directory is writable by others" in r.stderr
    r = run_serve("--tls-cert", str(open_dir / "c.crt"), "--tls-key", key)
    assert r.returncode == 2, r.stderr
    assert f"refusing --tls-cert {open_dir}/c.crt: its directory is writable by others" in r.stderr
    if os.geteuid() == 0:  # a key (mode 600) owned by another user
        theirs = tmp_path / "theirs.key"
        shutil.copy(key, theirs)
        os.chmod(theirs, 0o600)
        os.chown(theirs, 4242, 4242)
        r = run_serve("--tls-cert", cert, "--tls-key", str(theirs))
        assert r.returncode == 2, r.stderr
        assert "its file is owned by uid 4242" in r.stderr, r.stderr
    users = tmp_path / "users"
    digest = subprocess.run(["sha256sum"], input="secret", capture_output=True, text=True,
                            check=True).stdout.split()[0]
    users.write_text(f"alice:{digest}\n")
    os.chmod(users, 0o600)
    proc = subprocess.Popen([SONDE, "serve", "--listen", "127.0.0.1:0", "--basic-auth-file",
                             str(users)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stderr.readline(), proc.stderr.readline(), proc.stderr.readline()]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert any("warning: --basic-auth-file without --tls-cert/--tls-key" in l for l in lines), lines
