"""sonde for Python and Jupyter: sonde's C++ engine as a Monitor with pandas DataFrames, and
IPython magics with the names JUmPER users know (`%load_ext sonde`, `%perfmonitor_start`, ...).

    import sonde
    m = sonde.Monitor(interval=0.1, levels="process,system").start()
    ...
    m.stop(); m.samples("process")        # a pandas DataFrame

R, Julia or any other kernel: the wrapper kernel, `python3 -m sonde.kernel install` (sonde.kernel).
See docs/jupyter.md.
"""

import os as _os
import shutil as _shutil


def _locate_sonde():
    """The engine finds its plugin directory (<prefix>/lib/sonde/plugins), the plugin-host of
    isolated native plugins and the Python bridge from the running executable, which in a kernel
    is python3: point it at the sonde installation this package belongs to."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    if not _os.environ.get("SONDE_EXECUTABLE"):
        candidates = [
            _os.path.join(here, "..", "..", "..", "..", "bin", "sonde"),  # <prefix>/lib/pythonX/..
            _os.path.join(here, "..", "..", "sonde"),  # the build tree: build/python/sonde
            _shutil.which("sonde") or "",
        ]
        for c in candidates:
            if c and _os.path.isfile(c) and _os.access(c, _os.X_OK):
                _os.environ["SONDE_EXECUTABLE"] = _os.path.realpath(c)
                break
    if not _os.environ.get("SONDE_PYTHON_DIR"):
        site = _os.path.dirname(here)  # installed next to this package (cmake --install)
        if _os.path.isfile(_os.path.join(site, "sonde_plugin", "runner.py")):
            _os.environ["SONDE_PYTHON_DIR"] = site


_locate_sonde()

from . import _native  # noqa: E402
from .monitor import LEVELS, Monitor  # noqa: E402
from .marks import mark  # noqa: E402
from .session import CellHistory, CellRecord, UsageError, export_session, import_session

__version__ = _native.version
__all__ = ["Monitor", "LEVELS", "mark", "CellHistory", "CellRecord", "UsageError", "export_session",
           "import_session", "load_ipython_extension", "unload_ipython_extension",
           "build_perfmonitor_service", "build_perfmonitor_magic_adapter"]


def __getattr__(name):
    # JUmPER's Python API (sonde.service) needs IPython: imported on first use only.
    if name in ("build_perfmonitor_service", "build_perfmonitor_magic_adapter"):
        from . import service

        return getattr(service, name)
    raise AttributeError(f"module 'sonde' has no attribute '{name}'")


def load_ipython_extension(ipython):
    """`%load_ext sonde`: registers the magics and the cell-history hooks."""
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython):
    from .magics import unload

    unload(ipython)
