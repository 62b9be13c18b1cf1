"""`sonde serve --per-job` against real processes: jobs found through SLURM_JOB_ID in their
environment (this test node has no Slurm cgroups; the cgroup layouts are unit-tested on trees,
tests/unit/prometheus_test.cpp), scraped with a real HTTP client and checked against the kernel's
own figures within the tolerances of docs/accuracy.md (CPU ±3 %, memory ±2 %, I/O ±3 %).

Run by ctest (tests/CMakeLists.txt) with SONDE_BINARY and SONDE_FAKE_NVML (the fake NVML library
of tests/fakes, so that a job holds a GPU) set.
"""

import glob
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

SONDE = os.environ.get("SONDE_BINARY", "sonde")
FAKE_NVML = os.environ.get("SONDE_FAKE_NVML", "")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")
MIB = 1 << 20
INTERVAL = 0.2

pytestmark = pytest.mark.skipif(
    os.path.isdir("/sys/fs/cgroup/system.slice/slurmstepd.scope")
    or bool(glob.glob("/sys/fs/cgroup/*/slurm*")),
    reason="this node puts Slurm jobs in cgroups: SLURM_JOB_ID in an environment does not count")

BURN = "import sys\nprint('ready', flush=True)\nwhile True: pass\n"
HOLD = ("import sys, time\nb = bytearray(200 << 20)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\nprint('ready', flush=True)\ntime.sleep(600)\n")
# Writes 16 MiB itself and has a child write 8 MiB (seen by sonde, then reaped): the parent's
# counters then hold the child's bytes too, which must count once.
WRITE = """import os, subprocess, sys, time
def write(path, mib):
    with open(path, 'wb') as f:
        for _ in range(mib):
            f.write(b'x' * (1 << 20))
        f.flush()
        os.fsync(f.fileno())
d = sys.argv[1]
write(os.path.join(d, 'parent.bin'), 16)
child = ("import os, sys, time\\n"
         "f = open(sys.argv[1], 'wb'); f.write(b'y' * (8 << 20)); f.flush(); os.fsync(f.fileno())\\n"
         "f.close(); time.sleep(1.5)\\n")
subprocess.run([sys.executable, '-c', child, os.path.join(d, 'child.bin')], check=True)
print('ready', flush=True)
time.sleep(600)
"""


def start_job(jobid, script, *args, extra_env=None):
    # Nothing inherited from a Slurm job the test itself may run in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_JOB_ID"] = str(jobid)
    env.update(extra_env or {})
    p = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True)
    return p


def wait_ready(p, timeout=60):
    deadline = time.monotonic() + timeout
    line = p.stdout.readline()
    assert line.strip() == "ready" and time.monotonic() < deadline, line


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait(timeout=10)
    p.stdout.close()


def cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss(pid):
    return int(open(f"/proc/{pid}/statm").read().split()[1]) * PAGE


def io(pid):
    out = {}
    for line in open(f"/proc/{pid}/io"):
        k, v = line.split(":")
        out[k] = int(v)
    return out


