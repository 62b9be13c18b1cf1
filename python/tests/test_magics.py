"""Every magic through a real IPython InteractiveShell, with its bad inputs."""

import json
import os
import re
import subprocess
import sys
import zipfile

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from sonde import report

from conftest import busy


@pytest.fixture(scope="module")
def shell():
    sh = InteractiveShell.instance()
    sh.display_pub = CapturingDisplayPublisher()
    sh.run_cell("%load_ext sonde", store_history=True)
    sh.user_ns["busy"] = busy
    yield sh
    sh.run_cell("%unload_ext sonde", store_history=True)


@pytest.fixture
def run(shell, capsys):
    """Runs a cell; returns (stdout, stderr, display outputs) and checks it raised nothing."""

    def _run(code):
        capsys.readouterr()
        shell.display_pub.outputs.clear()
        result = shell.run_cell(code, store_history=True)
        out, err = capsys.readouterr()
        # ipywidgets outside a kernel (no front end to draw a widget) says so on stderr
        err = "".join(ln for ln in err.splitlines(True)
                      if not ln.startswith("Widget Javascript not detected"))
        assert result.error_in_exec is None, f"{code!r} raised {result.error_in_exec!r}"
        assert result.error_before_exec is None
        assert "Traceback" not in out + err
        return out, err, list(shell.display_pub.outputs)

    return _run


def data_of(o):
    return o.data if hasattr(o, "data") else o["data"]


def html_of(outputs):
    return "".join(data_of(o).get("text/html", "") for o in outputs)


def has_png(outputs):
    return any("image/png" in data_of(o) for o in outputs)


def magics_of(shell):
    return shell.magics_manager.registry["SondeMagics"]


# The order matters: one session, as in a notebook.

def test_help(run):
    out, err, _ = run("%perfmonitor_help")
    for name in ("perfmonitor_start", "perfmonitor_perfreport", "export_session", "import_session"):
        assert name in out


def test_before_start(run):
    _, err, _ = run("%perfmonitor_stop")
    assert err.strip() == ("sonde: error: no monitor is running (start one with "
                           "%perfmonitor_start)")
    _, err, _ = run("%perfmonitor_plot")
    assert err.startswith("sonde: error: no performance data yet")
    _, err, _ = run("%perfmonitor_perfreport")
    assert err.startswith("sonde: error: no performance data yet")
    _, err, _ = run("%export_session x")
    assert err.startswith("sonde: error: no performance data yet")


def test_resources(run):
    out, err, _ = run("%perfmonitor_resources")
    assert err == ""
    lines = out.splitlines()
    # JUmPER's lines, memory in GiB rounded to two decimals (JUmPER's round(x, 2); it says GB)
    assert re.fullmatch(r"  CPUs: \d+", lines[1]), out
    assert re.fullmatch(r"    CPU affinity: \[[0-9, ]+\]", lines[2]), out
    m = re.fullmatch(r"  Memory: (\d+\.\d+) GiB", lines[3])
    assert m and len(m.group(1).split(".")[1]) <= 2, out
    assert re.fullmatch(r"  GPUs: \d+", lines[4]), out
    assert "Memory (process):" in out


def test_start_bad_inputs(run):
    _, err, _ = run("%perfmonitor_start --bogus")
    assert err.strip() == "sonde: error: %perfmonitor_start: unrecognized arguments: --bogus"
    _, err, _ = run("%perfmonitor_start abc")
    assert "sonde: error: %perfmonitor_start: argument interval: invalid float value" in err
    _, err, _ = run("%perfmonitor_start 0.1 --levels process,nope")
    assert "unknown level 'nope'" in err
    _, err, _ = run("%perfmonitor_start --monitor bogus")
    assert "argument --monitor: invalid choice: 'bogus'" in err
    _, err, _ = run("%perfmonitor_start 0.0005")
    assert "interval" in err
    assert len(err.strip().splitlines()) == 1


