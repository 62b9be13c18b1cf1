"""sonde.Monitor: the C++ engine sampling this process on a native thread."""

import math
import os
import resource
import time

import pytest

import sonde
from conftest import SOURCE_DIR, busy


def wait_rows(m, level, n, timeout=10.0):
    end = time.monotonic() + timeout
    while m.rows(level) < n and time.monotonic() < end:
        time.sleep(0.02)
    return m.rows(level)


def test_rows_columns_and_dataframe():
    m = sonde.Monitor(interval=0.05, levels="process,system")
    assert m.levels == ["process", "system"]
    assert m.pid == os.getpid()
    assert not m.running
    cols = m.columns("process")
    assert "cpu_util_avg" in cols and "memory" in cols
    m.start()
    assert m.running
    assert wait_rows(m, "process", 5) >= 5
    m.stop()
    df = m.samples("process")
    assert list(df.columns) == ["time", "wallclock"] + cols
    assert len(df) >= 5
    assert (df["wallclock"].diff().dropna() > 0).all()
    # memory of this interpreter is measured (GiB), and > 10 MiB
    assert df["memory"].dropna().iloc[-1] > 0.01
    sys_df = m.samples("system")
    assert "cpu_util_0" in sys_df.columns
    assert m.dataframes().keys() == {"process", "system"}


def test_stop_start_keeps_rows():
    m = sonde.Monitor(interval=0.05, levels=["process"])
    m.start()
    wait_rows(m, "process", 3)
    m.stop()
    assert not m.running
    n = m.rows("process")
    time.sleep(0.3)
    assert m.rows("process") == n  # nothing sampled while stopped
    m.start()
    assert wait_rows(m, "process", n + 3) >= n + 3
    m.stop()
    assert len(m.samples("process")) == m.rows("process")
    st = m.stats()
    assert st["ticks"] == m.rows("process")
    assert st["sampling_thread_cpu_s"] >= 0


