"""End to end (issue 15): three `sonde serve --per-job` "nodes", each in its own PID and UTS
namespace (`unshare --pid --fork --mount-proc --uts`, own hostname nA/nB/nC), a real Prometheus
scraping them every second, and a "job" (SLURM_JOB_ID in its processes' environment) that burns
a core on nA for about 20 s, holds 300 MiB on nB and idles on nC for half of that. The job
starts once Prometheus has scraped every node, so its whole life is in Prometheus. Then `sonde jobstats` and
`sonde report --prometheus` are checked against the ground truth — CPU seconds from the burner's
rusage (±3 %), memory from its statm (±2 %), docs/accuracy.md — its elapsed time (its processes'
first start to last reap, within a scrape or two) and the nodes' names.

Needs root (namespaces), Debian's prometheus, SONDE_BINARY and SONDE_WORKLOAD.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import promtest  # noqa: E402

SONDE = os.environ.get("SONDE_BINARY", "sonde")
WORKLOAD = os.environ.get("SONDE_WORKLOAD", "sonde-test-workload")
JOB = "8101"
SECONDS = 20
# The job's processes stay zombies this long before they are reaped: longer than the elapsed
# time's allowance below, so an exporter that dropped a job's zombies would fail the test.
ZOMBIE_S = 5
GIB = 1 << 30

# Runs inside a node's namespace: starts the job's process with SLURM_JOB_ID in its environment
# (the runner itself has none, so it is not part of the job), reports the truth as JSON lines.
RUNNER = textwrap.dedent("""
    import json, os, resource, subprocess, sys, time
    out, go, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    env = dict(os.environ, SLURM_JOB_ID=os.environ["JOB"], SLURM_CPUS_ON_NODE="1",
               SLURM_MEM_PER_NODE="1024")
    while not os.path.exists(go):  # the job starts once Prometheus scrapes every node
        time.sleep(0.02)
    start = time.time()
    p = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
    rss = 0
    if args[1] == "hold":
        p.stdout.readline()  # "ready": the memory is touched
        with open(f"/proc/{p.pid}/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    # Exited but not reaped: its CPU time stays in /proc/<pid>/stat (a zombie), so the
    # exporter's counter and Prometheus get its last second too; then reap it.
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    zombie_s = float(os.environ["ZOMBIE_S"])
    end = time.time() + zombie_s
    time.sleep(zombie_s)
    p.wait()
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        json.dump({"cpu_s": r.ru_utime + r.ru_stime, "rss": rss, "start": start,
                   "end": end}, f)
""")


def fetch(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.fail("needs root: unshare --pid --uts")
    tmp = tempfile.mkdtemp(prefix="sonde-prom-e2e-")
    runner = os.path.join(tmp, "runner.py")
    with open(runner, "w") as f:
        f.write(RUNNER)
    nodes = {"nA": [WORKLOAD, "burn", str(SECONDS)],
             # Ending at half time on two of three nodes: the scrape interval is still 1 s.
             "nB": [WORKLOAD, "hold", "300", str(SECONDS // 2)],
             "nC": [WORKLOAD, "sleep", str(SECONDS // 2)]}
    procs = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SONDE"))}
    env["JOB"] = JOB
    env["ZOMBIE_S"] = str(ZOMBIE_S)
    env["XDG_CONFIG_HOME"] = tmp  # no user configuration
    go = os.path.join(tmp, "go")
    prom = None
    try:
        for name, cmd in nodes.items():
            # Each exporter picks a free port itself (--listen 127.0.0.1:0) and says which on
            # stderr: no race with other processes for a port chosen beforehand.
            # ("hostname X && runner & exec serve" would put the hostname into the background
            # with the runner: serve then raced it for its node name.)
            script = (f"hostname {name} || exit 1; "
                      f"{sys.executable} {runner} {tmp}/{name}.json {go} {' '.join(cmd)} & "
                      f"exec {SONDE} serve --per-job --interval 0.5 --listen 127.0.0.1:0")
            procs.append(subprocess.Popen(
                ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--uts", "sh", "-c",
                 script],
                env=env, stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/{name}.err", "w")))
        ports = {}
        for (name, _), proc in zip(nodes.items(), procs):
            deadline = time.time() + 60
            while name not in ports and time.time() < deadline and proc.poll() is None:
                m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics",
                              open(f"{tmp}/{name}.err").read())
                if m:
                    ports[name] = int(m.group(1))
                time.sleep(0.1)
            assert name in ports, f"{name}: sonde serve did not start: " + open(
                f"{tmp}/{name}.err").read()[-3000:]
            # The exporter on that port is this node's (its hostname, from its UTS namespace).
            text = fetch(f"http://127.0.0.1:{ports[name]}/metrics")
            info = [ln for ln in text.splitlines() if ln.startswith("sonde_node_info{")]
            assert info == [f'sonde_node_info{{nodename="{name}"}} 1'], (name, info)
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports.values())
        prom = promtest.Prometheus(tmp, os.path.join(tmp, "data"), scrape_interval="1s",
                                   scrape_configs=f"  - job_name: sonde\n"
                                                  f"    static_configs:\n"
                                                  f"      - targets: [{targets}]\n")
        # Prometheus scrapes its targets some seconds after it is ready (its target discovery
        # sends updates every 5 s): the job starts once every node has been scraped, so that
        # the job's whole life is in Prometheus and its elapsed time can be checked end to end.
        deadline = time.time() + 60
        while time.time() < deadline:
            up = json.loads(prom.get("/api/v1/query?query=up"))["data"]["result"]
            if sum(1 for r in up if r["value"][1] == "1") == len(nodes):
                break
            time.sleep(0.2)
        else:
            raise AssertionError("Prometheus did not scrape every node within 60 s: " + str(up))
        open(go, "w").close()
        text = ""
        for _ in range(100):
            text = fetch(f"http://127.0.0.1:{ports['nA']}/metrics")
            if f'sonde_job_processes{{jobid="{JOB}"' in text:
                break
            time.sleep(0.1)
        assert f'sonde_job_processes{{jobid="{JOB}"' in text, text[-3000:]
        # The job ends after SECONDS (+ start-up; longer on a busy machine, where the burner
        # gets less than its core); then three more scrapes.
        for name in nodes:
            path = f"{tmp}/{name}.json"
            deadline = time.time() + 4 * SECONDS + 60
            while not os.path.exists(path) and time.time() < deadline:
                time.sleep(0.5)
            assert os.path.exists(path), open(f"{tmp}/{name}.err").read()
        time.sleep(3)
        truth = {n: json.load(open(f"{tmp}/{n}.json")) for n in nodes}
        yield {"prom": prom, "truth": truth, "ports": ports, "tmp": tmp}
    finally:
        if prom:
            prom.close()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def test_jobstats_against_the_ground_truth(cluster):
    prom, truth = cluster["prom"], cluster["truth"]
    r = subprocess.run([SONDE, "jobstats", JOB, "--prometheus", prom.url, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    nodes = {n["name"]: n for n in s["nodes"]}
    assert sorted(nodes) == ["nA", "nB", "nC"], s
    a, b, c = nodes["nA"], nodes["nB"], nodes["nC"]
    # CPU: the burner's rusage, ±3 %; the other two used next to nothing.
    assert abs(a["cpu_seconds"] - truth["nA"]["cpu_s"]) <= 0.03 * truth["nA"]["cpu_s"], (a, truth)
    # nB's hold: its own rusage too (touching 300 MiB costs CPU, more on a fresh VM), with a
    # scrape's worth of slack for so small a figure; nC sleeps.
    assert abs(b["cpu_seconds"] - truth["nB"]["cpu_s"]) <= 0.03 * truth["nB"]["cpu_s"] + 0.3, (
        b, truth["nB"])
    assert c["cpu_seconds"] < 0.5, c
    # Efficiency: its CPU seconds over 1 CPU × the job's elapsed time, which is the time its
    # processes existed (start-up, the burn, the time kept as zombies) within a scrape and
    # serve's interval (its first and last scrape may each miss up to that much). On a
    # busy machine the burner gets less than its core: the tag follows the efficiency.
    assert a["cpus"] == 1, a
    assert abs(a["cpu_efficiency"] - a["cpu_seconds"] / s["elapsed_s"]) < 1e-9, (a, s)
    # Prometheus scrapes every second (more only where it missed scrapes on a busy machine).
    assert 0.9 <= s["scrape_interval_s"] <= 1.5, s
    lived = max(t["end"] for t in truth.values()) - min(t["start"] for t in truth.values())
    assert abs(s["elapsed_s"] - lived) <= 1.5 + s["scrape_interval_s"], (s, lived)
    assert ("cpu-bound" in a["tags"]) == (a["cpu_efficiency"] >= 0.7), a
    # Memory: the holder's resident size from statm, ±2 %; its limit from SLURM_MEM_PER_NODE.
    assert abs(b["memory_peak_bytes"] - truth["nB"]["rss"]) <= 0.02 * truth["nB"]["rss"], (b, truth)
    assert b["memory_limit_bytes"] == 1024 << 20, b
    o = s["overall"]
    assert o["nodes"] == 3 and o["cpus"] == 3
    assert abs(o["cpu_seconds"] - sum(n["cpu_seconds"] for n in s["nodes"])) < 1e-6


def test_report_against_the_ground_truth(cluster, tmp_path):
    prom, truth = cluster["prom"], cluster["truth"]
    run = tmp_path / "run"
    out = tmp_path / "job.html"
    r = subprocess.run([SONDE, "report", "--prometheus", prom.url, "--job", JOB, "--run-dir",
                        str(run), "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = json.loads((run / "manifest.json").read_text())
    assert [n["name"] for n in m["nodes"]] == ["nA", "nB", "nC"]
    # The step: the scrape interval as estimated from the samples (1 s unless scrapes were missed).
    assert 1 <= m["interval"] and m["prometheus"]["scrape_interval_s"] <= m["interval"] + 1e-9

    def rows(path):
        lines = path.read_text().splitlines()
        head = lines[0].split(",")
        return [dict(zip(head, (float(x) if x else None for x in ln.split(",")))) for ln in lines[1:]]

    a = rows(run / "nodes" / "nA" / "perf_slurm.csv")
    # The burner's share of its CPU, row by row: never above 100 % (+ jitter); over the rows
    # (each its CPU over the step before it), its CPU seconds from rusage. (Not a mean against
    # the time it ran: rows while it starts, and while it is a zombie, are part of the job.)
    busy = [x["cpu_util_avg"] for x in a if x["cpu_util_avg"] is not None]
    assert busy and max(busy) <= 105, busy
    step = (a[-1]["wallclock"] - a[0]["wallclock"]) / (len(a) - 1)
    assert abs(sum(busy) / 100 * step - truth["nA"]["cpu_s"]) <= 0.1 * truth["nA"]["cpu_s"], (
        busy, step, truth["nA"])
    b = rows(run / "nodes" / "nB" / "perf_slurm.csv")
    peak = max(x["memory"] for x in b if x["memory"] is not None) * GIB
    assert abs(peak - truth["nB"]["rss"]) <= 0.02 * truth["nB"]["rss"], (peak, truth["nB"])
    agg = rows(run / "perf_slurm.csv")
    assert max(x["nodes"] for x in agg) == 3
    assert "Slurm job " + JOB in out.read_text()
