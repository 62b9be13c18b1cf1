"""examples/notebooks/quickstart.ipynb executed headless by Debian's `jupyter nbconvert --execute`
in a kernel running /usr/bin/python3 (this interpreter) with the build tree's sonde package."""

import json
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from conftest import SOURCE_DIR

NOTEBOOK = os.path.join(SOURCE_DIR, "examples", "notebooks", "quickstart.ipynb")


def outputs_of(cell):
    texts, htmls, pngs = [], [], []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            texts.append(o["text"])
        elif o["output_type"] in ("display_data", "execute_result"):
            data = o.get("data", {})
            texts.append(data.get("text/plain", ""))
            htmls.append(data.get("text/html", ""))
            if "image/png" in data:
                pngs.append(data["image/png"])
        elif o["output_type"] == "error":
            pytest.fail(f"cell {cell.get('execution_count')} raised {o['ename']}: {o['evalue']}")
    return "".join(texts), "".join(htmls), pngs


def test_quickstart_notebook(tmp_path):
    nbconvert = shutil.which("jupyter-nbconvert") or "/usr/bin/jupyter-nbconvert"
    if not os.path.exists(nbconvert):
        pytest.fail("jupyter-nbconvert is missing (Debian: jupyter-nbconvert)")
    # A kernelspec of our own: this interpreter, the build tree's package on PYTHONPATH.
    share = tmp_path / "share" / "jupyter"
    spec = share / "kernels" / "sonde-test"
    spec.mkdir(parents=True)
    env = dict(os.environ)
    kernel_env = {"PYTHONPATH": env.get("PYTHONPATH", ""), "MPLBACKEND": "Agg",
                  "XDG_CONFIG_HOME": env["XDG_CONFIG_HOME"]}
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "sonde test (Python 3)", "language": "python", "env": kernel_env}))
    env.update({"JUPYTER_PATH": str(share), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                "JUPYTER_DATA_DIR": str(tmp_path / "data"),
                "JUPYTER_CONFIG_DIR": str(tmp_path / "jconfig"), "IPYTHONDIR": str(tmp_path / "ipy")})
    work = tmp_path / "work"
    work.mkdir()
    nb_path = work / "quickstart.ipynb"
    shutil.copy(NOTEBOOK, nb_path)
    proc = subprocess.run(
        [nbconvert, "--to", "notebook", "--execute", "--ExecutePreprocessor.kernel_name=sonde-test",
         "--ExecutePreprocessor.timeout=180", "--output", "executed.ipynb", str(nb_path)],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = nbformat.read(str(work / "executed.ipynb"), as_version=4)
    cells = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}

    text, _, _ = outputs_of(cells[2])
    assert "monitoring pid" in text

    # The HTML report of the CPU cell (3): a table whose CPU row has a non-zero mean.
    _, html, _ = outputs_of(cells[5])
    assert "sonde-report-table" in html and "cell [3]" in html
    m = re.search(r"CPU utilisation \(%\)</th><td[^>]*>([0-9.]+)</td>", html)
    assert m, html
    assert float(m.group(1)) > 1  # percent of the available CPUs; one core busy (or what the
    # machine gives it)
    m = re.search(r"CPU \(cores\)</th><td[^>]*>([0-9.]+)</td>", html)
    assert m and float(m.group(1)) > 0.01, html

    # The text report of cells 3..4: the CPU row and the memory peak of the 300 MiB cell.
    text, _, _ = outputs_of(cells[6])
    cpu = [ln for ln in text.splitlines() if ln.startswith("CPU utilisation (%)")]
    mem = [ln for ln in text.splitlines() if ln.startswith("Memory (GiB)")]
    assert cpu and float(cpu[0][28:].split()[0]) > 1, text  # mean
    assert mem and float(mem[0][28:].split()[2]) > 0.25, text  # max GiB: the 300 MiB cell
    assert "tags:" in text

    # The plot: a PNG in the notebook and the JPEG file.
    _, _, pngs = outputs_of(cells[7])
    assert pngs
    assert (work / "quickstart.jpg").read_bytes()[:3] == b"\xff\xd8\xff"

    # The exported session.
    sess = work / "quickstart-session"
    for name in ("manifest.json", "perf_process.csv", "perf_user.csv", "perf_system.csv",
                 "cell_history.csv"):
        assert (sess / name).is_file(), name
    hist = (sess / "cell_history.csv").read_text().splitlines()
    assert hist[0] == "index,start_wallclock,end_wallclock,code"
    assert sum(1 for ln in (sess / "perf_process.csv").read_text().splitlines()) > 20
