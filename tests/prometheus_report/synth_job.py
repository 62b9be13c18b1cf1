"""Synthetic Prometheus data for a Slurm job, with its ground truth.

Writes OpenMetrics text of what `sonde serve --per-job` exports (docs/prometheus.md, the per-job
series of the shared spec) for a job over N nodes, as Prometheus would have scraped it (labels
`instance` and `job` included), plus the node-level series; `promtool tsdb create-blocks-from
openmetrics` turns it into blocks a throwaway Prometheus serves. Used by
tests/prometheus_report/test_prom_report.py and bench/prometheus_queries.

Each node i runs the job for `duration` seconds sampled every `interval` seconds (the k-th
sample at start + k·interval counts (k+1)·interval seconds of the job, as sonde's counters do:
the first sample holds the CPU time used before it). Its figures:
  cpus_i, cpu rate_i (cores used), memory ramping linearly to peak_i, limit_i, io read/write rates,
  GPUs (util, memory) on the nodes that have some.
Node-level series run from `margin` seconds before the job to `margin` after it.
"""
import json
import sys

GIB = 1 << 30


def node_plan(i, n_nodes, gpus_every=3, cpus_per_node=4):
    """The figures of node i (deterministic)."""
    return {
        "name": f"n{i:04d}" if n_nodes > 9 else f"n{i + 1}",
        "instance": f"10.0.{i // 250}.{i % 250 + 1}:9850",
        "cpus": 2 + (i % 3),              # job CPUs on the node
        "node_cpus": cpus_per_node,
        "rate": [1.5, 0.25, 0.05][i % 3],  # cores used by the job
        "mem_peak": (1 + i % 4) * GIB // 4,
        "mem_limit": 4 * GIB,
        "node_mem": 16 * GIB,
        "read_rate": 1e6 * (1 + i % 2),
        "write_rate": 2e6,
        "gpus": 2 if gpus_every and i % gpus_every == 0 else 0,
        "gpu_util": 0.6,
        "gpu_mem": 3 * GIB,
    }


