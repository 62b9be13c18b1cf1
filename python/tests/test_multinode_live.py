"""The live multi-node monitor: `%perfmonitor_start --monitor slurm_multinode` in a kernel inside
a Slurm allocation, in an executed notebook (nbclient, as test_notebook.py).

The allocation is simulated as tests/integration/multinode_test.cpp does it: SLURM_JOB_ID set,
SONDE_SRUN = tests/multinode/fake_srun (it starts local `sonde agent`s named n1, n2 and labels
their lines as srun --label does) and tests/multinode/fake_slurm (squeue, scontrol) first on PATH.
Every fake node sees this machine's processes: the job's processes (SLURM_JOB_ID in their
environment: the kernel and its children) are on n1 and on n2."""

import getpass
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from conftest import SOURCE_DIR
from test_notebook import RUNNER, mimes, outputs_of

FAKE_SRUN = os.path.join(SOURCE_DIR, "tests", "multinode", "fake_srun")
FAKE_SLURM = os.path.join(SOURCE_DIR, "tests", "multinode", "fake_slurm")


def job_id():
    """A job id of this test process: agents of two tests never count each other's work."""
    return str(5_000_000 + os.getpid() * 10 + len(_jobs))


_jobs = []


def allocation(job, nodes=2):
    """The environment of a process inside the (fake) allocation `job`."""
    names = ",".join(f"n{k + 1}" for k in range(nodes))
    return {"SLURM_JOB_ID": job, "SLURM_JOB_NUM_NODES": str(nodes), "SONDE_SRUN": FAKE_SRUN,
            "PATH": FAKE_SLURM + os.pathsep + os.environ.get("PATH", ""),
            "FAKE_SQUEUE_OUT": f"RUNNING|{getpass.getuser()}|n[1-{nodes}]",
            "FAKE_HOSTNAMES": names}


BURN = ("import time\nt = time.monotonic()\nx = 0\n"
        "while time.monotonic() - t < 3.0:\n    x += 1\n"
        "print('burned', time.process_time())\n")

CELLS = [
    "%load_ext sonde",                                                            # 1
    "%perfmonitor_start 0.25 --monitor slurm_multinode --out nodes-run",         # 2 (cell 0)
    # A child of the kernel: SLURM_JOB_ID in its environment, so the job's on every node.
    "import os, subprocess, sys\n"                                                # 3 (cell 1)
    "assert os.environ['SLURM_JOB_ID']\n"
    f"print(subprocess.run([sys.executable, '-c', {BURN!r}], check=True, capture_output=True, "
    "text=True).stdout)",
    "%perfmonitor_perfreport --node n1 --text",                                   # 4
    "%perfmonitor_perfreport --node '<Aggregated>' --text",                       # 5
    "%perfmonitor_perfreport --node n2 --level system --cell 1 --text",           # 6
    "%perfmonitor_plot --node n1 --cell 1",                                       # 7
    "%perfmonitor_plot --node '<Aggregated>' --backend matplotlib --save-jpeg agg.jpg",  # 8
    "%perfmonitor_resources",                                                     # 9
    "%perfmonitor_export_perfdata --node n2 --file n2.csv",                      # 10
    "%perfmonitor_perfreport --node n9 --text",                                   # 11
    "%perfmonitor_perfreport --cell 1 --text",                                    # 12
    "%perfmonitor_stop",                                                          # 13
    "%perfmonitor_perfreport --node n2 --cell 1 --text",                          # 14
]


def agents_of(job):
    """The command lines of the `sonde agent`s of `job` still running, read from /proc (not
    pgrep: under a ThreadSanitizer build the tests run with libtsan in LD_PRELOAD, which procps'
    tools and shells inherit and hang or crash with)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if "agent" in args and ("--job", job) in zip(args, args[1:]):
            found.append(" ".join(args))
    return found


def cpu_seconds(text):
    """The report's `CPU time` total."""
    m = re.search(r"CPU time ([0-9.]+) s", text)
    assert m, text
    return float(m.group(1))


def burned(cell):
    """The burner's own CPU seconds (time.process_time() at its end)."""
    text, _, _ = outputs_of(cell)
    m = re.search(r"^burned ([0-9.]+)$", text, re.M)
    assert m, text
    return float(m.group(1))


