"""JUmPER's Python API on sonde: a service object with the magics' features as methods, a
string-based adapter (method names = magic names, one argument line) and the script writer.

    from sonde.service import build_perfmonitor_service
    service = build_perfmonitor_service()
    service.start_monitoring(0.5)
    with service.monitored():          # a virtual cell: in the cell history and the reports
        work()
    service.show_perfreport(text=True)
    frames = service.export_perfdata()  # {"perfdata_df": DataFrame}

Errors raise sonde.UsageError (the magics print them as one line instead).
"""

import contextlib
import shlex
import time

from .magics import SondeMagics
from .session import UsageError

__all__ = ["PerfmonitorService", "PerfmonitorMagicAdapter", "build_perfmonitor_service",
           "build_perfmonitor_magic_adapter", "write_script"]

_UNAVAILABLE = "unavailable on monitored context"


def _ipython():
    try:
        from IPython import get_ipython

        return get_ipython()
    except ImportError:
        return None


def _raw(magics, name):
    """A magic's body, which raises instead of printing its error."""
    return getattr(type(magics), name).__wrapped__.__get__(magics)


def _q(value):
    return shlex.quote(str(value))


class PerfmonitorService:
    """The monitor, cell history, reports, plots and exports of one session (JUmPER's
    PerfmonitorService, same method names and arguments)."""

    def __init__(self, magics):
        self.magics = magics

    # Monitoring --------------------------------------------------------------------------------
    def start_monitoring(self, interval=None, monitor_type="default", check_sanity=False,
                         levels=None):
        line = "" if interval is None else repr(float(interval))
        if levels:
            line += f" --levels {_q(levels if isinstance(levels, str) else ','.join(levels))}"
        if monitor_type != "default":
            line += f" --monitor {_q(monitor_type)}"
        _raw(self.magics, "perfmonitor_start")(line)

    def stop_monitoring(self):
        _raw(self.magics, "perfmonitor_stop")("")

    def show_resources(self):
        _raw(self.magics, "perfmonitor_resources")("")

    def show_cell_history(self):
        _raw(self.magics, "show_cell_history")("")

    # Reports and plots ---------------------------------------------------------------------
    @staticmethod
    def _range(cell_range):
        if cell_range is None:
            return ""
        if isinstance(cell_range, (tuple, list)):
            return f" --cell {int(cell_range[0])}:{int(cell_range[1])}"
        return f" --cell {_q(cell_range)}"

    def enable_perfreports(self, level="process", interval=None, text=False):
        line = f"--level {_q(level)}" + ("" if interval is None else f" --interval {interval!r}")
        _raw(self.magics, "perfmonitor_enable_perfreports")(line + (" --text" if text else ""))

    def disable_perfreports(self):
        _raw(self.magics, "perfmonitor_disable_perfreports")("")

    def show_perfreport(self, cell_range=None, level=None, text=False, node=None):
        line = self._range(cell_range) + (f" --level {_q(level)}" if level else "")
        line += f" --node {_q(node)}" if node else ""
        _raw(self.magics, "perfmonitor_perfreport")(line + (" --text" if text else ""))

    def plot_performance(self, metrics=None, cell_range=None, level=None, save_jpeg=None,
                         pickle_file=None, backend=None, live=None, node=None):
        line = self._range(cell_range)
        if metrics:
            line += f" --metrics {_q(','.join(metrics))}"
        for opt, v in (("--level", level), ("--node", node), ("--save-jpeg", save_jpeg),
                       ("--pickle", pickle_file), ("--backend", backend)):
            if v:
                line += f" {opt} {_q(v)}"
        if live is not None:
            line += " --live " + " ".join(repr(float(x)) for x in live)
        _raw(self.magics, "perfmonitor_plot")(line)

    # Data ----------------------------------------------------------------------------------
    def export_perfdata(self, file=None, level=None, name=None, node=None):
        line = "".join(f" {o} {_q(v)}" for o, v in (("--file", file), ("--level", level),
                                                     ("--name", name), ("--node", node)) if v)
        return self.magics.export_perfdata_frames(line)

    def load_perfdata(self, file):
        return self.magics.load_frames(_q(file), "perfdata")

    def export_cell_history(self, file=None, name=None):
        line = "".join(f" {o} {_q(v)}" for o, v in (("--file", file), ("--name", name)) if v)
        return self.magics.export_cell_history_frames(line)

    def load_cell_history(self, file):
        return self.magics.load_frames(_q(file), "cell_history")

    def export_session(self, path=None):
        _raw(self.magics, "export_session")("" if path is None else _q(path))

    def import_session(self, path):
        _raw(self.magics, "import_session")(_q(path))

    def fast_setup(self):
        _raw(self.magics, "perfmonitor_fast_setup")("")

    def start_script_recording(self, output_path=None):
        _raw(self.magics, "start_write_script")(output_path or "")

    def stop_script_recording(self):
        _raw(self.magics, "end_write_script")("")

    # Cells ---------------------------------------------------------------------------------
    def on_pre_run_cell(self, raw_cell, cell_magics=(), should_skip_report=False):
        self.magics.on_pre_run_cell(raw_cell, list(cell_magics or ()), should_skip_report)

    def on_post_run_cell(self, result=None):
        self.magics.on_post_run_cell(getattr(result, "execution_count", None))

    @contextlib.contextmanager
    def monitored(self):
        """A block as a virtual cell (JUmPER's placeholders as its code and magics): in the
        cell history, addressable with cell_range, reported after it when reports are on."""
        self.on_pre_run_cell(f"# <Code {_UNAVAILABLE}>", [f"<Magics {_UNAVAILABLE}>"], False)
        try:
            yield self
        finally:
            self.on_post_run_cell(None)

    @property
    def cell_history(self):
        return self.magics.history

    @property
    def monitor(self):
        return self.magics.monitor

    def close(self):
        for lp in self.magics.live_plots:
            lp.stop()
        if self.magics.monitor is not None:
            self.magics.monitor.stop()
        if self.magics.multinode is not None:
            self.magics.multinode.stop()