def test_start_and_cells(run, shell):
    out, err, _ = run("%perfmonitor_start 0.1 --levels process,user,system")
    assert "monitoring pid" in out, err
    assert magics_of(shell).monitor.running
    _, err, _ = run("%perfmonitor_start")
    assert "already running" in err
    # the CPU cell, with what getrusage says this process used (cores) over it
    run("import resource, time as _t\n"
        "_r0 = resource.getrusage(resource.RUSAGE_SELF); _w0 = _t.time()\n"
        "busy(1.2)\n"
        "_r1 = resource.getrusage(resource.RUSAGE_SELF)\n"
        "busy_cores = (_r1.ru_utime + _r1.ru_stime - _r0.ru_utime - _r0.ru_stime) / "
        "(_t.time() - _w0)")
    run("blob = b'x' * (150 * 2**20); import time; time.sleep(0.6)")  # the memory cell


def cell_count(shell, code_start):
    for c in magics_of(shell).history.cells:
        if code_start in c.code:
            return c.index
    raise AssertionError(code_start)


def test_cell_history(run, shell):
    hist = magics_of(shell).history.cells
    assert len(hist) >= 5
    for c in hist:
        assert c.end_wallclock >= c.start_wallclock
    busy_cell = [c for c in hist if "busy(1.2)" in c.code][0]
    assert 1.1 < busy_cell.duration < 10
    out, err, outputs = run("%show_cell_history")
    assert err == ""
    run("%cell_history")


def test_perfreport_html_and_text(run, shell):
    n = cell_count(shell, "busy(1.2)")
    _, err, outputs = run(f"%perfmonitor_perfreport --cell {n}")
    assert err == ""
    page = html_of(outputs)
    assert "sonde-report-table" in page and f"cell [{n}]" in page
    out, err, _ = run(f"%perfmonitor_perfreport --cell {n} --text")
    assert "CPU" in out and "tags:" in out
    summary = magics_of(shell).summary(magics_of(shell).history.select(str(n)))
    # one core busy, as far as the machine let it: what getrusage measured over the cell
    assert shell.user_ns["busy_cores"] > 0.05
    assert report.metric(summary, "process", "cpu_cores") == pytest.approx(
        shell.user_ns["busy_cores"], rel=0.35)
    assert report.metric(summary, "process", "cpu") == pytest.approx(
        report.metric(summary, "process", "cpu_cores") / summary["levels"]["process"]["num_cpus"]
        * 100, rel=1e-9)
    # The figures come from the C++ summarize_run; the Python fallback computes the same.
    import sonde

    if sonde._native.has_summarize_run:
        assert summary.get("engine") != "python"
        data = magics_of(shell).data
        py = report.summarize_py({lvl: data.frame(lvl) for lvl in data.levels}, data.manifest(),
                                 magics_of(shell)._window(magics_of(shell).history.select(str(n))))
        for lvl in data.levels:
            assert py["levels"][lvl]["ticks"] == summary["levels"][lvl]["ticks"]
            for key in ("cpu", "cpu_cores", "memory"):
                for stat in ("mean", "min", "max", "limit"):
                    a, b = report.metric(py, lvl, key, stat), report.metric(summary, lvl, key, stat)
                    assert (a is None and b is None) or a == pytest.approx(b, rel=1e-9), \
                        (lvl, key, stat)
        assert py["tags"] == summary["tags"]
    m = magics_of(shell).history.select(str(cell_count(shell, "blob =")))
    # GiB: the 150 MiB blob
    assert report.metric(magics_of(shell).summary(m), "process", "memory", "max") > 0.14
    # whole session, other levels, ranges
    for line in ("", "--level system", "--level user --text", f"--cell :{n}", f"--cell {n}:",
                 "--cell -1", f"--cell 1:{n}"):
        _, err, _ = run(f"%perfmonitor_perfreport {line}")
        assert err == "", line


