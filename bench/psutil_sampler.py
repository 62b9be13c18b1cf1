#!/usr/bin/python3
"""psutil_sampler.py - the psutil peer of sonde in the cost table (bench/README.md).

Run with Debian's interpreter and python3-psutil:

    /usr/bin/python3 bench/psutil_sampler.py --pid T --interval 0.05 --ticks 40 --out DIR

Each tick it samples the same levels as `sonde record --levels process,user,system`:

  process  T and all its descendants (children, recursively)
  user     process + every process whose real uid is T's
  system   the whole node

From one pass over psutil.pids(): per pid ppid and uids; for the pids of the two levels
cpu_times(), memory_info().rss and io_counters() (inside Process.oneshot(), so /proc/<pid>/stat
is read once per pid); then psutil.cpu_percent(percpu=True), virtual_memory(),
disk_io_counters() and net_io_counters().  It appends one CSV row per level per tick to
DIR/perf_<level>.csv (time, wallclock, cpu_util_*, memory in GiB, io rates, net rates,
num_procs), flushed every tick, like sonde's run directory.

The sampler is written to be kind to psutil: Process objects are kept across ticks (new pids
get one, gone pids lose theirs) instead of process_iter()'s is_running() check, which would read
every /proc/<pid>/stat a second time; the tree is built from the ppids read in the same pass
instead of Process.children(recursive=True), which reads every stat again.

Ticks run on an absolute monotonic schedule; a tick that overruns is followed at once by the
next (none skipped).  CPU time per tick is getrusage(RUSAGE_SELF) utime+stime from the end of the
warm-up ticks (default 1: imports and the first tick, which creates every Process object) to the
end of the last tick.  Output, one line on stdout:

    psutil ticks=40 warmup=1 interval=0.05 pids=1102 cpu_us_per_tick=... cpu_us_per_pid=...
           wall_us_per_tick=... late_ticks=...

--max-seconds S stops the measured ticks early once S seconds have passed (at least 2 ticks),
so that a slow sampler (10,000 processes) stays within a time budget.
"""

import argparse
import os
import resource
import sys
import time

import psutil


def cpu_us():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return (ru.ru_utime + ru.ru_stime) * 1e6


PID_COLUMNS = ["cpu_util_avg", "memory", "io_read_count", "io_write_count", "io_read",
               "io_write", "num_procs"]


