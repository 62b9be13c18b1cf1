#!/usr/bin/python3
"""Synthetic `sonde serve --per-job` data for a Prometheus, as an OpenMetrics file to backfill.

    make_openmetrics.py [--nodes 3] [--jobs 2] [--duration 1h] [--step 15s] [--end UNIX_S]
                        [--out FILE] [--truth FILE.json] [...]
    promtool tsdb create-blocks-from openmetrics FILE DATA_DIR

writes every series a fleet of `sonde serve --per-job` exporters would give Prometheus, as
Prometheus stores them (with the `instance` and `job` labels of the scrape, and `up`), with the
names of docs/prometheus.md: the node-level `sonde_*` families and the per-job `sonde_job_*`
families (labels `jobid`, `user`, `gpu`), plus `sonde_node_info{nodename}`. The values are
deterministic (no randomness): the same arguments give the same file.

The cluster: nodes n1..nN (zero-padded to N's width: n0001..n1000), instance "<node>:9850",
scrape job "sonde". Job j (jobid 1001+j, user from a fixed list) runs on --nodes-per-job nodes
(default ceil(N/J), so with 3 nodes and 2 jobs the jobs share n2), starting at node j*N//J and
wrapping. A node's CPUs, memory and GPUs are split evenly between the jobs placed on it. Jobs
start (j%4)*duration/16 after the start; odd jobs end duration/8 before the end. Even jobs use
~85 % of their CPUs and ~80 % of their GPUs; odd jobs ~30 % of their CPUs and leave their GPUs
idle (2 %); jobs with j%3 == 2 fill 95 % of their memory limit (the others 50 %).

Counters start at 0 at a series' first sample and grow by rate x step at every sample after.

--truth writes the ground truth per job as JSON: {"start", "end", "step", "jobs": [{"jobid",
"user", "first", "last" (timestamps of the job's first and last sample), "nodes": [{"node",
"instance", "cpus", "cpu_seconds" (the counter's last value = its increase), "cpu_cores_mean"
(cpu_seconds / (last - first)), "memory_peak_bytes", "memory_limit_bytes", "io_read_bytes",
"io_written_bytes", "processes_max", "gpus": [{"gpu", "utilization_mean", "memory_peak_bytes",
"power_mean_watts", "energy_joules"}]}], "cpu_efficiency" (sum cpu_seconds / (sum cpus x
(last - first))), "gpu_utilization_mean", "memory_peak_bytes" (largest node)}]}.

Sizes (for the defaults, per node, no --per-cpu): about 12 + 3G node series and 8 + 4g series
per job on it (G GPUs per node, g per job). Output is streamed: memory stays small for 1,000
nodes; the file is ~90 bytes a sample.
"""
import argparse
import functools
import json
import math
import sys
import time

USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
GIB = 2**30
SCRAPE_JOB = "sonde"