class PerfmonitorMagicAdapter:
    """The magics as methods taking the magic's argument line (what generated scripts call):
    `adapter.perfmonitor_start("0.5")`. Export and load methods return {name: DataFrame}; an
    error is printed as one line, as by the magic."""

    _RETURNING = {"perfmonitor_export_perfdata": "export_perfdata_frames",
                  "perfmonitor_export_cell_history": "export_cell_history_frames"}

    def __init__(self, service):
        self.service = service

    def __getattr__(self, name):
        magics = self.service.magics
        if name in self._RETURNING:
            return self._guard(getattr(magics, self._RETURNING[name]), {})
        if name == "perfmonitor_load_perfdata":
            return self._guard(lambda line="": magics.load_frames(line, "perfdata"), {})
        if name == "perfmonitor_load_cell_history":
            return self._guard(lambda line="": magics.load_frames(line, "cell_history"), {})
        if name in ("on_pre_run_cell", "on_post_run_cell", "monitored", "close"):
            return getattr(self.service, name)
        attr = getattr(type(magics), name, None)
        if attr is None or not hasattr(attr, "__wrapped__"):
            raise AttributeError(f"no magic named '{name}'")
        return getattr(magics, name)

    @staticmethod
    def _guard(fn, default):
        import sys

        def call(line=""):
            try:
                return fn(line)
            except (UsageError, ValueError, RuntimeError) as e:
                print(f"sonde: error: {e}", file=sys.stderr)
                return default

        return call


def build_perfmonitor_service(plots_disabled=False, plots_disabled_reason="Plotting not "
                              "available.", display_disabled=False,
                              display_disabled_reason="Display not available.",
                              visualizer_backend="matplotlib"):
    """A new service (JUmPER's factory, same arguments). With plots disabled a plot prints the
    reason; with display disabled reports are text."""
    magics = SondeMagics(_ipython())
    magics.backend = (visualizer_backend or "matplotlib").strip().lower()
    if magics.backend not in ("matplotlib", "plotly"):
        raise UsageError(f"visualizer_backend: '{visualizer_backend}' (expected matplotlib or "
                         "plotly)")
    magics.plots_disabled = plots_disabled_reason if plots_disabled else None
    magics.display_disabled = display_disabled_reason if display_disabled else None
    return PerfmonitorService(magics)


