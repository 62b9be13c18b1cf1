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