@pytest.mark.parametrize("bad, message", [
    ("--cell abc", "--cell: 'abc' is not a cell index or range"),
    ("--cell 8:2", "empty range"),
    ("--cell 1:2:3", "more than one ':'"),
    ("--cell 9999", "beyond the last cell"),
    ("--cell -9999", "reaches before the first recorded cell"),
    ("--level slurmy", "--level: 'slurmy' is not in this session"),
    ("--frobnicate", "unrecognized arguments: --frobnicate"),
    ("--cell", "expected one argument"),
])
def test_perfreport_bad_inputs(run, bad, message):
    _, err, _ = run(f"%perfmonitor_perfreport {bad}")
    assert err.startswith("sonde: error:") and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_auto_reports(run):
    out, err, _ = run("%perfmonitor_enable_perfreports --text")
    assert err == ""
    out, err, _ = run("busy(0.4)")
    assert "sonde report: cell" in out and "CPU" in out
    run("%perfmonitor_enable_perfreports")
    _, _, outputs = run("busy(0.3)")
    assert "sonde-report-table" in html_of(outputs)
    _, err, _ = run("%perfmonitor_enable_perfreports --level nope")
    assert "nope" in err
    run("%perfmonitor_disable_perfreports")
    out, _, outputs = run("busy(0.2)")
    assert "sonde report" not in out and not html_of(outputs)


def outputs_with(outputs, mime):
    return [data_of(o)[mime] for o in outputs if mime in data_of(o)]


def test_plot(run, shell, tmp_path):
    # Without --level, and no widget front end (this shell has no kernel, as terminal IPython):
    # the widget's static stand-in, a PNG (test_notebook.py: the same under nbconvert --execute)
    magics_of(shell).last_widget = None
    _, err, outputs = run("%perfmonitor_plot")
    assert err == "" and has_png(outputs) and magics_of(shell).last_widget is None
    assert not outputs_with(outputs, "application/vnd.jupyter.widget-view+json")
    assert magics_of(shell).last_widget_fallback == "not in a Jupyter kernel"
    assert magics_of(shell).backend == "plotly"  # the stand-in does not change the choice
    # JUmPER's plot widget (ipywidgets), where a front end draws it: drawn once with plotly
    magics_of(shell).plot_widget = True
    try:
        _, err, outputs = run("%perfmonitor_plot")
    finally:
        magics_of(shell).plot_widget = None
    assert err == ""  # (the widget's own output needs a kernel)
    w = magics_of(shell).last_widget
    assert w.draws == 1 and w.error is None
    lo, hi = w.range.value
    # JUmPER: from the last long cell to the last cell (the one before this plot cell)
    assert hi == magics_of(shell).history.cells[-2].index
    w.idle.value = True  # a change redraws
    w.range.value = (w.range.min, w.range.max)
    w.level.value = "system"
    assert w.draws == 4 and w.error is None, w.error
    # With --level: the plot itself; plotly's MIME bundle, then matplotlib's PNG
    _, err, outputs = run("%perfmonitor_plot --level process")
    fig = outputs_with(outputs, "application/vnd.plotly.v1+json")
    assert err == "" and fig and fig[0]["data"], err
    assert {"cpu_util_avg", "memory"} <= {t.get("name") for t in fig[0]["data"]}
    _, err, outputs = run("%perfmonitor_plot --level process --backend matplotlib")
    assert err == "" and has_png(outputs)
    _, err, outputs = run("%perfmonitor_plot --level system")  # the backend choice stays
    assert err == "" and has_png(outputs)
    jpeg = tmp_path / "p.jpg"
    n = cell_count(shell, "busy(1.2)")
    _, err, outputs = run(f"%perfmonitor_plot --metrics cpu_summary,memory,io_read,cpu_util_0 "
                          f"--cell {n} --level user --save-jpeg {jpeg} --backend plotly")
    assert err == ""
    assert jpeg.read_bytes()[:3] == b"\xff\xd8\xff"
    assert outputs_with(outputs, "application/vnd.plotly.v1+json")
    pk = tmp_path / "plot.pkl"
    out, err, _ = run(f"%perfmonitor_plot --metrics memory --pickle {pk}")
    assert err == "" and pk.stat().st_size > 0
    for bad, message in (("--metrics nosuch", "unknown metric 'nosuch'"),
                         ("--live 1 2 3", "at most INTERVAL and WINDOW"),
                         ("--live 0", "must be > 0"),
                         ("--backend bokeh", "invalid choice: 'bokeh'"),
                         ("--cell x", "not a cell index"), ("--level nope", "not in this"),
                         ("--what", "unrecognized")):
        _, err, _ = run(f"%perfmonitor_plot {bad}")
        assert err.startswith("sonde: error:") and message in err, (bad, err)