def build_perfmonitor_magic_adapter(**kwargs):
    return PerfmonitorMagicAdapter(build_perfmonitor_service(**kwargs))


# The script writer ----------------------------------------------------------------------------

def _restore_lines(rec):
    if not rec.get("running"):
        return []
    interval = rec.get("interval") or 1.0
    auto = rec.get("auto_report")
    if auto:
        args = f"--level {auto['level']} --interval {interval!r}" + \
            (" --text" if auto.get("text") else "")
        return [f"magic_adapter.perfmonitor_enable_perfreports({args!r})"]
    return [f"magic_adapter.perfmonitor_start({repr(interval)!r})"]


def _transform(code, called):
    """The cell with each sonde line magic as a magic_adapter call; any other IPython syntax
    (another magic, a shell escape) is kept as a comment, since plain Python cannot run it."""
    out = []
    names = {m.split(None, 1)[0] for m in called}
    for ln in code.splitlines():
        s = ln.lstrip()
        indent = ln[:len(ln) - len(s)]
        if s.startswith("%") and not s.startswith("%%"):
            parts = s[1:].split(None, 1)
            name = parts[0] if parts else ""
            args = parts[1] if len(parts) > 1 else ""
            if name in names and hasattr(SondeMagics, name):
                out.append(f"{indent}magic_adapter.{name}({args!r})")
                continue
        if s.startswith(("%", "!")):
            out.append(f"{indent}pass  # not plain Python, not run in a script: {s}")
            continue
        out.append(ln)
    return "\n".join(out)


def write_script(rec, cells, called_line_magics):
    """Writes the recorded `cells` as a Python script that replays them on sonde's engine and
    exports the performance data and cell history next to it (as JUmPER's script writer)."""
    import os

    path = rec["path"]
    stem = os.path.splitext(os.path.basename(path))[0]
    lines = ["#!/usr/bin/env python3",
             '"""',
             "Auto-generated script from Jupyter notebook (sonde %start_write_script)",
             f"Generated: {time.strftime('%Y-%m-%d %H:%M:%S')}",
             "Recording started: "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(rec['started']))}",
             f"Total cells: {len(cells)}",
             '"""',
             "from sonde.service import build_perfmonitor_magic_adapter",
             "",
             "magic_adapter = build_perfmonitor_magic_adapter(",
             "    plots_disabled=True,",
             '    plots_disabled_reason="Plotting disabled in generated script.",',
             "    display_disabled=True,",
             '    display_disabled_reason="Display disabled in generated script.",',
             ")"]
    lines += _restore_lines(rec)
    lines.append("")
    for c in cells:
        called = list(c.cell_magics) or called_line_magics(c.code)
        pure = all(ln.lstrip().startswith("%") for ln in c.code.splitlines() if ln.strip()) \
            and bool(c.code.strip())
        lines += [f"# Cell {c.index}",
                  f"# Recorded at: {time.strftime('%H:%M:%S', time.localtime(c.start_wallclock))}",
                  "# --- Cell print ---",
                  f"raw_cell = {c.code!r}",
                  "print('-' * 40)",
                  f"print('Cell {c.index}')",
                  "print('-' * 40)",
                  "print(raw_cell)",
                  "print('-' * 13 + ' Cell output ' + '-' * 14)",
                  f"magic_adapter.on_pre_run_cell(raw_cell, {called!r}, {pure!r})",
                  "# --- Cell content ---",
                  _transform(c.code, called),
                  "# --- Cell End -------",
                  "magic_adapter.on_post_run_cell('')",
                  ""]
    lines += ["# --- Export results to CSV ---",
              "# Performance data (process level)",
              f'magic_adapter.perfmonitor_export_perfdata("--file {stem}_perfdata.csv")',
              "# Cell execution history",
              f'magic_adapter.perfmonitor_export_cell_history("--file {stem}_cell_history.csv")',
              "magic_adapter.close()",
              ""]
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
