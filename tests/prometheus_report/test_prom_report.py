"""`sonde jobstats` and `sonde report --prometheus` against a real Prometheus (Debian's
prometheus package) holding a synthetic 3-node job whose figures are known exactly
(synth_job.py); basic auth and bearer tokens through a checking proxy with a path prefix; TLS
with a private CA (Prometheus' own --web.config.file).

Run by ctest (tests/CMakeLists.txt) with SONDE_BINARY set.
"""
import base64
import csv
import http.server
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promtest  # noqa: E402
import synth_job  # noqa: E402

SONDE = os.environ.get("SONDE_BINARY", "sonde")
JOB = "4242"
GIB = 1 << 30


def sonde(*args, env=None, timeout=120):
    e = {k: v for k, v in os.environ.items() if not k.startswith("SONDE_PROMETHEUS")}
    e.update(env or {})
    return subprocess.run([SONDE, *args], capture_output=True, text=True, timeout=timeout, env=e)


@pytest.fixture(scope="module")
def prom():
    tmp = tempfile.mkdtemp(prefix="sonde-promreport-")
    # A job of 60 s, sampled every second, that ended 20 minutes ago; another job (999) on n1.
    start = float(int(time.time()) - 1200)
    om = os.path.join(tmp, "job.om")
    with open(om, "w") as f:
        truth = synth_job.write(f, JOB, "alice", 3, start, 60, 1.0, other_job="999")
    promtest.create_blocks(om, os.path.join(tmp, "data"))
    p = promtest.Prometheus(tmp, os.path.join(tmp, "data"))
    p.truth = truth
    p.tmp = tmp
    yield p
    p.close()
    shutil.rmtree(tmp, ignore_errors=True)


def close(a, b, rel=1e-6, abs_=1e-9):
    return a is not None and math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def check_stats(s, truth):
    assert s["job"] == JOB and s["user"] == "alice"
    assert close(s["from"], truth["from"]) and close(s["to"], truth["to"])
    assert close(s["elapsed_s"], truth["elapsed_s"])
    assert close(s["scrape_interval_s"], truth["interval"], rel=0.05)
    names = [n["name"] for n in s["nodes"]]
    assert names == sorted(truth["nodes"]), names
    for n in s["nodes"]:
        t = truth["nodes"][n["name"]]
        assert n["instance"] == t["instance"]
        for key in ("cpus", "cpu_seconds", "cpu_efficiency", "memory_peak_bytes",
                    "memory_limit_bytes", "read_bytes", "written_bytes"):
            assert close(n[key], t[key]), (n["name"], key, n[key], t[key])
        assert close(n["memory_efficiency"], t["memory_peak_bytes"] / t["memory_limit_bytes"])
        gpus = {g["gpu"]: g for g in n["gpus"]}
        assert sorted(gpus) == sorted(t["gpus"])
        for gid, g in t["gpus"].items():
            assert close(gpus[gid]["utilization_mean"], g["utilization_mean"])
            assert close(gpus[gid]["memory_peak_bytes"], g["memory_peak_bytes"])
        # n1 uses 1.5 of its 2 CPUs: cpu-bound (>= 70 %), the others are not.
        assert ("cpu-bound" in n["tags"]) == (t["cpu_efficiency"] >= 0.7), n
    o = s["overall"]
    tn = truth["nodes"].values()
    assert o["nodes"] == 3
    assert close(o["cpus"], sum(t["cpus"] for t in tn))
    assert close(o["cpu_seconds"], sum(t["cpu_seconds"] for t in tn))
    assert close(o["cpu_efficiency"],
                 sum(t["cpu_seconds"] for t in tn) / sum(t["cpus"] for t in tn) /
                 truth["elapsed_s"])
    assert close(o["memory_peak_bytes"], sum(t["memory_peak_bytes"] for t in tn))
    assert close(o["memory_limit_bytes"], sum(t["memory_limit_bytes"] for t in tn))
    all_gpus = [g for t in tn for g in t["gpus"].values()]
    assert o["gpus"] == len(all_gpus)
    assert close(o["gpu_utilization_mean"],
                 sum(g["utilization_mean"] for g in all_gpus) / len(all_gpus))


