"""`sonde stream` as JUmPER's collector: JUmPER's sanity rules (jumper_extension/monitor/sanity.py
on feature/config-driven-monitor, re-implemented here) run on the samples of the real `sonde
stream` binary, read as JUmPER's reader does; and `--protocol v1` for JUmPER's older branches.

The target is this process while a thread does I/O, as JUmPER's check does it."""

import json
import math
import os
import subprocess
import tempfile
import threading
import time

import sonde  # noqa: F401  (sets SONDE_EXECUTABLE to this build's binary)

# JUmPER's rules, as written in sanity.py.
SANITY_N_SAMPLES = 3
REQUIRED_METRICS = ["time", "cpu_util_avg", "cpu_util_min", "cpu_util_max", "memory",
                    "io_read", "io_write", "io_read_count", "io_write_count"]
ZERO_CHECK_SKIP_LEVELS = {"cpu_util_min": {"system"}, "io_read": {"process", "user", "slurm"}}
# The one rule sonde does not meet, by design (docs/jumper-users.md): JUmPER's collectors copy
# the process's average into every per-core column; sonde's per-core values are real, so a
# single-threaded process on several CPUs has cpu_util_min 0.
DOCUMENTED_DIFFERENCES = {("process", "cpu_util_min", "all zeros")}


class IoWorker:
    """sanity.py's _io_worker: write, fsync, read back, truncate, in a loop; the read back also
    with O_DIRECT, so that it reaches the disk: JUmPER's read comes from the page cache, which
    /proc/diskstats (the system level's io_read, in JUmPER's collectors too) never sees, and its
    system io_read rule then depends on what else the machine reads."""

    def __enter__(self):
        import mmap

        self.stop = threading.Event()
        self.file = tempfile.NamedTemporaryFile(delete=False, prefix="sonde_sanity_",
                                                dir=os.getcwd())
        aligned = mmap.mmap(-1, 64 * 1024)

        def run():
            buf = b"x" * (64 * 1024)
            f = self.file
            while not self.stop.is_set():
                f.write(buf)
                f.flush()
                os.fsync(f.fileno())
                f.seek(0)
                f.read()
                try:
                    fd = os.open(f.name, os.O_RDONLY | os.O_DIRECT)
                    try:
                        os.readv(fd, [aligned])
                    finally:
                        os.close(fd)
                except OSError:
                    pass  # a file system without O_DIRECT (tmpfs)
                f.seek(0)
                f.truncate()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)
        self.file.close()
        os.unlink(self.file.name)