def test_retarget_while_sampling_keeps_rows_and_follows_the_new_process():
    """retarget() stops the sampling thread, changes the root and starts it again while Python
    reads rows: the path the wrapper kernel takes when a wrapped kernel restarts (and the TSan
    stage's check of it)."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        m = sonde.Monitor(interval=0.05, levels="process")
        m.start()
        wait_rows(m, "process", 3)
        for _ in range(5):  # read while the thread is stopped and started again
            m.retarget(child.pid)
            assert m.running
            m.rows("process")
            m.retarget(os.getpid())
        m.retarget(child.pid)
        assert m.pid == child.pid
        n = m.rows("process")
        assert wait_rows(m, "process", n + 3) >= n + 3
        m.stop()
        df = m.samples("process")
        assert len(df) == m.rows("process")
        assert (df["wallclock"].diff().dropna() > 0).all()
    finally:
        child.kill()
        child.wait()


def test_cpu_of_a_busy_loop_in_this_process():
    """The process level's CPU seconds over a busy loop match what getrusage says this process
    used. The loop runs until it has used 1 CPU-s by its own rusage (the truth comes from the
    workload, not from the wall clock: on a busy machine it takes longer)."""
    def cpu(ru):
        return ru.ru_utime + ru.ru_stime

    m = sonde.Monitor(interval=0.1, levels="process")
    m.start()
    wait_rows(m, "process", 2)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.time()
    while cpu(resource.getrusage(resource.RUSAGE_SELF)) - cpu(ru0) < 1.0 and time.time() - w0 < 30:
        busy(0.05)
    w1 = time.time()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(0.35)
    m.stop()
    df = m.samples("process")
    cpus = m.node_info["num_cpus"]
    # The rows whose intervals cover the loop: each row holds the interval before it.
    first = df.index[df["wallclock"] > w0][0]
    last = df.index[df["wallclock"] > w1][0]
    rows = df.loc[first:last]
    dt = df["time"].diff().loc[first:last]
    measured = float((rows["cpu_util_avg"] / 100 * cpus * dt).sum())
    actual = cpu(ru1) - cpu(ru0)
    assert len(rows) >= 8
    # The rows' edges reach up to one interval beyond the loop on each side, where this process
    # was idle but for the sampler: 10 % and 0.05 CPU-s.
    assert measured == pytest.approx(actual, rel=0.1, abs=0.05)


def test_node_info_and_manifest():
    m = sonde.Monitor(interval=0.5, levels="process,user,system")
    info = m.node_info
    for key in ("num_cpus", "num_system_cpus", "cpu_handles", "memory_limits", "num_gpus"):
        assert key in info
    assert info["num_cpus"] > 0
    man = m.manifest()
    assert man["levels"] == ["process", "user", "system"]
    assert man["interval"] == 0.5
    assert man["columns_by_level"]["process"] == m.columns("process")


@pytest.mark.parametrize("kwargs, message", [
    ({"levels": "process,bogus"}, "unknown level 'bogus'"),
    ({"levels": "process,process"}, "given twice"),
    ({"interval": 0.0005}, "interval"),
    ({"interval": float("inf")}, "interval"),
    ({"interval": float("nan")}, "interval"),
    ({"config": {"collectors": {"cpu": {"no_such_key": 1}}}}, "no_such_key"),
    ({"config": {"intervall": 1}}, "intervall"),
])
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sonde.Monitor(**kwargs)


def test_missing_config_file():
    with pytest.raises(ValueError):
        sonde.Monitor(config="/nonexistent/sonde.yaml")


def test_plugin_collector_from_config(monkeypatch):
    """A process plugin (exec, POSIX sh) configured in YAML gives its columns to the DataFrame."""
    # The ThreadSanitizer build runs this interpreter with libtsan preloaded (python/CMakeLists.txt);
    # the plugin's sh must not inherit it (an uninstrumented sh crashes under it).
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    cfg = os.path.join(SOURCE_DIR, "examples", "plugins", "exec_shell", "sonde.yaml")
    m = sonde.Monitor(interval=0.1, levels="process,system", config=cfg)
    assert "load_0" in m.columns("system")
    m.start()
    wait_rows(m, "system", 4)
    m.stop()
    df = m.samples("system")
    vals = df["load_avg"].dropna()
    assert len(vals) >= 2
    assert all(v >= 0 and math.isfinite(v) for v in vals)


@pytest.mark.parametrize("isolate", [False, True])
def test_native_plugin_in_the_kernel(isolate):
    """A native plugin (C ABI), in this process or isolated in sonde's plugin-host (found through
    $SONDE_EXECUTABLE, which the package sets to the build tree's sonde)."""
    plugin = os.path.join(os.environ["SONDE_TEST_PLUGIN_DIR"], "libtest_plugin_good.so")
    assert os.path.isfile(plugin), "build the test plugins (cmake --build build)"
    entry = {"_target_": "plugin:" + plugin,
             "handler": {"_target_": "ScalarHandler", "column": "test_value"}}
    if isolate:
        entry["isolate"] = True
    m = sonde.Monitor(interval=0.1, levels="process,system",
                      config={"collectors": {"testplug": entry}})
    assert "test_value" in m.columns("process")
    m.start()
    wait_rows(m, "process", 4)
    m.stop()
    vals = m.samples("process")["test_value"].dropna()
    assert len(vals) >= 3 and (vals == 42).all(), m.stats()["collectors"]
    assert not m.warnings()


SIGNAL_SCRIPT = r"""
import signal, sys, time
import sonde

got = []
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, lambda signum, frame: got.append(signum))
m = sonde.Monitor(interval=0.05, levels="process,system")
m.start()
end = time.monotonic() + 20
while m.rows("system") < 3 and time.monotonic() < end:
    time.sleep(0.02)
print("ready", any(c.startswith("gpu") for c in m.columns("system")), flush=True)
while not got and time.monotonic() < end:
    time.sleep(0.01)
m.stop()
print("got", got[0] if got else 0, "rows", m.rows("system"), flush=True)
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_signal_reaches_python_with_a_gpu_collector(signame, tmp_path):
    # The GPU collector runs on the engine's watchdog thread: it and the sampler's thread block
    # the process' signals, so that the interpreter's own handlers (on its main thread) get them.
    import signal
    import subprocess
    import sys

    fake = os.environ.get("SONDE_TEST_FAKE_NVML")
    if not fake:
        pytest.skip("no fake NVML in this build")
    env = dict(os.environ, SONDE_NVML_LIBRARY=fake,
               SONDE_ROCM_SMI_LIBRARY="/nonexistent/librocm_smi64.so",
               SONDE_FAKE_GPU_SCENARIO=os.path.join(os.environ["SONDE_TEST_FAKE_SCENARIOS"],
                                                    "nvidia_workload.json"),
               SONDE_PLUGIN_PATH="", XDG_CONFIG_HOME=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", SIGNAL_SCRIPT], env=env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = p.stdout.readline().split()
        assert ready[:1] == ["ready"], p.stderr.read()
        assert ready[1] == "True", "no GPU column: the watchdog's thread is not exercised"
        sig = getattr(signal, signame)
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    words = out.split()
    assert words[:2] == ["got", str(int(sig))], out + err
    assert int(words[3]) >= 3
