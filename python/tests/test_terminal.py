"""The magics in terminal IPython (`python3 -m IPython`, no kernel, no HTML front end), fed a
script on stdin: reports are text, not `<IPython.core.display.HTML object>`; cells carry both
numbers (JUmPER's cell_index and IPython's In [n]) and --cell takes either; the plot widget has
no front end and falls back to a static plot."""

import os
import subprocess
import sys

# One line per cell. In [1] loads the extension and starts the monitor in the same cell (so it is
# not in the history): the CPU cell In [2] is cell_index 0.
SCRIPT = """\
get_ipython().run_line_magic('load_ext', 'sonde'); get_ipython().run_line_magic('perfmonitor_start', '0.1 --levels process')
import time; t0 = time.monotonic(); n = sum(1 for _ in iter(lambda: time.monotonic() - t0 < 1.0, False))
%perfmonitor_perfreport --cell 1
%perfmonitor_perfreport --cell In[2]
%perfmonitor_perfreport --cell In [2] --text
%perfmonitor_perfreport
%show_cell_history
%perfmonitor_plot
%perfmonitor_stop
exit
"""


def test_terminal_ipython(tmp_path):
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-m", "IPython", "--no-banner", "--colors=NoColor",
         "--TerminalInteractiveShell.term_title=False"],
        input=SCRIPT, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err, out + err
    assert "IPython.core.display" not in out, out
    # In [3]: cell_index 1 is not there yet; the message gives both numberings
    lines = err.splitlines()
    assert any(ln.startswith("sonde: error: --cell: '1' is beyond the last cell (cell indices "
                             "0..0; execution counts In [2]..In [2]; --cell In[n] takes an "
                             "execution count)") for ln in lines), err
    # In [4], In [5] (IPython's spelling), In [6] (the default: the last long cell): text reports
    # of the CPU cell with both numbers; In [4] and In [6] are the HTML report's text form.
    title = "sonde report: cell [0] (In [2]), process level"
    assert out.count(title) == 3, out
    assert out.count("CPU utilisation (%)") == 3 and out.count("tags: ") == 3, out
    # In [7]: the cell table with both numbers, every column shown
    table = out[out.index("In [7]:"):out.index("In [8]:")]
    assert "cell_index" in table and "execution_count" in table, table
    rows = [ln.split() for ln in table.splitlines()[1:] if ln.strip()]
    assert rows[0][:2] == ["0", "2"] and "import" in rows[0], table
    assert rows[1][:2] == ["1", "3"] and "--cell" in rows[1], table
    # In [8]: no widget front end: the static plot (its text here), not a widget
    plot = out[out.index("In [8]:"):out.index("In [9]:")]
    assert "<sonde plot: process level>" in plot and "Widget" not in out + err, plot
    assert "monitor stopped" in out