def write(out, job, user, n_nodes, start, duration, interval, margin=60, other_job=None,
          cpus_per_node=4, gpus_every=3):
    """Writes the OpenMetrics text to `out` (a file object); returns the truth (a dict)."""
    plans = [node_plan(i, n_nodes, gpus_every, cpus_per_node) for i in range(n_nodes)]
    k_job = int(round(duration / interval))  # samples of the job on a node
    job_times = [start + k * interval for k in range(k_job)]
    k_margin = int(round(margin / interval))
    node_times = [start + k * interval for k in range(-k_margin, k_job + k_margin)]

    def fam(name, series):
        """series: list of (labels dict, [(t, v)])."""
        for labels, samples in series:
            lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.write("".join(f"{name}{{{lab}}} {v:.15g} {t:.3f}\n" for t, v in samples))

    # The job's series, and (other_job) another job on the first node that must not count.
    members = [(job, user, p) for p in plans]
    if other_job:
        members.append((other_job, "bob", dict(plans[0], rate=3.0, cpus=8, mem_peak=GIB, gpus=1)))

    def jl(m, **extra):
        jid, u, p = m
        d = {"instance": p["instance"], "job": "sonde", "jobid": jid, "user": u}
        d.update(extra)
        return d

    def nl(p, **extra):
        d = {"instance": p["instance"], "job": "sonde"}
        d.update(extra)
        return d

    K = range(k_job)
    fam("sonde_job_processes", [(jl(m), [(job_times[k], 3) for k in K]) for m in members])
    fam("sonde_job_cpu_seconds_total",
        [(jl(m), [(job_times[k], m[2]["rate"] * (k + 1) * interval) for k in K]) for m in members])
    fam("sonde_job_cpus", [(jl(m), [(job_times[k], m[2]["cpus"]) for k in K]) for m in members])
    fam("sonde_job_memory_used_bytes",
        [(jl(m), [(job_times[k], m[2]["mem_peak"] * (k + 1) / k_job) for k in K])
         for m in members])
    fam("sonde_job_memory_limit_bytes",
        [(jl(m), [(job_times[k], m[2]["mem_limit"]) for k in K]) for m in members])
    fam("sonde_job_io_read_bytes_total",
        [(jl(m), [(job_times[k], m[2]["read_rate"] * (k + 1) * interval) for k in K])
         for m in members])
    fam("sonde_job_io_written_bytes_total",
        [(jl(m), [(job_times[k], m[2]["write_rate"] * (k + 1) * interval) for k in K])
         for m in members])
    fam("sonde_job_gpu_utilization_ratio",
        [(jl(m, gpu=str(g)), [(job_times[k], m[2]["gpu_util"] * (g + 1) / 2) for k in K])
         for m in members for g in range(m[2]["gpus"])])
    fam("sonde_job_gpu_memory_used_bytes",
        [(jl(m, gpu=str(g)), [(job_times[k], m[2]["gpu_mem"]) for k in K])
         for m in members for g in range(m[2]["gpus"])])
    # Node level.
    NT = node_times
    fam("sonde_node_info", [(nl(p, nodename=p["name"]), [(t, 1) for t in NT]) for p in plans])
    fam("sonde_cpu_utilization_average_ratio",
        [(nl(p), [(t, min(p["rate"] / p["node_cpus"] + 0.01, 1)) for t in NT]) for p in plans])
    fam("sonde_cpu_utilization_ratio",
        [(nl(p, cpu=str(c)), [(t, 0.9 if c == 0 else 0.02) for t in NT])
         for p in plans for c in range(p["node_cpus"])])
    fam("sonde_memory_used_bytes", [(nl(p), [(t, 2 * GIB) for t in NT]) for p in plans])
    fam("sonde_memory_total_bytes", [(nl(p), [(t, p["node_mem"]) for t in NT]) for p in plans])
    fam("sonde_disk_read_bytes_total",
        [(nl(p), [(t, 5e5 * (t - NT[0])) for t in NT]) for p in plans])
    fam("sonde_disk_written_bytes_total",
        [(nl(p), [(t, 1e6 * (t - NT[0])) for t in NT]) for p in plans])
    fam("sonde_network_receive_bytes_total",
        [(nl(p), [(t, 1e4 * (t - NT[0])) for t in NT]) for p in plans])
    fam("sonde_network_transmit_bytes_total",
        [(nl(p), [(t, 2e4 * (t - NT[0])) for t in NT]) for p in plans])
    fam("sonde_processes", [(nl(p), [(t, 200) for t in NT]) for p in plans])
    fam("sonde_gpu_utilization_ratio",
        [(nl(p, gpu=str(g)), [(t, 0.5) for t in NT]) for p in plans for g in range(p["gpus"])])
    fam("sonde_gpu_memory_used_bytes",
        [(nl(p, gpu=str(g)), [(t, 3 * GIB) for t in NT]) for p in plans for g in range(p["gpus"])])
    out.write("# EOF\n")

    elapsed = k_job * interval
    truth = {"job": job, "user": user, "from": job_times[0], "to": job_times[-1],
             "elapsed_s": elapsed, "interval": interval, "nodes": {}}
    for p in plans:
        truth["nodes"][p["name"]] = {
            "instance": p["instance"],
            "cpus": p["cpus"],
            "cpu_seconds": p["rate"] * elapsed,
            "cpu_efficiency": p["rate"] / p["cpus"],
            "memory_peak_bytes": p["mem_peak"],
            "memory_limit_bytes": p["mem_limit"],
            "read_bytes": p["read_rate"] * elapsed,
            "written_bytes": p["write_rate"] * elapsed,
            "gpus": {str(g): {"utilization_mean": p["gpu_util"] * (g + 1) / 2,
                              "memory_peak_bytes": p["gpu_mem"]} for g in range(p["gpus"])},
            "node_cpus": p["node_cpus"],
            "node_memory": p["node_mem"],
            "rate": p["rate"],
        }
    return truth


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="4242")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--start", type=float, required=True)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--interval", type=float, default=1)
    ap.add_argument("--cpus-per-node", type=int, default=4)
    ap.add_argument("--truth", help="write the truth JSON here")
    a = ap.parse_args()
    t = write(sys.stdout, a.job, "alice", a.nodes, a.start, a.duration, a.interval,
              cpus_per_node=a.cpus_per_node)
    if a.truth:
        with open(a.truth, "w") as f:
            json.dump(t, f)