def test_live_plot(run, shell):
    import time

    _, err, outputs = run("%perfmonitor_plot --live 0.2 30 --metrics cpu_summary --level process")
    assert err == ""
    lp = magics_of(shell).live_plots[-1]
    assert lp.interval == 0.2 and lp.window == 30 and lp.running
    assert lp.button is None  # no widget front end: no stop button
    first = lp.frames
    run("busy(1.0)")  # the plot redraws while this cell runs
    deadline = time.monotonic() + 10
    while lp.frames < first + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lp.frames >= first + 2 and lp.last_error is None
    lp.stop()
    assert not lp.running
    run("%perfmonitor_plot --live")  # JUmPER's defaults: every 2 s, the last 120 s
    lp = magics_of(shell).live_plots[-1]
    assert (lp.interval, lp.window) == (2.0, 120.0)
    lp.stop()


def test_export_perfdata(run, shell, tmp_path):
    out, err, _ = run("%perfmonitor_export_perfdata")
    assert "perfdata_df" in shell.user_ns  # JUmPER's default name
    df = shell.user_ns["perfdata_df"]
    assert "cpu_util_avg" in df.columns and len(df) > 10
    # JUmPER's cell_index: the cell each sample was taken in
    assert df.columns[-1] == "cell_index"
    busy_cell = [c for c in magics_of(shell).history.cells if "busy(1.2)" in c.code][0]
    inside = df[(df["wallclock"] > busy_cell.start_wallclock + 0.05) &
                (df["wallclock"] < busy_cell.end_wallclock - 0.05)]
    assert len(inside) > 5 and (inside["cell_index"] == busy_cell.index).all()
    run("%perfmonitor_export_perfdata --level system --name sysdf")
    assert "cpu_util_0" in shell.user_ns["sysdf"].columns
    f = tmp_path / "perf.csv"
    out, err, _ = run(f"%perfmonitor_export_perfdata --file {f} --level user")
    assert f.read_text().startswith("time,wallclock,")
    assert f.read_text().splitlines()[0].endswith(",cell_index")
    j = tmp_path / "p.json"
    out, err, _ = run(f"%perfmonitor_export_perfdata --file {j}")
    records = json.loads(j.read_text())  # JSON (NaN as null: strict JSON)
    assert records[0]["time"] > 0 and "cell_index" in records[0]
    assert {r["cell_index"] for r in records} >= {busy_cell.index}
    out, err, _ = run(f"%perfmonitor_export_perfdata --file {tmp_path / 'nosuffix'}")
    assert (tmp_path / "nosuffix.csv").read_text().startswith("time,wallclock,")
    _, err, _ = run(f"%perfmonitor_export_perfdata --file {tmp_path / 'p.xlsx'}")
    assert "unsupported format 'xlsx'" in err
    _, err, _ = run("%perfmonitor_export_perfdata --name 1abc")
    assert "not a Python identifier" in err
    _, err, _ = run("%perfmonitor_export_perfdata --level nope")
    assert "nope" in err
    # %perfmonitor_load_perfdata FILE pushes loaded_perfdata_df
    out, err, _ = run(f"%perfmonitor_load_perfdata {j}")
    assert err == "" and len(shell.user_ns["loaded_perfdata_df"]) == len(records)
    run(f"%perfmonitor_load_perfdata {f}")
    assert "cell_index" in shell.user_ns["loaded_perfdata_df"].columns
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    _, err, _ = run(f"%perfmonitor_load_perfdata {tmp_path / 'bad.csv'}")
    assert "missing the columns time, memory" in err
    _, err, _ = run("%perfmonitor_load_perfdata")
    assert "the following arguments are required: file" in err
    _, err, _ = run(f"%perfmonitor_load_perfdata {tmp_path / 'none.csv'}")
    assert "no such file" in err


JUMPER_CELL_COLUMNS = ["cell_index", "raw_cell", "start_time", "end_time", "duration",
                       "wallclock_start_time", "wallclock_end_time", "cell_magics"]
# JUmPER's columns, then IPython's execution count
CELL_COLUMNS = JUMPER_CELL_COLUMNS + ["execution_count"]