def parse_duration(text):
    """'3600', '90s', '15m', '1h', '2d' -> seconds (int)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        if text and text[-1] in units:
            value = float(text[:-1]) * units[text[-1]]
        else:
            value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration like 90s, 15m, 1h or 3600, got {text!r}")
    if value <= 0 or value != int(value):
        raise argparse.ArgumentTypeError(f"expected a positive whole number of seconds, got {text!r}")
    return int(value)


class Job:
    def __init__(self, index, cluster):
        self.index = index
        self.jobid = str(1001 + index)
        self.user = USERS[index % len(USERS)] + ("" if index < len(USERS) else str(index // len(USERS)))
        d = cluster.duration
        step = cluster.step
        self.first = cluster.start + (index % 4) * d // 16 // step * step
        self.last = cluster.end - (d // 8 // step * step if index % 2 else 0)
        self.cpu_efficiency = 0.85 if index % 2 == 0 else 0.30
        self.gpu_utilization = 0.80 if index % 2 == 0 else 0.02
        self.memory_fill = 0.95 if index % 3 == 2 else 0.50
        n = cluster.nodes
        first_node = index * n // cluster.jobs
        self.nodes = [(first_node + k) % n for k in range(cluster.nodes_per_job)]

    def active(self, t):
        return self.first <= t <= self.last


class Placement:
    """One job on one node: its share of the node's CPUs, memory and GPUs."""

    def __init__(self, job, node, rank, sharing, cluster):
        self.job = job
        self.node = node
        self.cpus = max(1, cluster.cpus_per_node // sharing)
        self.cpu_ids = [(rank * self.cpus + k) % cluster.cpus_per_node for k in range(self.cpus)]
        self.memory_limit = cluster.memory_per_node // sharing
        g = cluster.gpus_per_node
        self.gpus = list(range(rank * g // sharing, (rank + 1) * g // sharing))
        self.processes = min(self.cpus, 8) + 1

    def wave(self, t, period=600.0, amplitude=0.1):
        return 1.0 + amplitude * math.sin(2 * math.pi * t / period + self.node + self.job.index)

    def cores(self, t):
        return min(self.cpus, self.cpus * self.job.cpu_efficiency * self.wave(t))

    def memory(self, t):
        ramp = min(1.0, (t - self.job.first + 15) / 600.0)
        return float(int(self.memory_limit * self.job.memory_fill * ramp * self.wave(t, 900, 0.02)))

    def io_read(self, t):
        return 50e6 * self.wave(t, 300, 0.5) if self.job.index % 2 == 0 else 1e6

    def io_written(self, t):
        return 10e6 * self.wave(t, 450, 0.5)

    def gpu_util(self, t, gpu):
        u = self.job.gpu_utilization
        return min(1.0, max(0.0, u * (1 + 0.1 * math.sin(2 * math.pi * t / 300 + gpu))))

    def gpu_memory(self, t, gpu):
        return float(int(40 * GIB * (0.2 + 0.7 * self.gpu_util(t, gpu))))

    def gpu_power(self, t, gpu):
        return 60.0 + 240.0 * self.gpu_util(t, gpu)


class Cluster:
    def __init__(self, args):
        self.nodes = args.nodes
        self.jobs = args.jobs
        self.step = args.step
        self.duration = args.duration
        end = args.end if args.end is not None else int(time.time())
        self.end = end // self.step * self.step
        self.start = self.end - self.duration // self.step * self.step
        self.cpus_per_node = args.cpus_per_node
        self.gpus_per_node = args.gpus_per_node
        self.memory_per_node = args.memory_per_node_gib * GIB
        self.per_cpu = args.per_cpu
        self.nodes_per_job = min(self.nodes, args.nodes_per_job or -(-self.nodes // self.jobs))
        width = len(str(self.nodes))
        self.node_names = [f"n{i + 1:0{width}d}" for i in range(self.nodes)]
        self.job_list = [Job(j, self) for j in range(self.jobs)]
        on_node = [[] for _ in range(self.nodes)]
        for job in self.job_list:
            for node in job.nodes:
                on_node[node].append(job)
        self.placements = []  # by node, in job order
        for node, jobs in enumerate(on_node):
            self.placements.append([Placement(job, node, rank, len(jobs), self)
                                    for rank, job in enumerate(jobs)])
        self.times = list(range(self.start, self.end + 1, self.step))

    def instance(self, node):
        return f"{self.node_names[node]}:9850"


def labels(**kv):
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def fmt(v):
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return repr(round(v, 6))


class Writer:
    def __init__(self, out, step):
        self.out = out
        self.step = step
        self.samples = 0

    def family(self, name, kind, help_text):
        self.out.write(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")

    def gauge(self, name, lab, times, value):
        """Writes one gauge series; returns its values."""
        values = []
        w = self.out.write
        for t in times:
            v = value(t)
            values.append(v)
            w(f"{name}{lab} {fmt(v)} {t}\n")
        self.samples += len(times)
        return values

    def counter(self, name, lab, times, rate):
        """Writes one counter series that starts at 0 and grows by rate(t) x step; returns its last value."""
        total = 0.0
        w = self.out.write
        for k, t in enumerate(times):
            if k:
                total += rate(t) * self.step
            w(f"{name}{lab} {fmt(total)} {t}\n")
        self.samples += len(times)
        return total


def job_times(cluster, job):
    return [t for t in cluster.times if job.active(t)]


def generate(cluster, out):
    w = Writer(out, cluster.step)
    times = cluster.times
    nodes = range(cluster.nodes)
    truth = {}  # (jobid, node) -> dict

    def node_truth(p):
        key = (p.job.jobid, p.node)
        if key not in truth:
            truth[key] = {"node": cluster.node_names[p.node], "instance": cluster.instance(p.node),
                          "cpus": p.cpus, "memory_limit_bytes": p.memory_limit,
                          "processes_max": p.processes, "gpus": {}}
        return truth[key]

    def job_labels(p, **extra):
        return labels(instance=cluster.instance(p.node), job=SCRAPE_JOB, jobid=p.job.jobid,
                      user=p.job.user, **extra)

    def node_labels(node, **extra):
        return labels(instance=cluster.instance(node), job=SCRAPE_JOB, **extra)

    def placements():
        for node in nodes:
            yield from cluster.placements[node]

    def active(node, t):
        return [p for p in cluster.placements[node] if p.job.active(t)]

    # ---- scrape and node identity
    w.family("up", "gauge", "1 when the target was scraped")
    for node in nodes:
        w.gauge("up", node_labels(node), times, lambda t: 1)
    w.family("sonde_node", "info", "the node's hostname")
    for node in nodes:
        w.gauge("sonde_node_info", node_labels(node, nodename=cluster.node_names[node]), times, lambda t: 1)

    # ---- node level (what sonde serve exports without --per-job)
    ncpu = cluster.cpus_per_node

    @functools.lru_cache(maxsize=None)  # the per-CPU series read it once per CPU
    def node_cpu(node, t):
        return min(1.0, (sum(p.cores(t) for p in active(node, t)) + 0.02 * ncpu) / ncpu)

    w.family("sonde_cpu_utilization_average_ratio", "gauge", "mean over the node's CPUs")
    for node in nodes:
        w.gauge("sonde_cpu_utilization_average_ratio", node_labels(node), times,
                lambda t, node=node: node_cpu(node, t))
    if cluster.per_cpu:
        w.family("sonde_cpu_utilization_ratio", "gauge", "busy fraction of one CPU")
        for node in nodes:
            for cpu in range(ncpu):
                w.gauge("sonde_cpu_utilization_ratio", node_labels(node, cpu=cpu), times,
                        lambda t, node=node, cpu=cpu: min(1.0, node_cpu(node, t) * (1 + 0.05 * math.sin(t / 60 + cpu))))
    w.family("sonde_memory_used_bytes", "gauge", "MemTotal - MemAvailable")
    for node in nodes:
        w.gauge("sonde_memory_used_bytes", node_labels(node), times,
                lambda t, node=node: 4 * GIB + sum(p.memory(t) for p in active(node, t)))
    w.family("sonde_memory_total_bytes", "gauge", "MemTotal")
    for node in nodes:
        w.gauge("sonde_memory_total_bytes", node_labels(node), times, lambda t: cluster.memory_per_node)
    for fam, help_text, rate in [
            ("sonde_disk_read_bytes", "bytes read", lambda node, t: 1e5 + sum(p.io_read(t) for p in active(node, t))),
            ("sonde_disk_written_bytes", "bytes written", lambda node, t: 2e5 + sum(p.io_written(t) for p in active(node, t))),
            ("sonde_network_receive_bytes", "bytes received", lambda node, t: 1e6 + 20e6 * len(active(node, t))),
            ("sonde_network_transmit_bytes", "bytes sent", lambda node, t: 5e5 + 15e6 * len(active(node, t)))]:
        w.family(fam, "counter", help_text)
        for node in nodes:
            w.counter(fam + "_total", node_labels(node), times, lambda t, node=node, rate=rate: rate(node, t))
    w.family("sonde_processes", "gauge", "processes on the node")
    for node in nodes:
        w.gauge("sonde_processes", node_labels(node), times,
                lambda t, node=node: 300 + sum(p.processes for p in active(node, t)))

    def gpu_owner(node, gpu, t):
        for p in active(node, t):
            if gpu in p.gpus:
                return p
        return None

    def node_gpu(what, idle):
        def value(node, gpu, t):
            p = gpu_owner(node, gpu, t)
            return getattr(p, what)(t, gpu) if p else idle
        return value

    for fam, help_text, value in [
            ("sonde_gpu_utilization_ratio", "GPU utilisation", node_gpu("gpu_util", 0.0)),
            ("sonde_gpu_memory_used_bytes", "GPU memory used", node_gpu("gpu_memory", 0.0)),
            ("sonde_gpu_power_watts", "GPU power", node_gpu("gpu_power", 60.0))]:
        if cluster.gpus_per_node:
            w.family(fam, "gauge", help_text)
        for node in nodes:
            for gpu in range(cluster.gpus_per_node):
                w.gauge(fam, node_labels(node, gpu=gpu), times,
                        lambda t, node=node, gpu=gpu, value=value: value(node, gpu, t))

    # ---- per job (sonde serve --per-job)
    w.family("sonde_job_cpu_seconds", "counter", "user+system CPU seconds of the job's processes")
    for p in placements():
        jt = job_times(cluster, p.job)
        node_truth(p)["cpu_seconds"] = w.counter("sonde_job_cpu_seconds_total", job_labels(p), jt, p.cores)
    if cluster.per_cpu:
        w.family("sonde_job_cpu_core_seconds", "counter", "CPU seconds of the job on one CPU")
        for p in placements():
            jt = job_times(cluster, p.job)
            for cpu in p.cpu_ids:
                w.counter("sonde_job_cpu_core_seconds_total", job_labels(p, cpu=cpu), jt,
                          lambda t, p=p: p.cores(t) / p.cpus)
    w.family("sonde_job_cpus", "gauge", "CPUs allocated to the job on this node")
    for p in placements():
        w.gauge("sonde_job_cpus", job_labels(p), job_times(cluster, p.job), lambda t, p=p: p.cpus)
    w.family("sonde_job_memory_used_bytes", "gauge", "RSS of the job's processes")
    for p in placements():
        values = w.gauge("sonde_job_memory_used_bytes", job_labels(p), job_times(cluster, p.job), p.memory)
        node_truth(p)["memory_peak_bytes"] = max(values)
    w.family("sonde_job_memory_limit_bytes", "gauge", "the job's memory limit on this node")
    for p in placements():
        w.gauge("sonde_job_memory_limit_bytes", job_labels(p), job_times(cluster, p.job), lambda t, p=p: p.memory_limit)
    w.family("sonde_job_io_read_bytes", "counter", "bytes read by the job's processes")
    for p in placements():
        node_truth(p)["io_read_bytes"] = w.counter("sonde_job_io_read_bytes_total", job_labels(p),
                                                   job_times(cluster, p.job), p.io_read)
    w.family("sonde_job_io_written_bytes", "counter", "bytes written by the job's processes")
    for p in placements():
        node_truth(p)["io_written_bytes"] = w.counter("sonde_job_io_written_bytes_total", job_labels(p),
                                                      job_times(cluster, p.job), p.io_written)
    w.family("sonde_job_processes", "gauge", "processes of the job on this node")
    for p in placements():
        w.gauge("sonde_job_processes", job_labels(p), job_times(cluster, p.job), lambda t, p=p: p.processes)

    def gpu_truth(p, gpu):
        return node_truth(p)["gpus"].setdefault(gpu, {"gpu": str(gpu)})

    if any(p.gpus for p in placements()):
        w.family("sonde_job_gpu_utilization_ratio", "gauge", "utilisation of a GPU the job holds")
        for p in placements():
            for gpu in p.gpus:
                values = w.gauge("sonde_job_gpu_utilization_ratio", job_labels(p, gpu=gpu), job_times(cluster, p.job),
                                 lambda t, p=p, gpu=gpu: p.gpu_util(t, gpu))
                gpu_truth(p, gpu)["utilization_mean"] = sum(values) / len(values)
        w.family("sonde_job_gpu_memory_used_bytes", "gauge", "memory the job uses on a GPU")
        for p in placements():
            for gpu in p.gpus:
                values = w.gauge("sonde_job_gpu_memory_used_bytes", job_labels(p, gpu=gpu), job_times(cluster, p.job),
                                 lambda t, p=p, gpu=gpu: p.gpu_memory(t, gpu))
                gpu_truth(p, gpu)["memory_peak_bytes"] = max(values)
        w.family("sonde_job_gpu_power_watts", "gauge", "the job's share of a GPU's power")
        for p in placements():
            for gpu in p.gpus:
                values = w.gauge("sonde_job_gpu_power_watts", job_labels(p, gpu=gpu), job_times(cluster, p.job),
                                 lambda t, p=p, gpu=gpu: p.gpu_power(t, gpu))
                gpu_truth(p, gpu)["power_mean_watts"] = sum(values) / len(values)
        w.family("sonde_job_gpu_energy_joules", "counter", "the job's share of a GPU's energy")
        for p in placements():
            for gpu in p.gpus:
                gpu_truth(p, gpu)["energy_joules"] = w.counter(
                    "sonde_job_gpu_energy_joules_total", job_labels(p, gpu=gpu), job_times(cluster, p.job),
                    lambda t, p=p, gpu=gpu: p.gpu_power(t, gpu))
    out.write("# EOF\n")

    jobs = []
    for job in cluster.job_list:
        jt = job_times(cluster, job)
        span = jt[-1] - jt[0] if len(jt) > 1 else 0
        node_list = []
        for node in job.nodes:
            entry = truth[(job.jobid, node)]
            entry["gpus"] = [entry["gpus"][g] for g in sorted(entry["gpus"])]
            entry["cpu_cores_mean"] = entry["cpu_seconds"] / span if span else 0.0
            node_list.append(entry)
        gpus = [g for n in node_list for g in n["gpus"]]
        cpus = sum(n["cpus"] for n in node_list)
        jobs.append({
            "jobid": job.jobid, "user": job.user, "first": jt[0], "last": jt[-1], "nodes": node_list,
            "cpu_efficiency": sum(n["cpu_seconds"] for n in node_list) / (cpus * span) if span else 0.0,
            "gpu_utilization_mean": sum(g["utilization_mean"] for g in gpus) / len(gpus) if gpus else None,
            "memory_peak_bytes": max(n["memory_peak_bytes"] for n in node_list),
        })
    return {"start": cluster.start, "end": cluster.end, "step": cluster.step, "samples": w.samples,
            "jobs": jobs}


def add_arguments(parser):
    parser.add_argument("--nodes", type=int, default=3, help="nodes (default 3)")
    parser.add_argument("--jobs", type=int, default=2, help="Slurm jobs (default 2)")
    parser.add_argument("--nodes-per-job", type=int, default=0, help="nodes of each job (default ceil(nodes/jobs))")
    parser.add_argument("--duration", type=parse_duration, default=3600, help="span of the data (default 1h)")
    parser.add_argument("--step", type=parse_duration, default=15, help="scrape interval (default 15s)")
    parser.add_argument("--end", type=int, default=None, help="Unix time of the last sample (default now)")
    parser.add_argument("--cpus-per-node", type=int, default=64)
    parser.add_argument("--gpus-per-node", type=int, default=4)
    parser.add_argument("--memory-per-node-gib", type=int, default=256)
    parser.add_argument("--per-cpu", action="store_true",
                        help="also the per-CPU series (sonde_cpu_utilization_ratio, sonde_job_cpu_core_seconds_total)")


def check_arguments(parser, args):
    for name in ("nodes", "jobs", "cpus_per_node", "memory_per_node_gib"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.gpus_per_node < 0 or args.nodes_per_job < 0:
        parser.error("--gpus-per-node and --nodes-per-job must not be negative")
    if args.step > args.duration:
        parser.error("--step must not exceed --duration")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.add_argument("--out", default="-", help="OpenMetrics file (default stdout)")
    parser.add_argument("--truth", help="write the ground truth per job here (JSON)")
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    cluster = Cluster(args)
    out = sys.stdout if args.out == "-" else open(args.out, "w", buffering=1 << 20)
    try:
        truth = generate(cluster, out)
    finally:
        if out is not sys.stdout:
            out.close()
    if args.truth:
        with open(args.truth, "w") as f:
            json.dump(truth, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
