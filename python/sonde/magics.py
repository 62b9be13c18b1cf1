"""IPython magics with JUmPER's names and options, on sonde's C++ engine.

    %load_ext sonde
    %perfmonitor_start [interval] [--levels process,user,system] [--config FILE]
    ... cells ...
    %perfmonitor_perfreport [--cell RANGE] [--level LEVEL] [--text]
    %perfmonitor_plot [--metrics cpu_summary,memory] [--cell RANGE] [--level L] [--save-jpeg F]
    %perfmonitor_stop

Bad input (an unknown option, a bad cell range, a stop before a start, a plot before any data)
prints one line `sonde: error: ...` on stderr; no traceback.
"""

import argparse
import functools
import os
import shlex
import sys
import time

from IPython.core.magic import Magics, line_magic, magics_class

from . import plot as plotting
from . import report as reporting
from .session import CellHistory, LiveData, UsageError, export_session, import_session

DEFAULT_INTERVAL = 1.0  # JUmPER's default


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"%{self.prog}: {message}")


def _parser(name):
    return _Parser(prog=name, add_help=False)


def _parse(parser, line):
    try:
        argv = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"%{parser.prog}: {e}") from None
    return parser.parse_args(argv)


def _level_arg(p):
    p.add_argument("--level", default=None,
                   help="process (default), user, slurm or system")


def _magic(func):
    """Runs a magic; a UsageError or ValueError becomes one line on stderr."""

    @functools.wraps(func)
    def wrapper(self, line=""):
        try:
            return func(self, line)
        except (UsageError, ValueError) as e:
            print(f"sonde: error: {e}", file=sys.stderr)
        except RuntimeError as e:
            print(f"sonde: error: {e}", file=sys.stderr)
        return None

    return wrapper


HELP = """sonde magics (JUmPER's names; data from sonde's C++ engine)
  %perfmonitor_start [interval] [--levels L,..] [--config FILE]   start monitoring this kernel (default 1 s)
  %perfmonitor_stop                                  stop monitoring (the data stays)
  %perfmonitor_resources                             CPUs, memory limits and GPUs available
  %perfmonitor_perfreport [--cell R] [--level L] [--text]   report for cells R (default: everything)
  %perfmonitor_enable_perfreports [--level L] [--text]     a report after every cell
  %perfmonitor_disable_perfreports
  %perfmonitor_plot [--metrics M,..] [--cell R] [--level L] [--save-jpeg FILE]
  %perfmonitor_export_perfdata [--file F.csv] [--level L] [--name VAR]   DataFrame or CSV
  %perfmonitor_export_cell_history [--file F.csv|F.json] [--name VAR]
  %show_cell_history  (also %cell_history)           the executed cells with their times
  %export_session [DIR|FILE.zip]                     a run directory `sonde report` reads
  %import_session PATH                               reports and plots of an exported session
  %perfmonitor_fast_setup                            start (1 s) and a report after every cell
  %perfmonitor_help
JUmPER's --monitor/--check-sanity (start) and --pickle (plot) are accepted; sonde always samples
with its C++ engine.
Cell ranges R: 5, 2:8, :5, 3:, -3: (execution counts, inclusive; negative: from the last cell).
Levels: process, user, slurm (inside a Slurm job), system. Metrics: cpu_summary, memory,
gpu_util_summary, gpu_band_summary, gpu_mem_summary, or any column (plugin columns too)."""