def test_export_cell_history(run, shell, tmp_path):
    run("%perfmonitor_export_cell_history")
    df = shell.user_ns["cell_history_df"]
    assert list(df.columns) == CELL_COLUMNS
    assert list(df["cell_index"]) == list(range(len(df)))  # positions, from 0
    assert list(df["execution_count"]) == [c.execution_count  # (this cell came after)
                                           for c in magics_of(shell).history.cells][:-1]
    row = df[df["raw_cell"].str.contains("busy\\(1.2\\)")].iloc[0]
    assert row["duration"] == pytest.approx(row["end_time"] - row["start_time"])
    assert 1.1 < row["duration"] < 10
    assert ["perfmonitor_start 0.1 --levels process,user,system"] in list(df["cell_magics"])
    f = tmp_path / "cells.csv"
    run(f"%perfmonitor_export_cell_history --file {f}")
    assert f.read_text().startswith(",".join(CELL_COLUMNS))
    j = tmp_path / "cells.json"
    run(f"%perfmonitor_export_cell_history {j}")
    records = json.loads(j.read_text())
    assert records[0]["cell_index"] == 0
    assert records[0]["execution_count"] == magics_of(shell).history.cells[0].execution_count
    run(f"%perfmonitor_export_cell_history --file {tmp_path / 'hist'}")
    assert (tmp_path / "hist.csv").is_file()
    out, err, _ = run(f"%perfmonitor_load_cell_history {j}")
    assert err == "" and list(shell.user_ns["loaded_cell_history_df"].columns) == CELL_COLUMNS
    (tmp_path / "perf.csv").write_text("time,memory\n1,2\n")
    _, err, _ = run(f"%perfmonitor_load_cell_history {tmp_path / 'perf.csv'}")
    assert "missing the columns cell_index, raw_cell" in err


def test_cell_addressing_as_jumper(run, shell):
    """--cell N is the cell_index (position in the history, from 0), as JUmPER's parser."""
    hist = magics_of(shell).history
    assert [c.index for c in hist.cells] == list(range(len(hist)))
    assert hist.select("0")[0].code == "%perfmonitor_help"  # the first cell after %load_ext
    assert [c.index for c in hist.select("2:4")] == [2, 3, 4]
    assert hist.select(":1")[-1].index == 1
    assert hist.select("-1")[0] is hist.cells[-1]


def test_cell_execution_counts(run, shell):
    """IPython's execution count next to JUmPER's cell_index: in the reports and the cell table,
    and --cell In[n] addresses a cell by it (terminal IPython shows In [n] only)."""
    hist = magics_of(shell).history
    c = [c for c in hist.cells if "busy(1.2)" in c.code][0]
    n = c.execution_count
    # %load_ext sonde ran as In [1] and is not in the history: the counts run ahead
    assert n is not None and n > c.index
    assert [x.execution_count for x in hist.cells] == list(
        range(hist.cells[0].execution_count, hist.cells[0].execution_count + len(hist)))
    assert hist.select(f"In[{n}]") == [c]
    assert hist.select(f"in [{n}]") == [c]
    assert hist.select(f"In[{n}]:")[0] is c and hist.select(f":In[{n}]")[-1] is c
    assert hist.select(f"{c.index}:In[{n}]") == [c]
    assert hist.select(f"In[{n - 1}]:In[{n}]") == hist.select(f"{c.index - 1}:{c.index}")
    label = f"cell [{c.index}] (In [{n}])"
    # HTML for a notebook and the text report for a front end without HTML, one display
    _, err, outputs = run(f"%perfmonitor_perfreport --cell In[{n}]")
    assert err == "" and label in html_of(outputs)
    plain = "".join(data_of(o).get("text/plain", "") for o in outputs)
    assert plain.startswith(f"sonde report: {label}, process level") and "CPU" in plain
    assert "IPython.core.display.HTML" not in plain
    out, err, _ = run(f"%perfmonitor_perfreport --cell In [{n}] --text")  # IPython's spelling
    assert err == "" and out.startswith(f"sonde report: {label}, process level"), err
    out, err, _ = run(f"%perfmonitor_perfreport --cell {c.index}:{c.index + 1} --text")
    assert out.startswith(f"sonde report: cells [{c.index}]..[{c.index + 1}] "
                          f"(In [{n}]..In [{n + 1}]), process level"), out
    # the cell table: both numbers
    _, err, outputs = run("%show_cell_history")
    assert err == "" and "execution_count" in html_of(outputs)
    first = hist.cells[0].execution_count
    for bad, message in ((f"In[{first - 1}]", f"no recorded cell ran as In [{first - 1}]"),
                         ("In[99999]:", "In[99999] is beyond the last cell"),
                         (":In[0]", "In[0] is before the first recorded cell"),
                         ("In[x]", "is not a cell index or range")):
        _, err, _ = run(f"%perfmonitor_perfreport --cell {bad}")
        assert err.startswith("sonde: error:") and message in err, (bad, err)
    # the message when a cell_index is beyond the last: both numberings
    _, err, _ = run("%perfmonitor_perfreport --cell 9999")
    assert f"execution counts In [{first}]..In [" in err and "--cell In[n]" in err, err