def test_jobstats_json_matches_the_truth(prom):
    r = sonde("jobstats", JOB, "--prometheus", prom.url, "--json", "--costs")
    assert r.returncode == 0, r.stderr
    check_stats(json.loads(r.stdout), prom.truth)
    # A handful of requests, whatever the number of nodes.
    assert "Prometheus requests" in r.stderr, r.stderr


def test_jobstats_window_from_the_command_line(prom):
    t = prom.truth
    r = sonde("jobstats", JOB, "--prometheus", prom.url, "--json", "--from", str(t["from"] - 1),
              "--to", str(t["to"]))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert close(s["elapsed_s"], t["to"] - t["from"] + 1)
    n1 = s["nodes"][0]
    assert close(n1["cpu_seconds"], t["nodes"]["n1"]["cpu_seconds"])


def test_jobstats_text(prom):
    r = sonde("jobstats", JOB, "--prometheus", prom.url)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"Job {JOB} (alice): 3 node(s)"), r.stdout
    n1 = next(line for line in lines if line.startswith("n1 "))
    assert "75.0%" in n1 and "cpu-bound" in n1, n1
    assert any(line.startswith("overall") for line in lines), r.stdout
    assert "n1 gpu 1: utilisation 60.0%, memory peak 3.00 GiB" in r.stdout, r.stdout


def test_unknown_job_and_bad_options(prom):
    r = sonde("jobstats", "31337", "--prometheus", prom.url, "--lookback", "7200")
    assert r.returncode == 1
    assert "job 31337: no series sonde_job_processes" in r.stderr and prom.url in r.stderr, r.stderr
    r = sonde("jobstats", JOB, "--prometheus", "ftp://x")
    assert r.returncode == 2 and "http or https" in r.stderr, r.stderr
    r = sonde("jobstats", JOB, "--prometheus", prom.url, "--prometheus-user", "alice")
    assert r.returncode == 2 and "SONDE_PROMETHEUS_PASSWORD" in r.stderr, r.stderr
    r = sonde("jobstats", JOB, "--prometheus", prom.url, "--from", "yesterday")
    assert r.returncode == 2 and "--from yesterday" in r.stderr, r.stderr
    r = sonde("report", "--prometheus", prom.url)
    assert r.returncode == 2 and "--job" in r.stderr, r.stderr
    r = sonde("report", "--job", JOB)
    assert r.returncode == 2, r.stderr


def read_csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return [{k: (float(v) if v != "" else None) for k, v in row.items()} for row in rows]