def samples(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def job_samples(values, jobid):
    """{(name, extra labels): value} of one job."""
    out = {}
    for key, v in values.items():
        m = re.match(r'(sonde_job_\w+)\{jobid="' + str(jobid) + r'",user="([^"]*)"(.*)\}$', key)
        if m:
            out[(m.group(1), m.group(3).lstrip(","))] = v
            out[("user", "")] = m.group(2)
    return out


class Serve:
    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(
            [SONDE, "serve", "--listen", "127.0.0.1:0", "--interval", str(INTERVAL), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, env=env)
        line = self.proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
        assert m, line
        self.url = f"http://127.0.0.1:{m.group(1)}/metrics"

    def scrape(self):
        with urllib.request.urlopen(self.url, timeout=10) as r:
            assert r.status == 200
            return r.read().decode()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=10)
        err = self.proc.stderr.read()
        self.proc.stderr.close()
        return rc, err


def one_gpu(path, tag, **fields):
    """A fake NVML scenario (tests/fakes/README.md) of one A100 at 80 % SM and 200 W, on which
    the process `env:0` (SONDE_FAKE_GPU_PIDS) uses 60 % SM; `fields` add or replace the device's."""
    device = {"name": "NVIDIA A100-SXM4-40GB", "uuid": f"GPU-{tag}-0000-0000-0000-000000000000",
              "util_gpu": 80, "util_mem": 40, "memory_total_mib": 40960, "power_mw": 200000,
              "power_limit_mw": 400000,
              "process_utilization": [{"pid": "env:0", "sm": 60, "mem": 30, "enc": 0, "dec": 0}]}
    device.update(fields)
    path.write_text(json.dumps({"driver_version": "550.54.15", "devices": [device]}))
    return path


def within(value, truth, rel, what):
    assert abs(value - truth) <= rel * truth, f"{what}: sonde {value}, truth {truth}"


def test_per_job_series_match_the_truth(tmp_path):
    assert FAKE_NVML and os.path.exists(FAKE_NVML), "SONDE_FAKE_NVML: the fake NVML library"
    burn = start_job(9101, BURN, extra_env={"SLURM_CPUS_ON_NODE": "2",
                                            "SLURM_MEM_PER_NODE": "512"})
    jobs = [burn]
    serve = None
    try:
        wait_ready(burn)
        # One GPU that the burning job holds: 60 of the device's 80 % SM, 10 of its 20 GiB.
        scenario = one_gpu(tmp_path / "gpu.json", "pj000000", memory_used_mib=20480,
                           energy_mj=1000000, energy_rate_mw=200000,
                           compute_processes=[{"pid": "env:0", "used_memory_mib": 10240},
                                              {"pid": 1, "used_memory_mib": 10240}])
        env = dict(os.environ, SONDE_NVML_LIBRARY=FAKE_NVML,
                   SONDE_FAKE_GPU_SCENARIO=str(scenario), SONDE_FAKE_GPU_PIDS=str(burn.pid),
                   XDG_CONFIG_HOME=str(tmp_path))
        serve = Serve("--per-job", env=env)
        # Started while sonde watches, so that it sees the writer's child before it is reaped.
        hold = start_job(9102, HOLD)
        write = start_job(9103, WRITE, str(tmp_path))
        jobs += [hold, write]
        wait_ready(hold)
        wait_ready(write)
        # The burner stops burning: its CPU time is then a fixed truth.
        burn.send_signal(signal.SIGSTOP)
        time.sleep(3 * INTERVAL + 0.2)
        body = serve.scrape()
        values = samples(body)

        a = job_samples(values, 9101)
        within(a[("sonde_job_cpu_seconds_total", "")], cpu_s(burn.pid), 0.03, "CPU of 9101")
        assert a[("sonde_job_cpus", "")] == 2
        assert a[("sonde_job_memory_limit_bytes", "")] == 512 * MIB
        assert a[("sonde_job_processes", "")] == 1
        within(a[("sonde_job_memory_used_bytes", "")], rss(burn.pid), 0.02, "memory of 9101")
        assert a[("user", "")] == pwd.getpwuid(os.getuid()).pw_name
        assert a[("sonde_job_gpu_utilization_ratio", 'gpu="0"')] == pytest.approx(0.6)
        assert a[("sonde_job_gpu_memory_used_bytes", 'gpu="0"')] == 10240 * MIB
        assert a[("sonde_job_gpu_power_watts", 'gpu="0"')] == pytest.approx(150)
        energy1 = a[("sonde_job_gpu_energy_joules_total", 'gpu="0"')]
        assert energy1 > 0

        b = job_samples(values, 9102)
        within(b[("sonde_job_memory_used_bytes", "")], rss(hold.pid), 0.02, "memory of 9102")
        assert b[("sonde_job_memory_used_bytes", "")] > 200 * MIB
        assert ("sonde_job_memory_limit_bytes", "") not in b  # no limit known
        assert ("sonde_job_cpus", "") not in b
        assert not any(k[0].startswith("sonde_job_gpu") for k in b)  # holds no GPU

        c = job_samples(values, 9103)
        truth = io(write.pid)["write_bytes"]  # the parent's, with its reaped child's 8 MiB
        assert truth >= 24 * MIB
        within(c[("sonde_job_io_written_bytes_total", "")], truth, 0.03, "bytes written by 9103")
        assert c[("sonde_job_io_read_bytes_total", "")] >= 0

        assert values[f'sonde_node_info{{nodename="{socket.gethostname()}"}}'] == 1
        assert values['sonde_series_folded{label="jobid"}'] == 0
        assert "sonde_slurm_job_" not in body
        promtool = shutil.which("promtool")
        assert promtool, "promtool (Debian package prometheus) is required"
        r = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True,
                           text=True)
        assert r.returncode == 0 and not (r.stdout + r.stderr).strip(), r.stdout + r.stderr

        # Counters stay monotonic; the GPU energy share grows at the share of the device's 200 W.
        time.sleep(1)
        later = job_samples(samples(serve.scrape()), 9101)
        energy2 = later[("sonde_job_gpu_energy_joules_total", 'gpu="0"')]
        assert energy2 > energy1
        assert later[("sonde_job_cpu_seconds_total", "")] >= a[("sonde_job_cpu_seconds_total", "")]

        # A finished job's series disappear at the next tick.
        stop(hold)
        time.sleep(3 * INTERVAL + 0.2)
        values = samples(serve.scrape())
        assert not job_samples(values, 9102)
        assert job_samples(values, 9101) and job_samples(values, 9103)
    finally:
        if burn.poll() is None:
            burn.send_signal(signal.SIGCONT)
        for p in jobs:
            stop(p)
        if serve:
            rc, err = serve.stop()
            assert rc == 0, err