def test_write_script(run, shell, tmp_path):
    script = tmp_path / "rec.py"
    out, err, _ = run(f"%start_write_script {script}")
    assert err == "" and "recording" in out
    out, err, _ = run("import time\nrecorded = sum(range(10**5))\ntime.sleep(0.3)\n"
                      "print('recorded', recorded)")
    assert "Cell execution skipped during script recording" in out
    assert "recorded" not in shell.user_ns  # not run while recording
    run("%perfmonitor_perfreport --text")
    out, err, _ = run("%end_write_script")
    assert err == "" and "2 cells written" in out, err
    text = script.read_text()
    assert "magic_adapter.perfmonitor_perfreport('--text')" in text
    assert "magic_adapter.perfmonitor_start('0.1')" in text
    _, err, _ = run("%end_write_script")
    assert "no script is being recorded" in err
    # the script replays the cells on sonde's engine and exports the data next to it
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(
        os.path.abspath(report.__file__))))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "recorded 4999950000" in proc.stdout and "sonde report: cell" in proc.stdout
    perf = (tmp_path / "rec_perfdata.csv").read_text().splitlines()
    assert perf[0].startswith("time,wallclock,") and len(perf) > 1
    cells = (tmp_path / "rec_cell_history.csv").read_text().splitlines()
    assert cells[0].startswith("cell_index,raw_cell")


def test_service_monitored(tmp_path):
    from sonde.service import build_perfmonitor_service

    service = build_perfmonitor_service(display_disabled=True)
    from sonde import UsageError

    with pytest.raises(UsageError, match="no monitor is running"):
        service.stop_monitoring()
    service.start_monitoring(0.05, levels="process")
    with service.monitored():
        busy(0.5)
    with service.monitored():
        pass
    hist = service.export_cell_history()["cell_history_df"]
    assert list(hist["cell_index"]) == [0, 1]
    assert hist["raw_cell"][0] == "# <Code unavailable on monitored context>"
    assert hist["cell_magics"][0] == ["<Magics unavailable on monitored context>"]
    df = service.export_perfdata()["perfdata_df"]
    assert (df["cell_index"] == 0).sum() >= 5
    service.close()