# A ThreadSanitizer build runs this interpreter with libtsan preloaded (python/CMakeLists.txt), and
# its sonde head and agents 5-15x slower on a machine that runs two tests at once: the figures of
# a timed workload then measure TSan (the reason scripts/test leaves the accuracy suite out of that
# stage). There the CPU figures are only required to be there; the normal and ASan stages check
# them against the burner's own.
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")


def near(measured, truth):
    """One interval at each end of the cell may be cut (0.25 s here), and the child's start."""
    if UNDER_TSAN:
        return measured >= 0
    return abs(measured - truth) <= 0.1 * truth + 0.4



def test_live_multinode_notebook(tmp_path):
    job = job_id()
    _jobs.append(job)
    share = tmp_path / "share" / "jupyter"
    spec = share / "kernels" / "sonde-test"
    spec.mkdir(parents=True)
    env = dict(os.environ)
    for k in ("SLURM_JOB_NODELIST", "SLURM_NNODES"):
        env.pop(k, None)
    env.update(allocation(job))
    kernel_env = {"PYTHONPATH": env.get("PYTHONPATH", ""), "MPLBACKEND": "Agg",
                  "XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "sonde test (Python 3)", "language": "python", "env": kernel_env}))
    env.update({"JUPYTER_PATH": str(share), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                "JUPYTER_DATA_DIR": str(tmp_path / "data"),
                "JUPYTER_CONFIG_DIR": str(tmp_path / "jconfig"),
                "IPYTHONDIR": str(tmp_path / "ipy")})
    work = tmp_path / "work"
    work.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, str(work / "live.ipynb"))
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(work / "live.ipynb"), str(work / "executed.ipynb")],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(str(work / "executed.ipynb"), as_version=4)
    cells = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}

    text, _, _ = outputs_of(cells[2])
    assert f"recording job {job} on 2 nodes (n1, n2)" in text, text
    assert "monitoring pid" in text

    # n1 during the session: the burning child's CPU seconds (it got what the shared machine
    # gave it), measured against its own count.
    truth = burned(cells[3])
    assert truth > 0.1
    text, _, _ = outputs_of(cells[4])
    assert "slurm level" in text and "node n1" in text and "cell [1]" in text, text
    assert near(cpu_seconds(text), truth), (truth, text)
    # The aggregate: both fake nodes count the child.
    text, _, _ = outputs_of(cells[5])
    # (Under TSan, with another test beside it, the aggregate's rows of a 0.5 s cell may not have
    # reached the head yet when the report is made: it then names the next cell.)
    assert "slurm level" in text and ("cell [1]" in text or (UNDER_TSAN and "cell [" in text)), text
    assert re.search(r"^  n1, running", text, re.M) and re.search(r"^  n2, running", text, re.M)
    assert near(cpu_seconds(text), 2 * truth), (truth, text)
    text, _, _ = outputs_of(cells[6])
    assert "system level, node n2" in text and (UNDER_TSAN or cpu_seconds(text) >= 0.9 * truth), \
        (truth, text)

    # Plots: plotly (the default backend) of n1, the aggregate as a JPEG.
    fig = mimes(cells[7], "application/vnd.plotly.v1+json")
    assert fig and "cpu_util_avg" in {t.get("name") for t in fig[0]["data"]}, cells[7]
    assert (work / "agg.jpg").read_bytes()[:3] == b"\xff\xd8\xff"

    text, _, _ = outputs_of(cells[9])
    assert "nodes (2, job " + job in text, text
    rows = re.search(r"^    n1: CPUs: \S+, Memory: [0-9.]+ GiB, GPUs: \d+; (\d+) rows, running",
                     text, re.M)
    assert rows and int(rows.group(1)) >= 12, text
    assert "    n2: " in text

    # The export of n2: its rows with JUmPER's cell_index, the burn cell among them.
    text, _, _ = outputs_of(cells[10])
    assert "of node n2 written to n2.csv" in text, text
    import pandas as pd

    df = pd.read_csv(work / "n2.csv")
    assert {"time", "wallclock", "cpu_util_avg", "memory", "cell_index"} <= set(df.columns)
    assert (df["cell_index"] == 1).sum() >= 4

    # A node that is not in the job: one line naming the nodes.
    errs = "".join(o.get("text", "") for o in cells[11].outputs if o.get("name") == "stderr")
    assert "'n9' is not a node of this run (nodes: n1, n2" in errs, cells[11].outputs
    # Without --node: the kernel's own monitor, as without slurm_multinode.
    text, _, _ = outputs_of(cells[12])
    assert "process level" in text and near(cpu_seconds(text), truth), (truth, text)

    # Stop: the head ended its agents; the run directory is complete, and still read.
    text, _, _ = outputs_of(cells[13])
    assert "monitor stopped" in text and "sonde multi-node summary (job " + job in text, text
    assert "is complete" in text, text
    run = work / "nodes-run"
    m = json.loads((run / "manifest.json").read_text())
    assert m["complete"] is True and m["multinode"]["job"] == job
    assert [n["name"] for n in m["nodes"]] == ["n1", "n2"]
    assert all(n["status"] == "complete" for n in m["nodes"]), m["nodes"]
    for name in ("perf_slurm.csv", "perf_system.csv", "nodes/n1/perf_slurm.csv",
                 "nodes/n2/perf_system.csv"):
        assert (run / name).is_file(), name
    text, _, _ = outputs_of(cells[14])
    assert "node n2" in text and near(cpu_seconds(text), truth), (truth, text)
    # No agent is left behind.
    left = agents_of(job)
    assert left == [], left