@magics_class
class SondeMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self.monitor = None
        self.data = None
        self.history = CellHistory()
        self.auto_report = None  # {"level": .., "text": ..}
        self.start_wall_s = None  # how long the last %perfmonitor_start took

    # Events ---------------------------------------------------------------------------------
    def pre_run_cell(self, info=None):
        code = getattr(info, "raw_cell", "") if info is not None else ""
        self.history.start(code or "")

    def post_run_cell(self, result=None):
        count = getattr(result, "execution_count", None) if result is not None else None
        rec = self.history.finish(count)
        if rec is None or self.auto_report is None or not isinstance(self.data, LiveData):
            return  # nothing to report on, or an imported session (new cells are not in it)
        if _only_sonde_magics(rec.code):
            return
        try:
            self._show_report([rec], self.auto_report["level"], self.auto_report["text"])
        except (UsageError, ValueError) as e:
            print(f"sonde: error: {e}", file=sys.stderr)

    # Helpers --------------------------------------------------------------------------------
    def _need_data(self):
        if self.data is None:
            raise UsageError("no performance data yet: start the monitor with "
                             "%perfmonitor_start (or load one with %import_session PATH)")
        return self.data

    def _level(self, level):
        data = self._need_data()
        levels = data.levels
        if level is None:
            return "process" if "process" in levels else levels[0]
        if level not in levels:
            raise UsageError(f"--level: '{level}' is not in this session (levels: "
                             f"{', '.join(levels)})")
        return level

    def _cells(self, spec):
        if spec is None:
            return []
        return self.history.select(spec)

    @staticmethod
    def _window(cells):
        if not cells:
            return None
        return (min(c.start_wallclock for c in cells), max(c.end_wallclock for c in cells))

    def summary(self, cells):
        """summarize_run's JSON for `cells` (everything when empty): every level."""
        data = self._need_data()
        window = self._window(cells)
        try:
            summary = data.summarize_native(window, self.history.cells)
            frames = None
        except TypeError:  # the extension was built without summarize_run
            frames = {lvl: data.frame(lvl) for lvl in data.levels}
            summary = reporting.summarize_py(frames, data.manifest(), window)
        # Energy per level over the cells (the energy collector's cumulative columns).
        manifest = data.manifest()
        if ((manifest.get("node_info") or {}).get("energy") or {}).get("domains"):
            if frames is None:
                frames = {lvl: data.frame(lvl) for lvl in data.levels}
            reporting.add_energy(summary, frames, manifest, window)
        return summary

    def _show_report(self, cells, level, text):
        from IPython.display import HTML, display

        summary = self.summary(cells)
        title = reporting.title_of(cells, level)
        if text:
            print(reporting.render_text(summary, level, title))
        else:
            display(HTML(reporting.render_html(summary, level, title)))
        return summary

    # Magics ---------------------------------------------------------------------------------
    @line_magic
    @_magic
    def perfmonitor_help(self, line=""):
        print(HELP)

    @line_magic
    @_magic
    def perfmonitor_start(self, line=""):
        p = _parser("perfmonitor_start")
        p.add_argument("interval", nargs="?", type=float, default=None)
        p.add_argument("--levels", default=None)
        p.add_argument("--config", default=None)
        # JUmPER's backend choice and sanity check: sonde always uses its C++ engine.
        p.add_argument("--monitor", default=None, choices=["default", "native_c",
                                                          "subprocess_python", "thread",
                                                          "slurm_multinode"])
        p.add_argument("--check-sanity", dest="check_sanity", action="store_true")
        args = _parse(p, line)
        if self.monitor is not None and self.monitor.running:
            raise UsageError("the monitor is already running (stop it with %perfmonitor_stop)")
        from .monitor import Monitor

        t0 = time.perf_counter()
        interval = args.interval if args.interval is not None else DEFAULT_INTERVAL
        same = (self.monitor is not None and isinstance(self.data, LiveData)
                and self.data.monitor is self.monitor and args.levels is None
                and args.config is None and abs(self.monitor.interval - interval) < 1e-12)
        if not same:
            self.monitor = Monitor(interval=interval, levels=args.levels, config=args.config)
            self.data = LiveData(self.monitor)
        self.monitor.start()
        self.start_wall_s = time.perf_counter() - t0
        for w in self.monitor.warnings():
            print(f"sonde: warning: {w}", file=sys.stderr)
        print(f"sonde: monitoring pid {self.monitor.pid} every {self.monitor.interval:g} s at "
              f"levels {', '.join(self.monitor.levels)}")

    @line_magic
    @_magic
    def perfmonitor_fast_setup(self, line=""):
        """JUmPER's fast set-up: start at 1 s and a report after every cell (process level)."""
        _parse(_parser("perfmonitor_fast_setup"), line)
        if self.monitor is None or not self.monitor.running:
            self.perfmonitor_start.__wrapped__(self, "")
        self.perfmonitor_enable_perfreports.__wrapped__(self, "--level process")

    @line_magic
    @_magic
    def perfmonitor_stop(self, line=""):
        _parse(_parser("perfmonitor_stop"), line)
        if self.monitor is None or not self.monitor.running:
            raise UsageError("no monitor is running (start one with %perfmonitor_start)")
        self.monitor.stop()
        st = self.monitor.stats()
        print(f"sonde: monitor stopped after {st['ticks']} ticks; reports, plots and exports "
              "still work")

    @line_magic
    @_magic
    def perfmonitor_resources(self, line=""):
        _parse(_parser("perfmonitor_resources"), line)
        if self.data is not None:
            info = self.data.manifest().get("node_info", {})
        else:
            from .monitor import Monitor

            info = Monitor(interval=DEFAULT_INTERVAL).node_info
        gib = 1024.0 ** 3
        lines = ["sonde: resources available to this kernel",
                 f"  host             {info.get('hostname', '?')} (Linux {info.get('kernel', '?')})",
                 f"  CPUs             {info.get('num_cpus', 0):g} available of "
                 f"{info.get('num_system_cpus', 0)} on the node"
                 + (f" (cgroup quota {info['cpu_quota']:g})" if info.get("cpu_quota") else ""),
                 f"  CPU handles      {_ranges(info.get('cpu_handles', []))}"]
        levels = self.data.levels if self.data is not None else \
            [lvl for lvl in ("process", "user", "slurm", "system")
             if lvl != "slurm" or os.environ.get("SLURM_JOB_ID")]
        for lvl, b in (info.get("memory_limits") or {}).items():
            if lvl not in levels:
                continue
            lines.append(f"  memory ({lvl + ')':<9} {b / gib:.2f} GiB")
        if info.get("num_gpus"):
            lines.append(f"  GPUs             {info['num_gpus']} x {info.get('gpu_name', '')} "
                         f"({info.get('gpu_memory_gib', 0):.1f} GiB each)")
        else:
            lines.append("  GPUs             none")
        print("\n".join(lines))

    @line_magic
    @_magic
    def perfmonitor_perfreport(self, line=""):
        p = _parser("perfmonitor_perfreport")
        p.add_argument("--cell", default=None)
        _level_arg(p)
        p.add_argument("--text", action="store_true")
        args = _parse(p, line)
        level = self._level(args.level)
        cells = self._cells(args.cell)
        self._show_report(cells, level, args.text)

    @line_magic
    @_magic
    def perfmonitor_enable_perfreports(self, line=""):
        p = _parser("perfmonitor_enable_perfreports")
        _level_arg(p)
        p.add_argument("--text", action="store_true")
        p.add_argument("--interval", type=float, default=None)  # JUmPER's; accepted, unused
        args = _parse(p, line)
        if args.level is not None and self.data is not None:
            self._level(args.level)
        if args.level is not None and args.level not in ("process", "user", "slurm", "system"):
            raise UsageError(f"--level: unknown level '{args.level}' (expected process, user, "
                             "slurm or system)")
        self.auto_report = {"level": args.level or "process", "text": args.text}
        print("sonde: a report follows every cell (%perfmonitor_disable_perfreports stops it)")

    @line_magic
    @_magic
    def perfmonitor_disable_perfreports(self, line=""):
        _parse(_parser("perfmonitor_disable_perfreports"), line)
        self.auto_report = None
        print("sonde: reports after each cell are off")

    @line_magic
    @_magic
    def perfmonitor_plot(self, line=""):
        p = _parser("perfmonitor_plot")
        p.add_argument("--metrics", default=None)
        p.add_argument("--cell", default=None)
        _level_arg(p)
        p.add_argument("--save-jpeg", dest="save_jpeg", default=None)
        p.add_argument("--pickle", dest="pickle_file", default=None)
        p.add_argument("--backend", default=None, choices=["matplotlib", "plotly"])
        p.add_argument("--live", nargs="*", type=float, default=None)
        args = _parse(p, line)
        if args.backend == "plotly":
            raise UsageError("%perfmonitor_plot: --backend plotly is not supported by sonde "
                             "(matplotlib only)")
        if args.live is not None:
            raise UsageError("%perfmonitor_plot: --live is not supported by sonde; plot again "
                             "to see new samples")
        level = self._level(args.level)
        cells = self._cells(args.cell)
        frame = self.data.frame(level)
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] \
            if args.metrics else None
        fig = plotting.make_figure(frame, metrics, cells or self.history.cells, level,
                                   self._window(cells), reporting.title_of(cells, level))
        if args.save_jpeg:
            plotting.save_jpeg(fig, args.save_jpeg)
            print(f"sonde: plot saved to {args.save_jpeg}")
        if args.pickle_file:
            import pickle

            with open(args.pickle_file, "wb") as f:
                pickle.dump({"level": level, "metrics": metrics, "frame": frame,
                             "cells": self.history.dataframe()}, f)
            print(f"sonde: plot data saved to {args.pickle_file} (a dict: level, metrics, "
                  "frame, cells; load it with pickle.load)")
        from IPython.display import Image, display

        display(Image(data=plotting.figure_png(fig), format="png"))

    @line_magic
    @_magic
    def perfmonitor_export_perfdata(self, line=""):
        p = _parser("perfmonitor_export_perfdata")
        p.add_argument("file_pos", nargs="?", default=None)
        p.add_argument("--file", default=None)
        p.add_argument("--name", default=None)
        _level_arg(p)
        args = _parse(p, line)
        level = self._level(args.level)
        df = self.data.frame(level)
        path = args.file or args.file_pos
        if path:
            df.to_csv(path, index=False, na_rep="")
            print(f"sonde: {len(df)} rows of the {level} level written to {path}")
        else:
            self._publish(args.name or f"perfdata_{level}", df,
                          f"{len(df)} rows, {len(df.columns)} columns")

    def _publish(self, name, df, what):
        """Puts a DataFrame into the notebook's namespace under `name` (an --name option)."""
        if not name.isidentifier():
            raise UsageError(f"--name: '{name}' is not a Python identifier")
        self.shell.user_ns[name] = df
        print(f"sonde: DataFrame '{name}' ({what})")

    @line_magic
    @_magic
    def perfmonitor_export_cell_history(self, line=""):
        p = _parser("perfmonitor_export_cell_history")
        p.add_argument("file_pos", nargs="?", default=None)
        p.add_argument("--file", default=None)
        p.add_argument("--name", default=None)
        args = _parse(p, line)
        path = args.file or args.file_pos
        df = self.history.dataframe()
        if path:
            if path.endswith(".json"):
                df.to_json(path, orient="records", indent=2)
            else:
                self.history.write_csv(path)
            print(f"sonde: {len(df)} cells written to {path}")
        else:
            self._publish(args.name or "cell_history", df, f"{len(df)} cells")

    @line_magic
    @_magic
    def show_cell_history(self, line=""):
        _parse(_parser("show_cell_history"), line)
        from IPython.display import display

        if not len(self.history):
            print("sonde: no cells recorded yet")
            return
        df = self.history.dataframe()
        df["start"] = [time.strftime("%H:%M:%S", time.localtime(t)) for t in
                       df["start_wallclock"]]
        display(df[["index", "start", "duration", "code"]])

    @line_magic
    @_magic
    def cell_history(self, line=""):
        return self.show_cell_history.__wrapped__(self, line)

    @line_magic
    @_magic
    def export_session(self, line=""):
        p = _parser("export_session")
        p.add_argument("path", nargs="?", default=None)
        args = _parse(p, line)
        data = self._need_data()
        path = args.path or time.strftime("sonde-session-%Y%m%d-%H%M%S")
        out = export_session(data, self.history, path)
        print(f"sonde: session exported to {out} ({len(self.history)} cells; "
              f"`sonde report {out}` reads it)")

    @line_magic
    @_magic
    def import_session(self, line=""):
        p = _parser("import_session")
        p.add_argument("path")
        args = _parse(p, line)
        if self.monitor is not None and self.monitor.running:
            raise UsageError("stop the running monitor first (%perfmonitor_stop)")
        data, history = import_session(args.path)
        self.data = data
        self.history = history
        self.monitor = None
        print(f"sonde: session {args.path} imported: levels {', '.join(data.levels)}, "
              f"{len(history)} cells")