def test_max_series_folds_jobs_into_other(tmp_path):
    jobs = [start_job(9200 + i, HOLD.replace("200 << 20", "1 << 20")) for i in range(3)]
    serve = None
    try:
        for p in jobs:
            wait_ready(p)
        serve = Serve("--per-job", "--max-series", "2",
                      env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path)))
        time.sleep(3 * INTERVAL + 0.2)
        values = samples(serve.scrape())
        own = {k for k in values if k.startswith("sonde_job_processes{")}
        assert len(own) == 3, own  # two jobs and "other"
        mine = [j for j in range(9200, 9203)
                if any(k.startswith(f'sonde_job_processes{{jobid="{j}"') for k in own)]
        assert len(mine) <= 2  # at least one of the three is summed in "other"
        assert values['sonde_job_processes{jobid="other"}'] >= 1
        assert values['sonde_series_folded{label="jobid"}'] >= 1
    finally:
        for p in jobs:
            stop(p)
        if serve:
            serve.stop()


def test_a_stuck_gpu_driver_leaves_out_only_the_gpu_series(tmp_path):
    """The job GPU query runs driver code under a watchdog: while the (fake) driver is stuck in a
    process-list call, the scans go on without the jobs' GPU series; when it answers again, they
    come back. stderr says both."""
    assert FAKE_NVML and os.path.exists(FAKE_NVML), "SONDE_FAKE_NVML: the fake NVML library"
    burn = start_job(9301, BURN)
    serve = None
    hang = tmp_path / "hang"
    try:
        wait_ready(burn)
        scenario = one_gpu(tmp_path / "gpu.json", "pj000001", memory_used_mib=10240,
                           compute_processes=[{"pid": "env:0", "used_memory_mib": 10240}])
        env = dict(os.environ, SONDE_NVML_LIBRARY=FAKE_NVML,
                   SONDE_FAKE_GPU_SCENARIO=str(scenario), SONDE_FAKE_GPU_PIDS=str(burn.pid),
                   SONDE_FAKE_GPU_HANG_FILE=str(hang), XDG_CONFIG_HOME=str(tmp_path))
        serve = Serve("--per-job", env=env)

        def gpu_series(timeout):
            """The job's series once its GPU series are there (None if not within `timeout`)."""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                s = job_samples(samples(serve.scrape()), 9301)
                if ("sonde_job_gpu_utilization_ratio", 'gpu="0"') in s:
                    return s
                time.sleep(INTERVAL)
            return None

        # A sanitizer build's first queries may overrun the 0.1 s deadline too: poll.
        before = gpu_series(30)
        assert before, "no GPU series before the driver was stuck"
        assert before[("sonde_job_gpu_utilization_ratio", 'gpu="0"')] == pytest.approx(0.6)

        hang.write_text("")
        time.sleep(5 * INTERVAL + 0.3)
        stuck1 = job_samples(samples(serve.scrape()), 9301)
        time.sleep(4 * INTERVAL)
        stuck2 = job_samples(samples(serve.scrape()), 9301)
        for s in (stuck1, stuck2):
            assert not any(k[0].startswith("sonde_job_gpu") for k in s), s
        # The scans go on: the burner's CPU keeps growing on the page.
        assert stuck2[("sonde_job_cpu_seconds_total", "")] > \
            stuck1[("sonde_job_cpu_seconds_total", "")] > \
            before[("sonde_job_cpu_seconds_total", "")]

        hang.unlink()
        after = gpu_series(30)
        assert after, "the GPU series did not come back once the driver answered"
        assert after[("sonde_job_gpu_utilization_ratio", 'gpu="0"')] == pytest.approx(0.6)
        assert after[("sonde_job_gpu_memory_used_bytes", 'gpu="0"')] == 10240 * MIB
    finally:
        if hang.exists():
            hang.unlink()
        stop(burn)
        if serve:
            rc, err = serve.stop()
            assert rc == 0, err
    # Once per stuck spell (a sanitizer build may add a spell of its own at the start).
    assert "the GPU driver did not answer within 0.1 s; the jobs' GPU series are left out" in err
    assert "the GPU driver answers again; the jobs' GPU series are back" in err, err


