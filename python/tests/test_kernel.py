"""The sonde wrapper kernel (python/sonde/kernel.py, wrapper.py, wrapped.py) in notebooks executed
by `jupyter nbconvert --to notebook --execute`: installed with `python3 -m sonde.kernel install
--prefix`, wrapping IRkernel (Debian's r-cran-irkernel, kernelspec `ir`) and Debian's python3
kernel. The per-cell reports are checked against what the wrapped process says of itself in the
same cell: its CPU time (R's proc.time(), Python's time.process_time()) and its Pss
(/proc/self/smaps_rollup), never against the machine's speed.

Outside CI (no CI variable) the R notebook is skipped when R or IRkernel is not installed; in CI
(scripts/install-deps --tests installs r-cran-irkernel) it fails instead."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import nbformat
import pytest

INTERVAL = 0.25
BURN_S = 3.0
HOLD_MB = 200
# Nbclient's timeout per cell (timeout_func): the busy cell tagged `interrupt` is interrupted
# after INTERRUPT_AFTER s (interrupt_on_timeout), the others may take 120 s.
CONFIG = """
c.ExecutePreprocessor.kernel_name = "sonde"
c.ExecutePreprocessor.interrupt_on_timeout = True
c.ExecutePreprocessor.timeout_func = (
    lambda cell: 4 if "interrupt" in cell.metadata.get("tags", []) else 120)