def _only_sonde_magics(code):
    lines = [ln.strip() for ln in code.splitlines() if ln.strip() and
             not ln.strip().startswith("#")]
    return bool(lines) and all(ln.startswith("%perfmonitor") or ln.startswith("%load_ext")
                               or ln.startswith("%export_session")
                               or ln.startswith("%import_session")
                               or ln.startswith("%show_cell_history") for ln in lines)


def _ranges(ids):
    ids = sorted(ids)
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out) or "-"


_loaded = {}


def load(ipython):
    if ipython in _loaded:
        return _loaded[ipython]
    magics = SondeMagics(ipython)
    ipython.register_magics(magics)
    ipython.events.register("pre_run_cell", magics.pre_run_cell)
    ipython.events.register("post_run_cell", magics.post_run_cell)
    _loaded[ipython] = magics
    import atexit

    atexit.register(_stop_at_exit, magics)  # join the sampling thread before the interpreter ends
    return magics


def _stop_at_exit(magics):
    if magics.monitor is not None:
        magics.monitor.stop()


def unload(ipython):
    magics = _loaded.pop(ipython, None)
    if magics is None:
        return
    ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
    ipython.events.unregister("post_run_cell", magics.post_run_cell)
    if magics.monitor is not None:
        magics.monitor.stop()