def test_report_writes_the_multinode_run_and_html(prom, tmp_path):
    t = prom.truth
    run = tmp_path / "run"
    out = tmp_path / "job.html"
    r = sonde("report", "--prometheus", prom.url, "--job", JOB, "--run-dir", str(run), "-o",
              str(out), "--costs")
    assert r.returncode == 0, r.stderr
    m = json.loads((run / "manifest.json").read_text())
    assert m["levels"] == ["slurm", "system"] and m["multinode"]["job"] == JOB
    assert [n["name"] for n in m["nodes"]] == ["n1", "n2", "n3"]
    assert [n["head"] for n in m["nodes"]] == [True, False, False]
    assert m["interval"] == 1.0  # the scrape interval: a 60 s job is far below 11,000 points
    assert m["node_info"]["cpus_per_level"]["slurm"]["num_cpus"] == 9
    assert m["node_info"]["cpus_per_level"]["system"]["num_cpus"] == 12
    for n in m["nodes"]:
        tn = t["nodes"][n["name"]]
        assert n["node_info"]["num_cpus"] == tn["cpus"]
        assert n["node_info"]["memory_limits"]["slurm"] == tn["memory_limit_bytes"]
        assert n["status"] == "complete" and n["rows"] >= 60
        slurm = read_csv(run / "nodes" / n["name"] / "perf_slurm.csv")
        # Steady state (the rate window is 4 scrapes): the job's cores over its CPUs.
        mid = slurm[len(slurm) // 2]
        assert close(mid["cpu_util_avg"], 100 * tn["rate"] / tn["cpus"], rel=1e-6)
        assert close(slurm[-1]["memory"], tn["memory_peak_bytes"] / GIB, rel=1e-6)
        assert close(mid["io_read"], tn["read_bytes"] / t["elapsed_s"], rel=1e-6)
        for gid, g in tn["gpus"].items():
            assert close(mid[f"gpu_util_{gid}"], 100 * g["utilization_mean"])
        system = read_csv(run / "nodes" / n["name"] / "perf_system.csv")
        assert system[0]["cpu_util_max"] == 90 and system[0]["cpu_util_min"] == 2
        assert close(system[len(system) // 2]["io_write"], 1e6)
    agg = read_csv(run / "perf_slurm.csv")
    assert len(agg) == 60 and all(row["nodes"] == 3 for row in agg)
    mid = agg[len(agg) // 2]
    tn = t["nodes"].values()
    # CPU weighted by the nodes' CPUs, memory summed, node min/max of cpu_util_avg.
    assert close(mid["cpu_util_avg"],
                 100 * sum(x["rate"] for x in tn) / sum(x["cpus"] for x in tn))
    assert close(mid["cpu_util_node_max"], 75) and close(mid["cpu_util_node_min"], 1.25)
    assert close(agg[-1]["memory"], sum(x["memory_peak_bytes"] for x in tn) / GIB)
    assert "gpu_util_0" not in mid  # per-device columns stay per node
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") or html.lstrip().lower().startswith("<!doctype")
    assert "Slurm job 4242" in html
    assert "report of job 4242 (3 node(s))" in r.stderr, r.stderr


def test_report_temp_dir_is_removed(prom, tmp_path):
    before = set(os.listdir(tempfile.gettempdir()))
    out = tmp_path / "r.html"
    r = sonde("report", "--prometheus", prom.url, "--job", JOB, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 10000
    left = [d for d in set(os.listdir(tempfile.gettempdir())) - before
            if d.startswith("sonde-prom-")]
    assert not left, left


# ---- Authentication through a proxy that checks it (and a path prefix) ----

class AuthProxy(http.server.ThreadingHTTPServer):
    def __init__(self, upstream, expect):
        self.upstream = upstream
        self.expect = expect  # the Authorization header value required
        self.seen = []
        super().__init__(("127.0.0.1", 0), ProxyHandler)


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        auth = self.headers.get("Authorization")
        self.server.seen.append(auth)
        if auth != self.server.expect:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="prom"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if not self.path.startswith("/prom/"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        req = urllib.request.Request(self.server.upstream + self.path[len("/prom"):], data=body,
                                     headers={"Content-Type": self.headers["Content-Type"]})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, data, ctype = r.status, r.read(), r.headers["Content-Type"]
        except urllib.error.HTTPError as e:
            status, data, ctype = e.code, e.read(), e.headers["Content-Type"]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def with_proxy(prom, expect, fn):
    proxy = AuthProxy(prom.url, expect)
    th = threading.Thread(target=proxy.serve_forever, daemon=True)
    th.start()
    try:
        fn(f"http://127.0.0.1:{proxy.server_address[1]}/prom", proxy)
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_basic_auth(prom, tmp_path):
    expect = "Basic " + base64.b64encode(b"alice:s3cr:et").decode()

    def run(url, proxy):
        r = sonde("jobstats", JOB, "--prometheus", url, "--json", "--prometheus-user", "alice",
                  env={"SONDE_PROMETHEUS_PASSWORD": "s3cr:et"})
        assert r.returncode == 0, r.stderr
        check_stats(json.loads(r.stdout), prom.truth)
        pw = tmp_path / "pw"
        pw.write_text("s3cr:et\n")
        pw.chmod(0o600)
        r = sonde("jobstats", JOB, "--prometheus", url, "--prometheus-user", "alice",
                  "--prometheus-password-file", str(pw))
        assert r.returncode == 0, r.stderr
        assert "warning" not in r.stderr, r.stderr
        # The rule for every secret (docs/security.md): its group may read it, others may not.
        pw.chmod(0o640)
        r = sonde("jobstats", JOB, "--prometheus", url, "--prometheus-user", "alice",
                  "--prometheus-password-file", str(pw))
        assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
        pw.chmod(0o644)
        r = sonde("jobstats", JOB, "--prometheus", url, "--prometheus-user", "alice",
                  "--prometheus-password-file", str(pw))
        assert r.returncode == 2 and "readable by others" in r.stderr, r.stderr
        r = sonde("jobstats", JOB, "--prometheus", url, "--prometheus-user", "alice",
                  env={"SONDE_PROMETHEUS_PASSWORD": "wrong"})
        assert r.returncode == 1, r.stderr
        assert "HTTP 401" in r.stderr and url + "/api/v1/" in r.stderr, r.stderr
        r = sonde("jobstats", JOB, "--prometheus", url)
        assert r.returncode == 1 and "HTTP 401" in r.stderr, r.stderr

    with_proxy(prom, expect, run)


def test_bearer_token(prom, tmp_path):
    def run(url, proxy):
        tok = tmp_path / "tok"
        tok.write_text("tok-123\n")
        tok.chmod(0o600)
        r = sonde("report", "--prometheus", url, "--job", JOB, "-o", str(tmp_path / "r.html"),
                  "--prometheus-token-file", str(tok))
        assert r.returncode == 0, r.stderr
        assert set(proxy.seen) == {"Bearer tok-123"}, set(proxy.seen)
        r = sonde("jobstats", JOB, "--prometheus", url, env={"SONDE_PROMETHEUS_TOKEN": "tok-123"})
        assert r.returncode == 0, r.stderr
        r = sonde("jobstats", JOB, "--prometheus", url, "--prometheus-token-file", str(tok),
                  "--prometheus-user", "bob", env={"SONDE_PROMETHEUS_PASSWORD": "x"})
        assert r.returncode == 2 and "exclude each other" in r.stderr, r.stderr

    with_proxy(prom, "Bearer tok-123", run)


def test_tls_with_a_private_ca(prom, tmp_path):
    openssl = shutil.which("openssl")
    assert openssl, "openssl is required"
    d = tmp_path

    def ossl(*a):
        r = subprocess.run([openssl, *a], capture_output=True, text=True, cwd=d)
        assert r.returncode == 0, r.stderr

    ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
         "-days", "2", "-subj", "/CN=sonde test CA")
    ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
         "-subj", "/CN=127.0.0.1")
    (d / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    ossl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
         "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf")
    web = d / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {d}/srv.pem\n  key_file: {d}/srv.key\n")
    # A second Prometheus over a copy of the same blocks, serving https only.
    data = d / "data"
    shutil.copytree(os.path.join(prom.tmp, "data"), data,
                    ignore=shutil.ignore_patterns("lock", "wal", "chunks_head", "queries.active"))
    p = promtest.Prometheus(str(d), str(data), web_config=str(web), scheme="https")
    try:
        r = sonde("jobstats", JOB, "--prometheus", p.url, "--json", "--prometheus-ca",
                  str(d / "ca.pem"))
        assert r.returncode == 0, r.stderr
        check_stats(json.loads(r.stdout), prom.truth)
        r = sonde("jobstats", JOB, "--prometheus", p.url)
        assert r.returncode == 1 and "--prometheus-ca" in r.stderr, r.stderr
    finally:
        p.close()


# ---- The Slurm epilog (share/sonde/slurm/epilog-jobstats.sh) with a recording scontrol ----

EPILOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "share", "sonde",
                      "slurm", "epilog-jobstats.sh")


def run_epilog(prom, tmp_path, extra_env=None, admin_comment="(null)"):
    rec = tmp_path / "scontrol.args"
    if rec.exists():
        rec.unlink()
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\n"
                    f"if [ \"$1\" = show ]; then echo '   AdminComment={admin_comment}'; exit 0; fi\n"
                    f"printf '%s\\n' \"$@\" > {rec}\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SONDE")}
    env.update({"SLURM_JOB_ID": JOB, "SONDE_PROMETHEUS_URL": prom.url, "SONDE_BIN": SONDE,
                "SONDE_SCONTROL": str(fake), "SONDE_EPILOG_DELAY": "0",
                "SONDE_EPILOG_FOREGROUND": "1"})
    env.update(extra_env or {})
    r = subprocess.run(["bash", EPILOG], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    return rec.read_text().splitlines() if rec.exists() else None, r


def decode_comment(arg):
    import gzip
    assert arg.startswith("AdminComment=SONDE1:"), arg[:80]
    return json.loads(gzip.decompress(base64.b64decode(arg[len("AdminComment=SONDE1:"):])))


def test_epilog_stores_jobstats_in_admin_comment(prom, tmp_path):
    args, r = run_epilog(prom, tmp_path)
    assert args is not None, r.stderr
    assert args[:2] == ["update", f"job={JOB}"], args
    stats = decode_comment(args[2])
    check_stats(stats, prom.truth)
    assert len(args[2]) < 2000  # a 3-node job packs small
    # With Slurm's start time, the efficiency is over Slurm's elapsed time.
    start = int(prom.truth["from"]) - 1
    args, r = run_epilog(prom, tmp_path, {"SLURM_JOB_START_TIME": str(start)})
    stats = decode_comment(args[2])
    assert close(stats["from"], start) and close(stats["elapsed_s"], prom.truth["to"] - start)


def test_epilog_fits_the_limit_and_keeps_an_existing_comment(prom, tmp_path):
    full, r = run_epilog(prom, tmp_path)
    full_len = len(full[2]) - len("AdminComment=")
    # One byte short: the per-GPU lists go, the nodes stay.
    args, r = run_epilog(prom, tmp_path, {"SONDE_EPILOG_MAX_BYTES": str(full_len - 1)})
    assert len(args[2]) - len("AdminComment=") < full_len
    stats = decode_comment(args[2])
    assert len(stats["nodes"]) == 3 and all("gpus" not in n for n in stats["nodes"])
    assert "nodes_omitted" not in stats
    # Smaller: the nodes go too; the overall figures stay.
    args, r = run_epilog(prom, tmp_path, {"SONDE_EPILOG_MAX_BYTES": "520"})
    assert len(args[2]) - len("AdminComment=") <= 520
    stats = decode_comment(args[2])
    assert stats["nodes_omitted"] == 3 and stats["nodes"] == []
    assert close(stats["overall"]["cpu_seconds"],
                 sum(n["cpu_seconds"] for n in prom.truth["nodes"].values()))
    # Too small for anything: nothing is written, the epilog still succeeds.
    args, r = run_epilog(prom, tmp_path, {"SONDE_EPILOG_MAX_BYTES": "50"})
    assert args is None
    # An AdminComment the site set is kept.
    args, r = run_epilog(prom, tmp_path, admin_comment="site-notes")
    assert args is None


def test_epilog_keeps_sondes_warnings_out_of_admin_comment(prom, tmp_path):
    # sonde's warnings (stderr) went into AdminComment with 2>&1, which broke its read-back.
    wrapper = tmp_path / "sonde-with-warning"
    wrapper.write_text("#!/bin/sh\n"
                       "echo 'sonde: warning: a warning the site should see in syslog' >&2\n"
                       f"exec {SONDE} \"$@\"\n")
    wrapper.chmod(0o755)
    args, r = run_epilog(prom, tmp_path, {"SONDE_BIN": str(wrapper)})
    assert args is not None, r.stderr
    assert "warning" not in args[2]
    check_stats(decode_comment(args[2]), prom.truth)