"""


def code_cell(src, *tags):
    cell = nbformat.v4.new_code_cell(textwrap.dedent(src).strip())
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def run_notebook(tmp_path, cells, name):
    """Installs the wrapper kernel into a prefix of tmp_path, executes the notebook with
    nbconvert (the kernel inherits PYTHONPATH: the build tree's package); returns the executed
    cells by execution count, the notebook's directory and nbconvert's stderr."""
    prefix = tmp_path / "prefix"
    inst = subprocess.run([sys.executable, "-m", "sonde.kernel", "install", "--prefix",
                           str(prefix)], capture_output=True, text=True, timeout=60)
    assert inst.returncode == 0, inst.stderr
    assert "installed the kernelspec sonde" in inst.stdout, inst.stdout
    spec = json.loads((prefix / "share/jupyter/kernels/sonde/kernel.json").read_text())
    assert spec["display_name"] == "sonde (wrapper)" and spec["interrupt_mode"] == "message"
    env = dict(os.environ)
    env.update({"JUPYTER_PATH": str(prefix / "share/jupyter"),
                "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                "JUPYTER_DATA_DIR": str(tmp_path / "data"),
                "JUPYTER_CONFIG_DIR": str(tmp_path / "jconfig"),
                "IPYTHONDIR": str(tmp_path / "ipy"), "MPLBACKEND": "Agg"})
    work = tmp_path / "work"
    work.mkdir()
    (work / "config.py").write_text(CONFIG)
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nbformat.write(nb, str(work / f"{name}.ipynb"))
    jupyter = shutil.which("jupyter")
    assert jupyter, "jupyter (jupyter-core, with jupyter-nbconvert: scripts/install-deps --tests)"
    proc = subprocess.run(
        [jupyter, "nbconvert", "--to", "notebook", "--execute", "--config", "config.py",
         "--output", f"{name}-executed.ipynb", f"{name}.ipynb"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = nbformat.read(str(work / f"{name}-executed.ipynb"), as_version=4)
    return [c for c in out.cells if c.cell_type == "code"], work, proc.stderr


def text_of(cell):
    parts = []
    for o in cell.get("outputs", []):
        if o["output_type"] == "stream":
            parts.append(o["text"])
        elif o["output_type"] in ("display_data", "execute_result"):
            parts.append(o.get("data", {}).get("text/plain", ""))
        elif o["output_type"] == "error":
            parts.append(f"ERROR {o['ename']}: {o['evalue']}")
    return "".join(parts)


def number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in:\n{text}"
    return float(m.group(1))


def report_figures(text):
    """CPU time (s) and the peak of Memory (GiB) of a text report."""
    assert "sonde report: cell" in text, text
    cpu = number(r"CPU time ([0-9.]+) s", text)
    mem = number(r"Memory \(GiB\)\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)", text)
    return cpu, mem


def check_cpu(report_cpu, own_cpu, least=0.5 * BURN_S):
    """The cell's window holds the samples taken in it: the interval that ends after the cell
    is not in it, so the report may miss up to one interval of the cell's CPU time."""
    assert own_cpu > least, own_cpu  # the cell did burn (one core, or what it got)
    assert abs(report_cpu - own_cpu) <= 0.10 * own_cpu + INTERVAL, (report_cpu, own_cpu)


def check_memory(report_gib, own_pss_kb):
    own = own_pss_kb / 2**20
    assert own > HOLD_MB / 1024, own  # the cell holds its 200 MB
    assert abs(report_gib - own) <= 0.10 * own + 0.01, (report_gib, own)


def ir_available():
    if shutil.which("R") is None:
        return "R is not installed (Debian: r-cran-irkernel)"
    from jupyter_client.kernelspec import KernelSpecManager

    if "ir" not in KernelSpecManager().find_kernel_specs():
        return "IRkernel's kernelspec 'ir' is not installed (Debian: r-cran-irkernel)"
    return None


@pytest.fixture
def need_ir():
    why = ir_available()
    if why and not os.environ.get("CI"):
        pytest.skip(why + "; scripts/install-deps --tests installs it")
    assert why is None, why + " (CI: scripts/install-deps --tests installs it)"


R_BURN = f"""
t0 <- proc.time(); s <- 0
while ((proc.time() - t0)[["elapsed"]] < {BURN_S}) s <- s + 1
d <- proc.time() - t0
cat(sprintf("R_CPU %.3f R_PID %d\\n", d[["user.self"]] + d[["sys.self"]], Sys.getpid()))
"""
R_HOLD = f"""
x <- runif({HOLD_MB * 2**20 // 8})
Sys.sleep(1)
st <- readLines("/proc/self/smaps_rollup")
cat(sprintf("R_PSS_KB %s\\n", gsub("[^0-9]", "", st[startsWith(st, "Pss:")])))
"""

WORKER_S = 1.5
R_WORKERS = f"""
t0 <- proc.time()
r <- parallel::mclapply(1:2, function(i) {{
  t <- proc.time(); s <- 0
  while ((proc.time() - t)[["elapsed"]] < {WORKER_S}) s <- s + 1
  s
}}, mc.cores = 2)
d <- proc.time() - t0
cat(sprintf("R_CPU_SELF %.3f R_CPU_CHILD %.3f\\n", d[["user.self"]] + d[["sys.self"]],
            d[["user.child"]] + d[["sys.child"]]))
"""


def test_wrapped_irkernel(tmp_path, need_ir):
    # A kernelspec in a directory of its own: %list_kernels PATH finds it, %wrap_kernel uses it.
    extra = tmp_path / "extra-kernels"
    (extra / "r-extra").mkdir(parents=True)
    from jupyter_client.kernelspec import KernelSpecManager

    ir = KernelSpecManager().get_kernel_spec("ir")
    # R crashes with libtsan preloaded, which the ThreadSanitizer stage preloads into every
    # process of the Python tests (python/CMakeLists.txt): not into R (it is not sonde's code).
    (extra / "r-extra" / "kernel.json").write_text(json.dumps({
        "argv": ir.argv, "display_name": "R (extra path)", "language": "R",
        "env": {"LD_PRELOAD": ""}}))
    cells, work, _ = run_notebook(tmp_path, [
        code_cell(f"%list_kernels {extra}"),                          # 1
        code_cell("%wrap_kernel r-extra"),                             # 2
        code_cell(f"%perfmonitor_start {INTERVAL}"),                   # 3
        code_cell("%perfmonitor_enable_perfreports --text"),           # 4
        code_cell(R_BURN),                                             # 5
        code_cell(R_HOLD),                                             # 6
        code_cell("s <- 0; while (TRUE) s <- s + 1", "interrupt", "raises-exception"),  # 7
        code_cell('cat(sprintf("R_ALIVE %d %s\\n", Sys.getpid(), exists("x")))'),  # 8
        # (the pause: IRkernel sends the line before it is killed)
        code_cell('cat("R_PID_BEFORE", Sys.getpid(), "\\n"); Sys.sleep(0.5)\n'
                  'tools::pskill(Sys.getpid(), tools::SIGKILL)\nSys.sleep(30)',
                  "raises-exception"),                                 # 9
        code_cell('cat(sprintf("R_PID_AFTER %d\\n", Sys.getpid()))'),  # 10
        code_cell("%perfmonitor_perfreport --cell In[5] --text"),      # 11
        code_cell("%cell_history"),                                    # 12
        code_cell("%wrap_kernel no-such-kernel"),                      # 13
        code_cell("%perfmonitor_export_perfdata --file perf.csv"),     # 14
        code_cell(R_WORKERS),                                          # 15
    ], "r")
    text = [text_of(c) for c in cells]
    # %list_kernels: JUmPER's lines, the added path and the kernel found there.
    assert text[0].startswith("Available Jupyter Kernels:\n" + "-" * 50), text[0]
    assert "  r-extra: R (extra path) (R)\n" in text[0], text[0]
    assert f"Added kernel search paths:\n  {extra}\n" in text[0], text[0]
    assert "Successfully wrapped kernel: r-extra" in text[1], text[1]
    r_pid = int(number(r"pid (\d+), R\)", text[1]))
    assert f"monitoring pid {r_pid} " in text[2], text[2]

    # The burning cell: R's own CPU time, and the report printed after R's output in the cell.
    own_cpu = number(r"R_CPU ([0-9.]+)", text[4])
    assert f"R_PID {r_pid}" in text[4]
    cpu, _ = report_figures(text[4].split("R_CPU")[1])
    check_cpu(cpu, own_cpu)
    # The 200 MB cell: R's own Pss against the report's peak.
    _, mem = report_figures(text[5])
    check_memory(mem, number(r"R_PSS_KB (\d+)", text[5]))

    # The interrupt: one line, the same R process goes on with its data.
    assert "sonde: interrupt passed to the wrapped kernel 'r-extra'" in text[6], text[6]
    assert f"R_ALIVE {r_pid} TRUE" in text[7], text[7]

    # Killed mid-cell: one line; the next cell starts R again and the monitor follows it.
    assert f"R_PID_BEFORE {r_pid}" in text[8]
    assert (f"sonde: the wrapped kernel 'r-extra' (pid {r_pid}) died (killed by signal 9 "
            "(SIGKILL)); the monitor's data is kept") in text[8], text[8]
    new_pid = int(number(r"R_PID_AFTER (\d+)", text[9]))
    assert new_pid != r_pid
    assert (f"started the wrapped kernel 'r-extra' again (pid {new_pid}, was {r_pid}); the "
            "monitor follows it, its data is kept") in text[9], text[9]
    # The data from before the death: the burning cell's report, still R's CPU time (not
    # compared with the report after the cell: that one may lack a tick still being taken).
    assert "sonde report: cell [4] (In [5])" in text[10], text[10]
    check_cpu(report_figures(text[10])[0], own_cpu)
    hist = text[11]
    for n in range(1, 11):  # every cell so far, by its In [n], magic cells too
        assert re.search(rf"^\s*{n - 1}\s+{n}\s", hist, re.M), hist
    assert "Kernel 'no-such-kernel' not found" in text[12], text[12]
    # The rows of the new R process follow the old ones in the same data.
    import pandas as pd

    df = pd.read_csv(work / "perf.csv")
    assert df["time"].is_monotonic_increasing and len(df) > (BURN_S + 1) / INTERVAL
    # Two forked workers (parallel::mclapply) of the R started again: the process tree's CPU
    # time against R's own figure for itself and its waited-for children.
    own = number(r"R_CPU_SELF ([0-9.]+)", text[14]) + number(r"R_CPU_CHILD ([0-9.]+)", text[14])
    check_cpu(report_figures(text[14].split("R_CPU_SELF")[1])[0], own, least=WORKER_S * 0.5)


PY_BURN = f"""
import os, time
t0, w = time.process_time(), time.monotonic()
while time.monotonic() - w < {BURN_S}:
    pass
print(f"PY_CPU {{time.process_time() - t0:.3f}} PY_PID {{os.getpid()}}")
"""
PY_HOLD = f"""
x = b"\\x01" * ({HOLD_MB} << 20)
time.sleep(1)
pss = [ln for ln in open("/proc/self/smaps_rollup") if ln.startswith("Pss:")][0]
print("PY_PSS_KB", pss.split()[1])
"""


def test_wrapped_python3(tmp_path):
    cells, _, _ = run_notebook(tmp_path, [
        code_cell("%wrap_kernel python3"),                         # 1
        code_cell(f"%perfmonitor_start {INTERVAL}"),               # 2
        code_cell("%perfmonitor_enable_perfreports --text"),       # 3
        code_cell(PY_BURN),                                        # 4
        code_cell(PY_HOLD),                                        # 5
        code_cell("import sys; sys.version_info[0] * 10"),         # 6
    ], "py")
    text = [text_of(c) for c in cells]
    assert "Successfully wrapped kernel: python3" in text[0], text[0]
    py_pid = int(number(r"pid (\d+), python\)", text[0]))
    assert py_pid != os.getpid()
    assert f"monitoring pid {py_pid} " in text[1], text[1]
    assert f"PY_PID {py_pid}" in text[3]
    cpu, _ = report_figures(text[3].split("PY_CPU")[1])
    check_cpu(cpu, number(r"PY_CPU ([0-9.]+)", text[3]))
    _, mem = report_figures(text[4])
    check_memory(mem, number(r"PY_PSS_KB (\d+)", text[4]))
    # The wrapped kernel's result, with the wrapper's execution count.
    res = [o for o in cells[5].outputs if o["output_type"] == "execute_result"]
    assert res and res[0]["data"]["text/plain"] == "30" and res[0]["execution_count"] == 6


def gone(pid, wait_s=5.0):
    """Whether `pid` has ended (a zombie counts as ended) within wait_s."""
    import time

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_restart_and_relay(tmp_path, monkeypatch):
    """The front end's restart (shutdown_request restart=True, the same connection file): the
    session is saved, the next wrapper wraps the same kernel and says where the data is; the
    data reads back. Also %wrap_kernel --save: a kernelspec that wraps python3 when it starts;
    input requests, comms, completion and inspection relayed (jupyter_client as the front
    end)."""
    from jupyter_client import KernelManager

    prefix = tmp_path / "prefix"
    subprocess.run([sys.executable, "-m", "sonde.kernel", "install", "--prefix", str(prefix)],
                   check=True, capture_output=True, timeout=60)
    for k, v in {"JUPYTER_PATH": str(prefix / "share/jupyter"),
                 "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
                 "JUPYTER_DATA_DIR": str(tmp_path / "data"),
                 "IPYTHONDIR": str(tmp_path / "ipy")}.items():
        monkeypatch.setenv(k, v)
    km = KernelManager(kernel_name="sonde")
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)

        def run(code):
            out = []
            reply = kc.execute_interactive(
                code, timeout=60,
                output_hook=lambda m: out.append(m["content"].get("text", "")))
            assert reply["content"]["status"] == "ok", (code, out)
            return "".join(out)

        out = []
        reply = kc.execute_interactive("print(1)", timeout=60, output_hook=lambda m: out.append(
            m["content"].get("text", "")))
        assert reply["content"]["status"] == "error", out
        assert "".join(out) == ("sonde: no kernel is wrapped: %wrap_kernel NAME first "
                                "(%list_kernels lists them); this cell was not run\n"), out
        text = run("%perfmonitor_help")
        assert "%wrap_kernel NAME [--save NEW]" in text and "%perfmonitor_start" in text, text
        assert "Created permanent kernel 'py-sonde'" in run("%wrap_kernel python3 --save py-sonde")
        saved = json.loads((tmp_path / "data/kernels/py-sonde/kernel.json").read_text())
        assert "--SondeKernel.auto_wrap_kernel=python3" in saved["argv"]
        run(f"%perfmonitor_start {INTERVAL}")
        pid_before = int(run("import os, time; time.sleep(0.8); print(os.getpid())"))
        km.restart_kernel()
        kc.wait_for_ready(timeout=60)
        text = run("import os; print('PID', os.getpid())")
        m = re.search(r"sonde: the kernel restarted; 'python3' is wrapped again; the monitor's "
                      r"data of the session before \(4 cells\) is kept in (\S+) ", text)
        assert m, text
        assert int(number(r"PID (\d+)", text)) != pid_before
        assert gone(pid_before), "the wrapped kernel outlived its wrapper's restart"
        assert "4 cells" in run(f"%import_session {m.group(1)}")
        report = run("%perfmonitor_perfreport --cell 3 --text")
        assert "sonde report: cell [3] (In [5])" in report and "samples" in report, report

        # An input request reaches the front end, its reply the wrapped kernel.
        out = []
        reply = kc.execute_interactive(
            "name = input('who? '); print('got', name)", timeout=60, allow_stdin=True,
            stdin_hook=lambda m: kc.input("sonde" if m["content"]["prompt"] == "who? " else ""),
            output_hook=lambda m: out.append(m["content"].get("text", "")))
        assert reply["content"]["status"] == "ok" and "got sonde\n" in "".join(out), out
        # A comm the front end opens: to the wrapped kernel and back, also between requests.
        run("def _echo(comm, msg):\n"
            "    comm.on_msg(lambda m: comm.send({'echo': m['content']['data']}))\n"
            "get_ipython().kernel.comm_manager.register_target('sonde-echo', _echo)")
        kc.shell_channel.send(kc.session.msg("comm_open", {
            "comm_id": "c1", "target_name": "sonde-echo", "data": {}}))
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": "c1", "data": {"x": 1}}))
        echo = None
        while echo is None:
            m = kc.get_iopub_msg(timeout=20)
            if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == "c1":
                echo = m["content"]["data"]
        assert echo == {"echo": {"x": 1}}
        info = kc.comm_info(target_name="sonde-echo", reply=True, timeout=20)["content"]
        assert info["comms"] == {"c1": {"target_name": "sonde-echo"}}, info
        # Completion and inspection from the wrapped kernel, %magics from the wrapper.
        assert "name" in kc.complete("nam", 3, reply=True, timeout=20)["content"]["matches"]
        assert "%perfmonitor_start" in kc.complete("%perfmonitor_st", 15, reply=True,
                                                   timeout=20)["content"]["matches"]
        assert kc.inspect("name", 4, reply=True, timeout=20)["content"]["found"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