def stream(args, seconds):
    exe = os.environ["SONDE_EXECUTABLE"]
    proc = subprocess.Popen([exe, "stream", "--target-pid", str(os.getpid())] + args,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(json.loads(line))
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    return lines, err


def sanity_failures(ready, samples):
    """sanity.py's checks on {level: [sample dict, ...]} (JUmPER's DataFrame rows)."""
    failures = set()
    for level in ready["levels"]:
        rows = samples.get(level, [])
        if len(rows) < 2:
            failures.add((level, "-", f"only {len(rows)} samples"))
            continue
        check = rows[1:]  # JUmPER skips the first tick
        for col in REQUIRED_METRICS:
            if col not in rows[0]:
                failures.add((level, col, "missing"))
                continue
            if any(r[col] is None or (isinstance(r[col], float) and math.isnan(r[col]))
                   for r in rows):
                failures.add((level, col, "NaN"))
            if col != "time" and check and level not in ZERO_CHECK_SKIP_LEVELS.get(col, set()):
                if all(r[col] == 0 for r in check):
                    failures.add((level, col, "all zeros"))
        if not [c for c in rows[0] if c.startswith("cpu_util_") and
                c not in ("cpu_util_avg", "cpu_util_min", "cpu_util_max")]:
            failures.add((level, "cpu_util_N", "no per-core CPU columns"))
        if ready.get("num_gpus", 0) > 0:
            for m in ("gpu_util", "gpu_band", "gpu_mem"):
                for s in ("avg", "min", "max"):
                    col = f"{m}_{s}"
                    if col not in rows[0] or any(r.get(col) is None for r in rows):
                        failures.add((level, col, "GPU column missing or NaN"))
    return failures


def test_jumper_sanity_rules_on_sonde_stream():
    interval = 0.25
    with IoWorker():
        lines, err = stream(["--interval", str(interval), "--levels", "process,user,system"],
                            seconds=interval * (SANITY_N_SAMPLES + 4) + 1.5)
    ready = lines[0]
    assert ready["status"] == "ready", lines[:2]
    for level, cols in ready["columns_by_level"].items():
        assert cols[0] == "time", level  # JUmPER builds empty views from this schema
    samples = {}
    for ln in lines[1:]:
        samples.setdefault(ln["level"], []).append(dict(ln["sample"]))
    for level in ready["levels"]:
        assert len(samples.get(level, [])) >= SANITY_N_SAMPLES + 1, (level, err)
    failures = sanity_failures(ready, samples)
    # Every rule holds but the documented one (which may hold too, when the process happened
    # to run on every CPU in each interval).
    assert failures <= DOCUMENTED_DIFFERENCES, (failures, err)
    # No sample carries a made-up 0 or a null CPU value: the first one comes after an interval.
    first = samples["process"][0]
    assert all(first[c] is not None for c in first if c.startswith("cpu_util_"))


def test_error_line_carries_jumpers_key():
    exe = os.environ["SONDE_EXECUTABLE"]
    proc = subprocess.run([exe, "stream", "--target-pid", "4194303"], capture_output=True,
                          text=True, timeout=30)
    line = json.loads(proc.stdout.splitlines()[0]) if proc.stdout else None  # pid 4194303: none
    assert line and line["status"] == "error", (proc.stdout, proc.stderr)
    assert "4194303" in line["error"] and line["message"] == line["error"]


def test_protocol_v1_as_the_older_branches_read_it():
    interval = 0.2
    with IoWorker():
        lines, err = stream(["--interval", str(interval), "--levels", "process,system",
                             "--protocol", "v1"], seconds=2.0)
    ready = lines[0]
    assert ready["status"] == "ready" and "columns_by_level" not in ready, ready
    assert list(ready) == ["status", "pid", "num_cpus", "num_system_cpus", "num_gpus",
                           "gpu_memory", "gpu_name", "memory_limits", "cpu_handles", "levels"]
    by_level = {}
    for ln in lines[1:]:
        assert set(ln) == {"time", "wallclock", "level", "sample"}, ln
        s = ln["sample"]
        assert set(s) == {"cpu_util", "memory", "gpu_util", "gpu_band", "gpu_mem",
                          "io_counters"}, s
        # The older readers average these lists: never empty (their "float division by zero")
        assert s["cpu_util"] and all(isinstance(v, float) for v in s["cpu_util"])
        assert len(s["io_counters"]) == 4 and all(isinstance(v, int) for v in s["io_counters"])
        by_level.setdefault(ln["level"], []).append(ln)
    assert set(by_level) == {"process", "system"}, err
    sys_cpus = by_level["system"][0]["sample"]["cpu_util"]
    assert len(sys_cpus) == ready["num_system_cpus"]
    # cumulative counters: never decreasing, and the writing thread's bytes show at the process
    # level
    proc = [ln["sample"]["io_counters"] for ln in by_level["process"]]
    for a, b in zip(proc, proc[1:]):
        assert all(y >= x for x, y in zip(a, b)), proc
    assert proc[-1][3] > 0, proc


def test_interval_below_what_the_node_sustains_is_warned(tmp_path):
    """JUmPER's C collector accepts 0.005 s and less; sonde too, with a warning (stderr and the
    manifest's interval_warning) whenever its ticks cannot keep up; never without cause."""
    exe = os.environ["SONDE_EXECUTABLE"]
    out = tmp_path / "run"
    proc = subprocess.run([exe, "run", "--interval", "0.001", "--levels", "process,user,system",
                           "--out", str(out), "--", "sleep", "1.5"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    warning = manifest.get("interval_warning")
    warned = "is below what this node sustains" in proc.stderr
    assert warned == (warning is not None), (proc.stderr, warning)
    if warning is not None:
        assert warning["interval_s"] == 0.001
        slow = warning["mean_tick_cost_s"] >= 0.001
        missing = warning["missed"] * 4 >= warning["ticks"] + warning["missed"]
        assert slow or missing or "average" in warning["why"], warning
        assert warning["sustainable_interval_s"] >= 0.001
    else:  # kept up: (almost) every slot sampled
        assert manifest["ticks_missed"] * 4 < manifest["ticks"] + manifest["ticks_missed"]
