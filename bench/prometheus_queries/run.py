#!/usr/bin/python3
"""Cost of `sonde jobstats` and `sonde report --prometheus` for a large job (issue 15, "Scale").

Fills a throwaway Prometheus (Debian's prometheus package) with a synthetic job over N nodes
(tests/prometheus_report/synth_job.py: every per-job series of `sonde serve --per-job` and the
node-level series, per-CPU included, scraped every --interval seconds), then runs each command
--reps times and prints, per command: requests, response bytes (decoded), samples returned, the
time spent in requests, the command's wall time and the CPU time Prometheus spent answering.

    bench/prometheus_queries/run.py --sonde build/sonde [--nodes 1000] [--duration 1800]
        [--interval 15] [--cpus-per-node 8] [--reps 3] [--keep DIR]
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "prometheus_report"))
import promtest  # noqa: E402
import synth_job  # noqa: E402


def proc_cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sonde", required=True)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--interval", type=float, default=15)
    ap.add_argument("--cpus-per-node", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", help="work directory to keep (default: a temporary one, removed)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    tmp = a.keep or tempfile.mkdtemp(prefix="sonde-bench-prom-")
    os.makedirs(tmp, exist_ok=True)
    data = os.path.join(tmp, "data")
    t0 = time.time()
    start = float(int(time.time() - a.duration - 600))
    if not os.path.isdir(data):
        om = os.path.join(tmp, "job.om")
        with open(om, "w", buffering=1 << 20) as f:
            synth_job.write(f, "777", "alice", a.nodes, start, a.duration, a.interval,
                            cpus_per_node=a.cpus_per_node)
        om_bytes = os.path.getsize(om)
        promtool_t = time.time()
        promtest.create_blocks(om, data)
        promtool_s = time.time() - promtool_t
        os.unlink(om)
    else:
        om_bytes, promtool_s = 0, 0
    setup_s = time.time() - t0
    p = promtest.Prometheus(tmp, data)
    results = {"nodes": a.nodes, "duration_s": a.duration, "interval_s": a.interval,
               "cpus_per_node": a.cpus_per_node, "openmetrics_bytes": om_bytes,
               "promtool_s": round(promtool_s, 1), "setup_s": round(setup_s, 1), "commands": {}}
    try:
        # Warm Prometheus' caches (index, chunks) the way a site's busy server is.
        subprocess.run([a.sonde, "jobstats", "777", "--prometheus", p.url, "--json"],
                       capture_output=True, check=True, timeout=600)
        html = os.path.join(tmp, "r.html")
        cmds = {
            "jobstats": [a.sonde, "jobstats", "777", "--prometheus", p.url, "--json", "--costs"],
            "report": [a.sonde, "report", "--prometheus", p.url, "--job", "777", "-o", html,
                       "--costs"],
        }
        for name, cmd in cmds.items():
            runs = []
            for _ in range(a.reps):
                c0 = proc_cpu_s(p.proc.pid)
                u0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                w0 = time.time()
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
                wall = time.time() - w0
                cpu = proc_cpu_s(p.proc.pid) - c0
                u1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                sonde_cpu = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
                if r.returncode != 0:
                    sys.exit(f"{name} failed: {r.stderr[-2000:]}")
                m = re.search(r"(\d+) Prometheus requests, (\d+) bytes, (\d+) samples, "
                              r"([\d.]+) s(?: \(parsing the answers ([\d.]+) s\))?", r.stderr)
                runs.append({"requests": int(m[1]), "bytes": int(m[2]), "samples": int(m[3]),
                             "request_s": float(m[4]), "parse_s": float(m[5] or "nan"),
                             "wall_s": wall, "sonde_cpu_s": sonde_cpu,
                             "prometheus_cpu_s": cpu})
            med = {k: statistics.median(x[k] for x in runs) for k in runs[0]}
            med["min_wall_s"] = min(x["wall_s"] for x in runs)
            med["max_wall_s"] = max(x["wall_s"] for x in runs)
            if name == "report":
                med["html_bytes"] = os.path.getsize(html)
            results["commands"][name] = med
    finally:
        p.close()
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    print(f"{a.nodes} nodes, {a.duration:.0f} s job scraped every {a.interval:g} s, "
          f"{a.cpus_per_node} CPUs per node (OpenMetrics {om_bytes / 1e6:.0f} MB, promtool "
          f"{promtool_s:.0f} s)\n")
    print("| command | requests | bytes | samples | in requests | parsing | wall (min–max) | "
          "sonde CPU | Prometheus CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in results["commands"].items():
        print(f"| `{name}` | {m['requests']:.0f} | {m['bytes'] / 1e6:.1f} MB | "
              f"{m['samples']:,.0f} | {m['request_s']:.2f} s | {m['parse_s']:.2f} s | "
              f"{m['wall_s']:.2f} s "
              f"({m['min_wall_s']:.2f}–{m['max_wall_s']:.2f}) | {m['sonde_cpu_s']:.2f} s | "
              f"{m['prometheus_cpu_s']:.2f} s |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