# Seen by sonde first without a job, then execs itself into job 9401 (issue 21, finding 9: the
# job was read once per pid and start time, so an exec kept the process' first attribution).
EXEC_INTO_JOB = """import os, sys
print('ready', flush=True)
sys.stdin.readline()
env = dict(os.environ, SLURM_JOB_ID='9401')
os.execve(sys.executable, [sys.executable, '-c',
          "import time\\nprint('ready', flush=True)\\ntime.sleep(600)\\n"], env)
"""


def test_a_process_that_execs_into_a_job_is_counted_in_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    p = subprocess.Popen([sys.executable, "-c", EXEC_INTO_JOB], env=env, stdout=subprocess.PIPE,
                         stdin=subprocess.PIPE, text=True)
    serve = None
    try:
        wait_ready(p)
        serve = Serve("--per-job", env=dict(os.environ, XDG_CONFIG_HOME=str(tmp_path)))
        time.sleep(3 * INTERVAL + 0.2)
        assert not job_samples(samples(serve.scrape()), 9401)  # seen, in no job
        p.stdin.write("go\n")
        p.stdin.flush()
        wait_ready(p)
        time.sleep(3 * INTERVAL + 0.2)
        a = job_samples(samples(serve.scrape()), 9401)
        assert a.get(("sonde_job_processes", "")) == 1, a
        assert a[("user", "")] == pwd.getpwuid(os.getuid()).pw_name
    finally:
        p.stdin.close()
        stop(p)
        if serve:
            rc, err = serve.stop()
            assert rc == 0, err
