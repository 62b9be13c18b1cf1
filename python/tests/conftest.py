"""Shared set-up for the sonde Python tests (run by ctest with PYTHONPATH at the build tree)."""

import os
import tempfile

import pytest

# The engine reads ./sonde.yaml and $XDG_CONFIG_HOME/sonde/config.yaml: keep the user's out.
_HOME = tempfile.mkdtemp(prefix="sonde-pytest-")
os.environ["XDG_CONFIG_HOME"] = os.path.join(_HOME, "config")
os.environ.pop("SONDE_PLUGIN_PATH", None)
os.environ.pop("SONDE_PROC_ROOT", None)
os.environ.pop("SONDE_SYS_ROOT", None)
os.environ.setdefault("MPLBACKEND", "Agg")

SOURCE_DIR = os.environ.get(
    "SONDE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    yield


def busy(seconds):
    """Burns CPU in this process for `seconds` of wall time."""
    import time

    t = time.monotonic()
    x = 0
    while time.monotonic() - t < seconds:
        x += 1
    return x
