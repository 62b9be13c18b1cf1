"""The live multi-node monitor on the real 3-node Slurm test cluster (tests/slurm, the ctest
fixture slurm_cluster; SONDE_SLURM_CLUSTER_DIR names its directory): a notebook executed by
nbclient inside `sbatch -N3`, so the kernel runs on n1 in a real allocation. A cell burns a core
on n2 through `srun -w n2`; the reports with --node see it on n2 only."""

import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from conftest import SOURCE_DIR
from test_multinode_live import burned, cpu_seconds, near
from test_notebook import RUNNER, outputs_of

CLUSTER = os.path.join(SOURCE_DIR, "tests", "slurm", "cluster")

BURN = ("import time\nt = time.monotonic()\nx = 0\n"
        "while time.monotonic() - t < 4.0:\n    x += 1\n"
        "print('burned', time.process_time())\n")

CELLS = [
    "%load_ext sonde",                                                              # 1
    "%perfmonitor_start 0.5 --monitor slurm_multinode --out nodes-run",            # 2 (cell 0)
    "import socket, subprocess, sys\n"                                              # 3 (cell 1)
    "print('kernel on', socket.gethostname())\n"
    "print(subprocess.run(['srun', '--overlap', '-N1', '-n1', '-w', 'n2', sys.executable, '-c', "
    f"{BURN!r}], check=True, capture_output=True, text=True).stdout)",
    "%perfmonitor_perfreport --node n2 --cell 1 --text",                            # 4
    "%perfmonitor_perfreport --node n3 --cell 1 --text",                            # 5
    "%perfmonitor_perfreport --node '<Aggregated>' --cell 1 --text",                # 6
    "%perfmonitor_resources",                                                       # 7
    "%perfmonitor_stop",                                                            # 8
]


def cluster_env(directory):
    """The environment with the cluster's exports (`cluster env DIR`)."""
    out = subprocess.run(["bash", "-c", f'eval "$("{CLUSTER}" env "{directory}")" && env -0'],
                         capture_output=True, text=True, check=True).stdout
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)



def test_live_multinode_on_the_cluster(tmp_path):
    directory = os.environ.get("SONDE_SLURM_CLUSTER_DIR")
    if not directory:
        pytest.fail("SONDE_SLURM_CLUSTER_DIR is not set (run through ctest: fixture "
                    "slurm_cluster)")
    env = cluster_env(directory)
    for k in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        del env[k]
    env.pop("SONDE_SRUN", None)
    share = tmp_path / "share" / "jupyter"
    spec = share / "kernels" / "sonde-test"
    spec.mkdir(parents=True)
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
    (work / "runner.py").write_text(RUNNER)
    # The batch script runs on n1: the kernel is there, inside the job (SLURM_JOB_ID etc.).
    proc = subprocess.run(
        ["sbatch", "--wait", "-N3", "-t", "5", "-o", str(work / "job.out"), "-D", str(work),
         "--wrap", f"{sys.executable} runner.py live.ipynb executed.ipynb"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    job_out = (work / "job.out").read_text() if (work / "job.out").exists() else ""
    assert proc.returncode == 0, proc.stderr + job_out[-3000:]
    nb = nbformat.read(str(work / "executed.ipynb"), as_version=4)
    cells = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}

    text, _, _ = outputs_of(cells[2])
    assert re.search(r"recording job \d+ on 3 nodes \(n1, n2, n3\)", text), text
    text, _, _ = outputs_of(cells[3])
    assert "kernel on n1" in text, text
    # n2 burned what the shared machine gave it (its own count), n3 idled, n1 held the kernel.
    truth = burned(cells[3])
    assert truth > 0.1
    text, _, _ = outputs_of(cells[4])
    assert "slurm level, node n2" in text and near(cpu_seconds(text), truth), (truth, text)
    text, _, _ = outputs_of(cells[5])
    assert "slurm level, node n3" in text and cpu_seconds(text) < 0.05, text
    text, _, _ = outputs_of(cells[6])
    assert "slurm level" in text and near(cpu_seconds(text), truth), (truth, text)
    assert re.search(r"^  n3, running, \d+ rows", text, re.M), text
    text, _, _ = outputs_of(cells[7])
    for n in ("n1", "n2", "n3"):
        assert f"    {n}: CPUs: " in text, text
    text, _, _ = outputs_of(cells[8])
    assert "is complete" in text, text
    m = json.loads((work / "nodes-run" / "manifest.json").read_text())
    assert m["complete"] is True
    assert [(n["name"], n["status"]) for n in m["nodes"]] == \
        [("n1", "complete"), ("n2", "complete"), ("n3", "complete")], m["nodes"]
