"""examples/notebooks/quickstart.ipynb executed headless by `jupyter nbconvert --to notebook
--execute` (Debian's nbconvert and nbclient, unpatched) in a kernel running /usr/bin/python3 (this
interpreter) with the build tree's sonde package."""

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


# nbclient as `jupyter nbconvert --execute` runs it (the multi-node tests run it this way: inside
# an sbatch job, test_multinode_live_cluster.py, only a script of its own is at hand).
RUNNER = """
import sys
import nbformat
from nbclient import NotebookClient

nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, timeout=180, kernel_name="sonde-test",
               resources={"metadata": {"path": "."}}).execute()
nbformat.write(nb, sys.argv[2])
"""


def mimes(cell, mime):
    return [o["data"][mime] for o in cell.get("outputs", [])
            if o["output_type"] in ("display_data", "execute_result") and mime in o["data"]]


def test_quickstart_notebook(tmp_path):
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
    # The command a user runs, unpatched: no widget manager on the other side (nbclient), so
    # the plot widget and the live plot's button must not be widgets (Debian 12's nbclient 0.7
    # aborts the whole run, --allow-errors or not, on a comm_open of Debian's ipywidgets 6:
    # KeyError: 'state').
    jupyter = shutil.which("jupyter")
    assert jupyter, "jupyter (jupyter-core, with jupyter-nbconvert: scripts/install-deps --tests)"
    proc = subprocess.run(
        [jupyter, "nbconvert", "--to", "notebook", "--execute",
         "--ExecutePreprocessor.timeout=180", "--ExecutePreprocessor.kernel_name=sonde-test",
         "--output", "executed.ipynb", str(nb_path)],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "KeyError" not in proc.stderr, proc.stderr[-3000:]
    nb = nbformat.read(str(work / "executed.ipynb"), as_version=4)
    cells = {c.execution_count: c for c in nb.cells if c.cell_type == "code"}

    text, _, _ = outputs_of(cells[2])
    assert "monitoring pid" in text

    # The HTML report of the CPU cell (cell_index 1, JUmPER's numbering; In [3], IPython's): a
    # table whose CPU row has a non-zero mean, and its text form for front ends without HTML.
    text, html, _ = outputs_of(cells[5])
    assert "sonde-report-table" in html and "cell [1] (In [3])" in html
    assert text.startswith("sonde report: cell [1] (In [3]), process level"), text
    m = re.search(r"CPU utilisation \(%\)</th><td[^>]*>([0-9.]+)</td>", html)
    assert m, html
    assert float(m.group(1)) > 1  # percent of the available CPUs; one core busy (or what the
    # machine gives it)
    m = re.search(r"CPU \(cores\)</th><td[^>]*>([0-9.]+)</td>", html)
    assert m and float(m.group(1)) > 0.01, html

    # The text report of cells 1..2, addressed as In[3]:In[4]: the CPU row and the memory peak
    # of the 300 MiB cell.
    text, _, _ = outputs_of(cells[6])
    assert text.startswith("sonde report: cells [1]..[2] (In [3]..In [4]), process level"), text
    cpu = [ln for ln in text.splitlines() if ln.startswith("CPU utilisation (%)")]
    mem = [ln for ln in text.splitlines() if ln.startswith("Memory (GiB)")]
    assert cpu and float(cpu[0][28:].split()[0]) > 1, text  # mean
    assert mem and float(mem[0][28:].split()[2]) > 0.25, text  # max GiB: the 300 MiB cell
    assert "tags:" in text

    # The plot with plotly (JUmPER's default backend) and the JPEG file.
    fig = mimes(cells[7], "application/vnd.plotly.v1+json")
    assert fig and {"cpu_util_avg", "memory"} <= {t.get("name") for t in fig[0]["data"]}
    assert (work / "quickstart.jpg").read_bytes()[:3] == b"\xff\xd8\xff"
    # The plot widget without a widget front end: its static stand-in, a PNG the executed
    # notebook keeps; the live plot: its PNG display, no stop button (a widget).
    _, _, pngs = outputs_of(cells[8])
    assert pngs and not mimes(cells[8], "application/vnd.jupyter.widget-view+json")
    _, _, pngs = outputs_of(cells[9])
    assert pngs and not mimes(cells[9], "application/vnd.jupyter.widget-view+json")
    assert "widgets" not in nb.metadata  # no widget state stored

    # JUmPER's DataFrames: perfdata_df with cell_index (the CPU cell has its samples),
    # cell_history_df with JUmPER's columns, the files loaded back.
    text, _, _ = outputs_of(cells[12])
    rows = dict(ln.split() for ln in text.splitlines()[1:] if len(ln.split()) == 2)
    assert "1" in rows and float(rows["1"]) > 1, text
    _, html, _ = outputs_of(cells[13])
    assert "cell_index" in html and "raw_cell" in html and "duration" in html
    json.loads((work / "quickstart_perfdata.json").read_text())
    assert (work / "quickstart_cells.csv").read_text().startswith(
        "cell_index,raw_cell,start_time,end_time,duration,wallclock_start_time,"
        "wallclock_end_time")
    text, _, _ = outputs_of(cells[14])
    # 15 columns (14 before memory_rss joined memory, now Pss, at the process level).
    assert re.search(r"^\(\d+, 15\) \d+$", text, re.M) and "loaded_perfdata_df" in text, text

    # The Python API: `with service.monitored():` is cell 0 of the service's history.
    text, _, _ = outputs_of(cells[15])
    assert "sonde report: cell [0]" in text, text

    # Script recording: the cell in between was not run, the script was written.
    text, _, _ = outputs_of(cells[17])
    assert "Cell execution skipped during script recording" in text and "499999500000" not in text
    text, _, _ = outputs_of(cells[18])
    assert "1 cells written to quickstart_script.py" in text
    assert "total = sum(range(10**6))" in (work / "quickstart_script.py").read_text()

    # The exported session.
    sess = work / "quickstart-session"
    for name in ("manifest.json", "perf_process.csv", "perf_user.csv", "perf_system.csv",
                 "cell_history.csv"):
        assert (sess / name).is_file(), name
    hist = (sess / "cell_history.csv").read_text().splitlines()
    assert hist[0] == "index,start_wallclock,end_wallclock,code"
    # cell_index 0 is In [2] (the start cell): the execution counts are in the manifest
    counts = json.loads((sess / "manifest.json").read_text())["cell_execution_counts"]
    assert counts[:3] == [2, 3, 4], counts
    assert sum(1 for ln in (sess / "perf_process.csv").read_text().splitlines()) > 20
