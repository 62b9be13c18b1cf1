"""export_session never writes through a link someone planted (issue 12)."""

import os

import pandas as pd
import pytest

from sonde.session import CellHistory, UsageError, export_session


class FakeData:
    levels = ["process"]

    def frame(self, level):
        return pd.DataFrame({"time": [0.0, 1.0], "wallclock": [100.0, 101.0], "memory": [1.5, 2.0]})

    def manifest(self):
        return {"levels": ["process"], "interval": 1.0}


def test_export_refuses_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    d = tmp_path / "sess"
    d.mkdir()
    os.symlink(victim, d / "perf_process.csv")
    with pytest.raises(FileExistsError):
        export_session(FakeData(), CellHistory(), d)
    assert victim.read_text() == "precious\n"


def test_export_zip_replaces_a_link_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    z = tmp_path / "sess.zip"
    os.symlink(victim, z)
    export_session(FakeData(), CellHistory(), z)
    assert victim.read_text() == "precious\n"
    assert not z.is_symlink() and z.stat().st_size > 100


def test_export_refuses_a_linked_directory(tmp_path):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    with pytest.raises(UsageError):
        export_session(FakeData(), CellHistory(), tmp_path / "link")
    assert os.listdir(tmp_path / "real") == []


def test_cell_history_execution_counts(tmp_path):
    """cell_history.csv keeps its four columns (every sonde reads it); the execution counts are
    the manifest's cell_execution_counts. A session exported before either: its `index` held the
    execution counts when they were not the positions."""
    p = tmp_path / "cell_history.csv"
    p.write_text("index,start_wallclock,end_wallclock,code\n0,1.0,2.0,a\n1,2.0,3.0,b\n")
    h = CellHistory.read_csv(str(p), [5, None])
    assert [c.index for c in h.cells] == [0, 1]
    assert [c.execution_count for c in h.cells] == [5, None]
    assert [c.execution_count for c in CellHistory.read_csv(str(p)).cells] == [None, None]
    p.write_text("index,start_wallclock,end_wallclock,code\n3,1.0,2.0,a\n4,2.0,3.0,b\n")
    h = CellHistory.read_csv(str(p))
    assert [(c.index, c.execution_count) for c in h.cells] == [(0, 3), (1, 4)]
    assert h.select("In[4]")[0].code == "b" and h.select("1")[0].code == "b"
