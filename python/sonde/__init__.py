"""sonde for Python and Jupyter: sonde's C++ engine as a Monitor with pandas DataFrames, and
IPython magics with the names JUmPER users know (`%load_ext sonde`, `%perfmonitor_start`, ...).

    import sonde
    m = sonde.Monitor(interval=0.1, levels="process,system").start()
    ...
    m.stop(); m.samples("process")        # a pandas DataFrame

See docs/jupyter.md.
"""

from . import _native
from .monitor import LEVELS, Monitor
from .session import CellHistory, CellRecord, UsageError, export_session, import_session

__version__ = _native.version
__all__ = ["Monitor", "LEVELS", "CellHistory", "CellRecord", "UsageError", "export_session",
           "import_session", "load_ipython_extension", "unload_ipython_extension"]


def load_ipython_extension(ipython):
    """`%load_ext sonde`: registers the magics and the cell-history hooks."""
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython):
    from .magics import unload

    unload(ipython)
