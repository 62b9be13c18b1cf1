"""A stored multi-node run in Python: import_session reads the aggregate and every node, and the
reports and plots take --node (JUmPER's `<Aggregated>` or a node's name).

The run is tests/fixtures/make_multinode_run.py's output: three nodes of 2 CPUs, n1 burns both
CPUs, n2 holds 0.5 GiB, n3 idles (lost after 6 ticks with --lose n3)."""

import os
import subprocess
import sys

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher
from IPython.core.interactiveshell import InteractiveShell

from sonde import report
from sonde.session import CellHistory, import_session, is_aggregate

from conftest import SOURCE_DIR

MAKE = os.path.join(SOURCE_DIR, "tests", "fixtures", "make_multinode_run.py")


def make_run(tmp_path, *args):
    out = tmp_path / "run"
    subprocess.run([sys.executable, MAKE, str(out), *args], check=True)
    return out


def test_import_reads_every_node(tmp_path):
    data, history = import_session(make_run(tmp_path, "--lose", "n3"))
    assert data.nodes == ["n1", "n2", "n3"]
    assert data.levels == ["slurm", "system"]
    agg = data.frame("slurm")
    assert list(agg["nodes"]) == [3] * 6 + [2] * 4
    n2 = data.node("n2")
    assert n2.node_name == "n2" and n2.nodes == []
    f = n2.frame("slurm")
    assert "cpu_util_1" in f.columns  # per-device columns: per node only
    assert f["memory"].max() == pytest.approx(0.5)
    # The node's wallclock moved onto the head's clock (the node is 1.2 ms ahead).
    assert f["wallclock"].iloc[0] == pytest.approx(1700000001.0)
    assert f["time"].iloc[0] == 8001  # its own monotonic clock, as stored
    assert len(data.node("n3").frame("slurm")) == 6
    assert n2.manifest()["node"]["status"] == "complete"
    assert data.node("n3").manifest()["node"]["status"] == "lost"


def test_aggregate_names():
    for name in (None, "<Aggregated>", "aggregate", "Aggregate", "all"):
        assert is_aggregate(name)
    for name in ("n1", "<n1>"):
        assert not is_aggregate(name)


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
        shell.display_pub.outputs.clear()
        result = shell.run_cell(code, store_history=True)
        out, err = capsys.readouterr()
        assert result.error_in_exec is None, f"{code!r} raised {result.error_in_exec!r}"
        assert "Traceback" not in out + err
        return out, err, list(shell.display_pub.outputs)

    return _run


def magics_of(shell):
    return shell.magics_manager.registry["SondeMagics"]


def report_of(run, shell, line):
    """A report (or plot) of the whole run: the cells this test ran (shorter than the interval) are
    forgotten first, as in a fresh notebook that imported the run."""
    magics_of(shell).history = CellHistory()
    return run(line)


def test_reports_and_plots_per_node(run, shell, tmp_path):
    path = make_run(tmp_path)
    out, err, _ = run(f"%import_session {path}")
    assert "imported" in out, err
    m = magics_of(shell)

    # The aggregate: all 6 CPUs, the per-node table and the imbalance tag.
    agg = m.summary([], m._node_data("<Aggregated>"))
    assert agg["levels"]["slurm"]["num_cpus"] == 6
    assert [n["name"] for n in agg["nodes"]] == ["n1", "n2", "n3"]
    assert "node-imbalance" in agg["tags"]
    out, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node '<Aggregated>' --text")
    assert err == "" and "slurm level" in out

    # One node: its own figures.
    n1 = m.summary([], m._node_data("n1"))
    assert n1["levels"]["slurm"]["num_cpus"] == 2
    assert report.metric(n1, "slurm", "cpu") == pytest.approx(97.5, abs=0.5)
    n2 = m.summary([], m._node_data("n2"))
    assert report.metric(n2, "slurm", "memory", "max") == pytest.approx(0.5)
    out, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node n2 --text")
    assert err == "", err
    assert "node n2" in out
    out, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node n2 --level system --text")
    assert err == "" and "system level, node n2" in out

    jpeg = tmp_path / "n1.jpeg"
    out, err, outputs = report_of(run, shell, f"%perfmonitor_plot --node n1 --backend matplotlib "
                            f"--save-jpeg {jpeg}")
    assert err == "", err
    assert jpeg.stat().st_size > 1000
    pkl = tmp_path / "n3.pkl"
    report_of(run, shell, f"%perfmonitor_plot --node n3 --level system --pickle {pkl} --backend matplotlib")
    import pickle

    with open(pkl, "rb") as f:
        saved = pickle.load(f)
    assert saved["node"] == "n3" and saved["level"] == "system"
    assert saved["frame"]["cpu_util_avg"].max() < 5

    # Bad input: one line naming the nodes.
    _, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node n9 --text")
    assert "'n9' is not a node of this run (nodes: n1, n2, n3" in err
    _, err, _ = report_of(run, shell, "%perfmonitor_plot --node n9")
    assert "'n9' is not a node" in err


def test_node_on_a_single_node_session(run, shell, tmp_path):
    path = os.path.join(SOURCE_DIR, "tests", "fixtures", "run_basic")
    out, err, _ = run(f"%import_session {path}")
    assert "imported" in out, err
    _, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node n2 --text")
    assert "not a multi-node run" in err
    out, err, _ = report_of(run, shell, "%perfmonitor_perfreport --node aggregate --text")
    assert err == ""