class Sampler:
    def __init__(self, target, out):
        self.target = target
        self.tuid = psutil.Process(target).uids().real
        self.ncpu = len(os.sched_getaffinity(target)) if hasattr(os, "sched_getaffinity") \
            else psutil.cpu_count()
        self.nsys = psutil.cpu_count()
        self.procs = {}       # pid -> psutil.Process, kept across ticks
        self.prev_pid = {}    # pid -> (cpu_s, read_count, write_count, read_bytes, write_bytes)
        self.prev_sys = None  # (t, disk counters, net counters)
        self.prev_t = None
        psutil.cpu_percent(percpu=True)  # primes the per-cpu baseline
        self.files = {}
        sys_cols = [f"cpu_util_{i}" for i in range(self.nsys)] + [
            "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory", "io_read_count",
            "io_write_count", "io_read", "io_write", "net_bytes_sent", "net_bytes_recv",
            "net_packets_sent", "net_packets_recv", "num_procs"]
        for level, cols in (("process", PID_COLUMNS), ("user", PID_COLUMNS),
                            ("system", sys_cols)):
            f = open(os.path.join(out, f"perf_{level}.csv"), "w")
            f.write(",".join(["time", "wallclock"] + cols) + "\n")
            self.files[level] = f

    def tick(self):
        now, wall = time.monotonic(), time.time()
        dt = None if self.prev_t is None else now - self.prev_t
        pids = psutil.pids()
        alive = set(pids)
        for gone in [p for p in self.procs if p not in alive]:
            del self.procs[gone]
            self.prev_pid.pop(gone, None)
        children, uid_of, counters = {}, {}, {}

        def sample(p):
            ct = p.cpu_times()
            rss = p.memory_info().rss
            try:
                io = p.io_counters()
                ioc = (io.read_count, io.write_count, io.read_bytes, io.write_bytes)
            except (psutil.AccessDenied, AttributeError):
                ioc = (0, 0, 0, 0)
            counters[p.pid] = (ct.user + ct.system, rss) + ioc

        for pid in pids:
            p = self.procs.get(pid)
            try:
                if p is None:
                    p = self.procs[pid] = psutil.Process(pid)
                with p.oneshot():
                    ppid = p.ppid()
                    uid = p.uids().real
                    children.setdefault(ppid, []).append(pid)
                    uid_of[pid] = uid
                    if uid == self.tuid:
                        sample(p)
            except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                self.procs.pop(pid, None)
                continue
        # process level: the target and its descendants, from the ppids of this pass
        tree, stack = [], [self.target]
        while stack:
            pid = stack.pop()
            if pid not in uid_of:
                continue
            tree.append(pid)
            stack.extend(children.get(pid, ()))
        for pid in tree:  # a descendant of another uid (setuid): sample it too
            if pid not in counters:
                try:
                    with self.procs[pid].oneshot():
                        sample(self.procs[pid])
                except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied,
                        KeyError):
                    pass
        user = set(tree) | {pid for pid, uid in uid_of.items() if uid == self.tuid}

        rates = {}  # pid -> per-second deltas (cpu, rc, wc, rb, wb)
        for pid, c in counters.items():
            prev = self.prev_pid.get(pid)
            if prev is not None and dt:
                rates[pid] = tuple(max(0.0, (a - b) / dt) for a, b in
                                   zip((c[0],) + c[2:], prev))
            self.prev_pid[pid] = (c[0],) + c[2:]

        for level, members in (("process", tree), ("user", user)):
            members = [p for p in members if p in counters]
            row = [f"{now:.6f}", f"{wall:.6f}"]
            if dt:
                r = [sum(rates.get(p, (0, 0, 0, 0, 0))[k] for p in members) for k in range(5)]
                row.append(f"{r[0] / self.ncpu * 100:.6g}")
                row.append(f"{sum(counters[p][1] for p in members) / 2**30:.10g}")
                row += [f"{x:.10g}" for x in r[1:]]
            else:
                row += ["", f"{sum(counters[p][1] for p in members) / 2**30:.10g}",
                        "", "", "", ""]
            row.append(str(len(members)))
            self.files[level].write(",".join(row) + "\n")

        per = psutil.cpu_percent(percpu=True)
        vm = psutil.virtual_memory()
        disk = psutil.disk_io_counters()
        net = psutil.net_io_counters()
        row = [f"{now:.6f}", f"{wall:.6f}"]
        if dt:
            row += [f"{x:.6g}" for x in per]
            row += [f"{sum(per) / len(per):.6g}", f"{min(per):.6g}", f"{max(per):.6g}"]
        else:
            row += [""] * (len(per) + 3)
        row.append(f"{(vm.total - vm.available) / 2**30:.10g}")
        cur = ((disk.read_count, disk.write_count, disk.read_bytes, disk.write_bytes) if disk
               else (0, 0, 0, 0),
               (net.bytes_sent, net.bytes_recv, net.packets_sent, net.packets_recv))
        if dt and self.prev_sys is not None:
            for a, b in zip(cur[0] + cur[1], self.prev_sys[0] + self.prev_sys[1]):
                row.append(f"{max(0.0, (a - b) / dt):.10g}")
        else:
            row += ["0"] * 8
        self.prev_sys = cur
        row.append(str(len(pids)))
        self.files["system"].write(",".join(row) + "\n")
        for f in self.files.values():
            f.flush()
        self.prev_t = now
        return len(pids)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--interval", type=float, default=0.05)
    ap.add_argument("--ticks", type=int, default=100, help="measured ticks (after warm-up)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--max-seconds", type=float, help="stop measuring after this long")
    ap.add_argument("--out", required=True, help="directory for perf_<level>.csv")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    s = Sampler(a.pid, a.out)
    step = a.interval
    nxt = time.monotonic()
    cpu0 = cpu_us()
    t_meas = time.monotonic()
    busy = 0.0
    late = measured = pids = 0
    t = 0
    while True:
        if t == a.warmup:
            cpu0, t_meas, busy = cpu_us(), time.monotonic(), 0.0
        start = time.monotonic()
        pids = s.tick()
        busy += time.monotonic() - start
        if t >= a.warmup:
            measured += 1
        t += 1
        if measured >= a.ticks or (a.max_seconds is not None and measured >= 2 and
                                   time.monotonic() - t_meas >= a.max_seconds):
            break
        nxt += step
        now = time.monotonic()
        if now >= nxt:
            if t > a.warmup:
                late += 1
            continue
        time.sleep(nxt - now)
    cpu = cpu_us() - cpu0
    print(f"psutil ticks={measured} warmup={a.warmup} interval={a.interval:g} pids={pids} "
          f"cpu_us_per_tick={cpu / measured:.1f} cpu_us_per_pid={cpu / measured / max(1, pids):.2f} "
          f"wall_us_per_tick={busy / measured * 1e6:.1f} late_ticks={late}")


if __name__ == "__main__":
    main()