# Errors, in this process's shell -------------------------------------------------------------

@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    sh.display_pub = CapturingDisplayPublisher()
    sh.run_cell("%load_ext sonde", store_history=True)
    yield sh
    sh.run_cell("%unload_ext sonde", store_history=True)


@pytest.fixture
def run(shell, capsys):
    def _run(code):
        capsys.readouterr()
        result = shell.run_cell(code, store_history=True)
        out, err = capsys.readouterr()
        assert result.error_in_exec is None, f"{code!r} raised {result.error_in_exec!r}"
        assert "Traceback" not in out + err
        return out, err

    return _run


def magics_of(shell):
    return shell.magics_manager.registry["SondeMagics"]


def test_outside_an_allocation(run, shell, monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    out, err = run("%perfmonitor_start 0.5 --monitor slurm_multinode --out x")
    assert "sonde: error: --monitor slurm_multinode: not inside a Slurm allocation" in err, err
    assert "nothing was started" in err
    m = magics_of(shell)
    assert (m.monitor is None or not m.monitor.running) and m.multinode is None
    assert not (tmp_path / "x").exists()
    _, err = run("%perfmonitor_start --out x")
    assert "--out: only with --monitor slurm_multinode" in err


def test_a_head_that_does_not_start(run, shell, monkeypatch, tmp_path):
    env = allocation("4242")
    del env["FAKE_SQUEUE_OUT"]  # squeue: "Invalid job id specified"
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("FAKE_SQUEUE_OUT", raising=False)
    out, err = run("%perfmonitor_start 0.5 --monitor slurm_multinode --out y")
    assert "the multi-node head (sonde record --slurm-job 4242) did not start" in err, err
    assert "no such job, or it has ended" in err and "Invalid job id specified" in err, err
    m = magics_of(shell)
    assert (m.monitor is None or not m.monitor.running) and m.multinode is None
    assert not (tmp_path / "y").exists()
    # A launcher that is not there: srun's absence named.
    monkeypatch.setenv("FAKE_SQUEUE_OUT", f"RUNNING|{getpass.getuser()}|n1")
    monkeypatch.setenv("FAKE_HOSTNAMES", "n1")
    monkeypatch.setenv("SONDE_SRUN", str(tmp_path / "no-srun"))
    _, err = run("%perfmonitor_start 0.5 --monitor slurm_multinode --out z")
    assert "did not start" in err and "no-srun' was not found" in err, err
    assert not (magics_of(shell).monitor and magics_of(shell).monitor.running)
    _, err = run("%perfmonitor_stop")
    assert "no monitor is running" in err


def test_an_agent_lost_during_the_session(run, shell, monkeypatch, tmp_path):
    """n2's agent killed mid-session: the next --node report says so, the resources list it
    lost, the aggregate covers n1 only from then on, and the session goes on to a clean stop."""
    job = job_id()
    _jobs.append(job)
    for k, v in allocation(job).items():
        monkeypatch.setenv(k, v)
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_SRUN_PIDS", str(pids))
    out, err = run("%perfmonitor_start 0.25 --monitor slurm_multinode --out live-run")
    assert "on 2 nodes (n1, n2)" in out, err
    m = magics_of(shell)
    try:
        run("import time; time.sleep(1.0)")
        agents = dict(line.split() for line in pids.read_text().splitlines())
        os.kill(int(agents["1"]), 9)
        # Lost after 5 intervals without a line.
        run("import json, time\n"
            "for _ in range(100):\n"
            f"    nodes = json.load(open({str(tmp_path / 'live-run' / 'manifest.json')!r}))"
            "['nodes']\n"
            "    if nodes[1]['status'] == 'lost':\n"
            "        break\n"
            "    time.sleep(0.1)\n"
            "time.sleep(1.0)")
        out, err = run("%perfmonitor_perfreport --node n2 --cell -1 --text")
        assert "sonde: warning: node n2 (task 1) lost" in err, err
        assert "node n2" in out
        out, err = run("%perfmonitor_resources")
        assert re.search(r"^    n2: .*; \d+ rows, lost \(no line for", out, re.M), out
        assert re.search(r"^    n1: .*; \d+ rows, running", out, re.M), out
        agg = m._node_data("<Aggregated>").frame("slurm")
        assert agg["nodes"].iloc[-1] == 1 and agg["nodes"].max() == 2
        out, err = run("%perfmonitor_stop")
        assert "is complete" in out, out + err
    finally:
        if m.multinode is not None:
            m.multinode.stop()
        if m.monitor is not None:
            m.monitor.stop()
    manifest = json.loads((tmp_path / "live-run" / "manifest.json").read_text())
    assert manifest["complete"] is True
    assert [n["status"] for n in manifest["nodes"]] == ["complete", "lost"]


def test_service_api(monkeypatch, tmp_path, capsys):
    """JUmPER's Python API: start_monitoring(monitor_type="slurm_multinode"), node= on the
    reports and exports, close() ends the head."""
    from sonde.service import build_perfmonitor_service

    job = job_id()
    _jobs.append(job)
    for k, v in allocation(job).items():
        monkeypatch.setenv(k, v)
    service = build_perfmonitor_service(display_disabled=True)
    try:
        service.start_monitoring(0.25, monitor_type="slurm_multinode")
        head = service.magics.multinode
        assert head is not None and head.running
        # A child: the job's (this process's own environment in /proc is as it started).
        with service.monitored():
            child = subprocess.run([sys.executable, "-c", BURN.replace("3.0", "1.5")],
                                   check=True, capture_output=True, text=True)
        truth = float(child.stdout.split()[1])
        capsys.readouterr()
        service.show_perfreport(cell_range="0", node="n1", text=True)
        out = capsys.readouterr().out
        assert "slurm level, node n1" in out and near(cpu_seconds(out), truth), (truth, out)
        df = service.export_perfdata(node="n2", level="system")["perfdata_df"]
        assert (df["cell_index"] == 0).sum() >= 4 and "cpu_util_avg" in df.columns
    finally:
        service.close()
    assert not head.running and head.proc.returncode == 0
    m = json.loads(open(os.path.join(head.directory, "manifest.json")).read())
    assert m["complete"] is True


def test_a_head_that_ends_by_itself(run, shell, monkeypatch, tmp_path):
    """The launcher exits mid-session (srun lost its step): the head ends; the kernel's monitor
    goes on, --node still reads the run, and the stop shows the head's summary."""
    job = job_id()
    _jobs.append(job)
    for k, v in allocation(job).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FAKE_SRUN_EXIT", "1.5")
    out, err = run("%perfmonitor_start 0.25 --monitor slurm_multinode --out ended-run")
    assert "on 2 nodes" in out, err
    m = magics_of(shell)
    try:
        run("import time\nfor _ in range(100):\n"
            "    if not get_ipython().magics_manager.registry['SondeMagics'].multinode.running:\n"
            "        break\n"
            "    time.sleep(0.1)")
        assert not m.multinode.running and m.monitor.running
        out, err = run("%perfmonitor_resources")
        # No node is running any more (what each became is the head's: docs/multinode.md).
        assert re.search(r"^    n1: .*; \d+ rows, (complete|lost)", out, re.M), out
        out, err = run("%perfmonitor_stop")
        assert "the multi-node head had ended" in err, err
        assert "monitor stopped" in out and "sonde multi-node summary" in out, out
        _, err = run("%perfmonitor_stop")
        assert "no monitor is running" in err
    finally:
        if m.multinode is not None:
            m.multinode.stop()
        if m.monitor is not None:
            m.monitor.stop()