def test_stop_then_reports_and_session(run, shell, tmp_path):
    out, err, _ = run("%perfmonitor_stop")
    assert "stopped" in out
    _, err, _ = run("%perfmonitor_stop")
    assert "no monitor is running" in err
    n = cell_count(shell, "busy(1.2)")
    before = magics_of(shell).summary(magics_of(shell).history.select(str(n)))
    _, err, outputs = run(f"%perfmonitor_perfreport --cell {n}")
    assert err == "" and "sonde-report-table" in html_of(outputs)
    _, err, outputs = run("%perfmonitor_plot --level process")
    assert err == ""
    d = tmp_path / "sess"
    out, err, _ = run(f"%export_session {d}")
    assert err == "", err
    names = set(os.listdir(d))
    assert {"manifest.json", "perf_process.csv", "perf_user.csv", "perf_system.csv",
            "cell_history.csv"} <= names
    man = json.loads((d / "manifest.json").read_text())
    assert man["levels"] == ["process", "user", "system"]
    # the execution counts of the cells before the export cell (cell_history.csv as before)
    counts = [c.execution_count for c in magics_of(shell).history.cells][:-1]
    assert man["cell_execution_counts"] == counts and None not in counts
    assert man["files"]["process"] == "perf_process.csv"
    assert (d / "cell_history.csv").read_text().startswith("index,start_wallclock,end_wallclock,code")
    _, err, _ = run(f"%export_session {d}")
    assert "already holds a session" in err
    z = tmp_path / "sess.zip"
    run(f"%export_session {z}")
    assert "manifest.json" in zipfile.ZipFile(z).namelist()
    # `sonde report` reads both (the binary of this build, which the package found).
    exe = os.environ.get("SONDE_EXECUTABLE")
    assert exe and os.path.isfile(exe)
    for path, html in ((d, d / "report.html"), (z, tmp_path / "report.html")):
        proc = subprocess.run([exe, "report", str(path)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert html.stat().st_size > 10000

    # import: reports, plots and exports from the files
    for path in (d, z):
        out, err, _ = run(f"%import_session {path}")
        assert "imported" in out, err
        assert [c.execution_count for c in magics_of(shell).history.cells][:len(counts)] == counts
        after = magics_of(shell).summary(magics_of(shell).history.select(str(n)))
        for key in ("cpu", "memory"):
            assert report.metric(after, "process", key) == pytest.approx(
                report.metric(before, "process", key), rel=1e-6)
        assert after["tags"] == before["tags"]
        _, err, outputs = run(f"%perfmonitor_perfreport --cell {n} --text")
        assert err == ""
        _, err, outputs = run("%perfmonitor_plot --level system --backend matplotlib")
        assert err == "" and has_png(outputs)
        run("%perfmonitor_export_perfdata --name imported")
        assert len(shell.user_ns["imported"]) > 10


def test_import_bad_inputs(run, tmp_path):
    _, err, _ = run("%import_session")
    assert "the following arguments are required: path" in err
    _, err, _ = run(f"%import_session {tmp_path / 'nothing'}")
    assert "no such file or directory" in err
    (tmp_path / "empty").mkdir()
    _, err, _ = run(f"%import_session {tmp_path / 'empty'}")
    assert "no manifest.json" in err
    (tmp_path / "f.txt").write_text("x")
    _, err, _ = run(f"%import_session {tmp_path / 'f.txt'}")
    assert "expected a session directory or a .zip" in err


class _Kernel:
    def __init__(self, allow_stdin):
        self._allow_stdin = allow_stdin


class _Shell:
    def __init__(self, kernel):
        self.kernel = kernel


def test_widget_frontend(monkeypatch):
    """When %perfmonitor_plot draws the widget: in a kernel whose front end draws widgets."""
    ipywidgets = pytest.importorskip("ipywidgets")
    from sonde import plot

    monkeypatch.delenv(plot.WIDGET_ENV, raising=False)
    assert plot.widget_frontend(_Shell(None)) == (False, "not in a Jupyter kernel")
    W = ipywidgets.Widget
    if hasattr(W, "_version_validated"):  # ipywidgets 6 (Debian 12)
        # nobody validated the version: the request tells (nbclient sends allow_stdin false)
        monkeypatch.setattr(W, "_version_validated", None)
    assert plot.widget_frontend(_Shell(_Kernel(True))) == (True, "")
    ok, why = plot.widget_frontend(_Shell(_Kernel(False)))
    assert not ok and "headless" in why
    if hasattr(W, "_version_validated"):
        # the front end's widget manager validated the version (the classic notebook), or
        # refused it
        monkeypatch.setattr(W, "_version_validated", True)
        assert plot.widget_frontend(_Shell(_Kernel(False))) == (True, "")
        monkeypatch.setattr(W, "_version_validated", False)
        assert not plot.widget_frontend(_Shell(_Kernel(True)))[0]
    monkeypatch.setenv(plot.WIDGET_ENV, "on")
    assert plot.widget_frontend(_Shell(None)) == (True, "")
    monkeypatch.setenv(plot.WIDGET_ENV, "off")
    assert not plot.widget_frontend(_Shell(_Kernel(True)))[0]
