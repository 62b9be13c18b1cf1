"""IPython magics with JUmPER's names and options, on sonde's C++ engine.

    %load_ext sonde
    %perfmonitor_start [interval] [--levels process,user,system] [--config FILE]
                       [--monitor slurm_multinode [--out DIR]]
    ... cells ...
    %perfmonitor_perfreport [--cell RANGE] [--level LEVEL] [--node NODE] [--text]
    %perfmonitor_plot [--metrics cpu_summary,memory] [--cell RANGE] [--level L] [--node NODE]
                      [--save-jpeg F]
                      [--backend plotly|matplotlib] [--live [INTERVAL [WINDOW]]]
    %perfmonitor_export_perfdata [--file F.csv|F.json] [--name VAR] [--node NODE]
                                                                       (default VAR perfdata_df)
    %perfmonitor_load_perfdata FILE                                    (pushes loaded_perfdata_df)
    %start_write_script [FILE.py] ... %end_write_script
    %perfmonitor_stop

Cells are addressed by JUmPER's cell_index: the position in the cell history, from 0; or by
IPython's execution count: --cell In[7] (the cell that ran as In [7]), In[3]:In[7].

Bad input (an unknown option, a bad cell range, a stop before a start, a plot before any data)
prints one line `sonde: error: ...` on stderr; no traceback.
"""

import argparse
import functools
import os
import re
import shlex
import sys
import time

from IPython.core.magic import Magics, line_magic, magics_class

from . import multinode as multinode_head
from . import plot as plotting
from . import report as reporting
from .session import (CellHistory, LiveData, UsageError, export_session, import_session,
                      is_aggregate)

DEFAULT_INTERVAL = 1.0  # JUmPER's default
# JUmPER's names (core/state.py): the DataFrames pushed into the notebook.
EXPORT_VARS = {"perfdata": "perfdata_df", "cell_history": "cell_history_df"}
LOADED_VARS = {"perfdata": "loaded_perfdata_df", "cell_history": "loaded_cell_history_df"}
# Columns a loaded file must have (JUmPER's validation in utilities.load_dataframe_from_file).
PERFDATA_REQUIRED = ["time", "memory", "io_read_count", "io_write_count", "io_read", "io_write",
                     "cpu_util_avg", "cpu_util_min", "cpu_util_max"]
CELL_HISTORY_REQUIRED = ["cell_index", "raw_cell", "start_time", "end_time", "duration",
                         "wallclock_start_time", "wallclock_end_time"]
CONTROL_MAGICS = {"start_write_script", "end_write_script"}


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"%{self.prog}: {message}")


def _parser(name):
    return _Parser(prog=name, add_help=False)


def _join_cell_arg(line):
    """`--cell In [7]` (IPython's spelling, with a space) or `--cell In [3] : In [7]`: one
    argument, In[7] / In[3]:In[7]. The argument runs to the next option (` --`)."""
    m = re.search(r"--cell(?:=|\s+)", line)
    if not m:
        return line
    rest = line[m.end():]
    stop = re.search(r"\s--", rest)
    arg, tail = (rest[:stop.start()], rest[stop.start():]) if stop else (rest, "")
    if not re.search(r"in\s*\[", arg, re.IGNORECASE):
        return line
    return line[:m.end()] + re.sub(r"\s+", "", arg) + tail


def _parse(parser, line):
    if any("--cell" in a.option_strings for a in parser._actions):
        line = _join_cell_arg(line)
    try:
        argv = shlex.split(line)
    except ValueError as e:
        raise UsageError(f"%{parser.prog}: {e}") from None
    return parser.parse_args(argv)


def _level_arg(p):
    p.add_argument("--level", default=None,
                   help="process (default), user, slurm or system")


def _node_arg(p):
    p.add_argument("--node", default=None,
                   help="a multi-node run: <Aggregated> (default) or a node's name")


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
                    [--monitor slurm_multinode [--out DIR]]   and every node of the Slurm job
  %perfmonitor_stop                                  stop monitoring (the data stays)
  %perfmonitor_resources                             CPUs, memory and GPUs available
  %perfmonitor_perfreport [--cell R] [--level L] [--node N] [--text]   report (default: the last cell that ran
                                                     at least one interval)
  %perfmonitor_enable_perfreports [--level L] [--interval S] [--text]   a report after every cell
  %perfmonitor_disable_perfreports
  %perfmonitor_plot [--metrics M,..] [--cell R] [--level L] [--node N] [--save-jpeg FILE]
                   [--pickle FILE]
                    [--backend plotly|matplotlib] [--live [INTERVAL [WINDOW]]]
                                                     without --level: the plot widget
  %perfmonitor_export_perfdata [--file F.csv|F.json] [--level L] [--node N] [--name VAR]
                                                     (default DataFrame 'perfdata_df')
  %perfmonitor_export_cell_history [--file F.csv|F.json] [--name VAR]
                                                     (default DataFrame 'cell_history_df')
  %perfmonitor_load_perfdata FILE                    CSV/JSON into 'loaded_perfdata_df'
  %perfmonitor_load_cell_history FILE                CSV/JSON into 'loaded_cell_history_df'
  %show_cell_history  (also %cell_history)           the executed cells: cell_index, In [n], times
  %export_session [DIR|FILE.zip]                     a run directory `sonde report` reads
  %import_session PATH                               reports and plots of an exported session
  %start_write_script [FILE.py]                      record the next cells into a Python script
  %end_write_script                                  write it (cells are not run while recording)
  %perfmonitor_fast_setup                            start (1 s) and a report after every cell
  %perfmonitor_help
JUmPER's --monitor/--check-sanity (start) are accepted; sonde always samples with its C++ engine.
--monitor slurm_multinode (inside a Slurm allocation) also records every node of the job
(`sonde record --slurm-job`, into --out DIR): --node <Aggregated> or a node's name on the
reports, plots and exports reads it, during and after the session.
Cell ranges R (cell_index: position in the history, from 0): 5, 2:8, :5, 3: (inclusive);
sonde also reads negative numbers from the last cell: -1, -3:, and IPython's execution counts:
In[7] (the cell that ran as In [7]), In[3]:In[7]. %show_cell_history lists both numbers.
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
        self.backend = "plotly"  # JUmPER's magics default; --backend changes it
        self.user_interval = None
        self.live_plots = []
        self.recording = None  # {"path": .., "start": cell_index, "settings": {..}}
        # --monitor slurm_multinode: the multi-node head (sonde.multinode.LiveMultinode); it stays
        # after %perfmonitor_stop so that --node reads its run directory.
        self.multinode = None
        # Set by the Python API / a generated script (sonde.service): no IPython display.
        self.plots_disabled = None
        self.display_disabled = None
        # The plot widget: None decides by the front end (plot.widget_frontend), True/False force.
        self.plot_widget = None
        self.last_widget_fallback = None  # why the last widget plot was drawn static
        self._skip_report = False

    # Events ---------------------------------------------------------------------------------
    def pre_run_cell(self, info=None):
        code = getattr(info, "raw_cell", "") if info is not None else ""
        code = code or ""
        self.on_pre_run_cell(code, self.called_line_magics(code),
                             self.is_pure_line_magic_cell(code))

    def post_run_cell(self, result=None):
        count = getattr(result, "execution_count", None) if result is not None else None
        self.on_post_run_cell(count)

    def on_pre_run_cell(self, raw_cell, cell_magics=(), should_skip_report=False):
        """JUmPER's hook (also what a generated script and `with service.monitored():` call)."""
        self.history.start(raw_cell, magics=cell_magics)
        self._skip_report = bool(should_skip_report)

    def on_post_run_cell(self, execution_count=None):
        if not isinstance(execution_count, int):
            execution_count = None
        rec = self.history.finish(execution_count)
        if rec is None or self.auto_report is None or not isinstance(self.data, LiveData):
            return  # nothing to report on, or an imported session (new cells are not in it)
        if self._skip_report or not self.monitor.running:
            return
        try:
            self._show_report([rec], self.auto_report["level"], self.auto_report["text"])
        except (UsageError, ValueError) as e:
            print(f"sonde: error: {e}", file=sys.stderr)

    # Cell sources -----------------------------------------------------------------------------
    def _line_magics(self):
        if self.shell is None:
            return set()
        return set(self.shell.magics_manager.lsmagic().get("line", {}))

    def called_line_magics(self, code):
        """The line magics a cell calls (`name args`, without %), as JUmPER's
        get_called_line_magics: lines starting with % and a known line magic."""
        known = self._line_magics()
        out = []
        for ln in code.splitlines():
            s = ln.strip()
            if s.startswith("%") and not s.startswith("%%") and len(s) > 1:
                parts = s[1:].split(None, 1)
                if parts and (parts[0] in known or parts[0] in CONTROL_MAGICS):
                    out.append(s[1:])
        return out

    def is_pure_line_magic_cell(self, code):
        """Every non-empty line a comment or a known line magic: no report after it."""
        known = self._line_magics()
        for ln in code.splitlines():
            s = ln.strip()
            if not s or s.startswith("#"):
                continue
            if s.startswith("%") and len(s) > 1 and s[1:].split(None, 1)[0] in known:
                continue
            return False
        return True

    # Helpers --------------------------------------------------------------------------------
    def monitor_target(self):
        """The pid %perfmonitor_start watches (None: this kernel). The wrapper kernel
        (sonde.kernel) gives the kernel it wraps."""
        return None

    def _need_data(self):
        if self.data is None:
            raise UsageError("no performance data yet: start the monitor with "
                             "%perfmonitor_start (or load one with %import_session PATH)")
        return self.data

    def _node_data(self, node):
        """The data --node names: the whole run (None, <Aggregated>, aggregate) or one node of
        a multi-node run. With a live multi-node monitor (--monitor slurm_multinode), any --node
        reads its run directory as it is now; without --node the kernel's own monitor."""
        if node is not None and self.multinode is not None:
            for msg in self.multinode.new_messages():  # a node lost since the last look
                print(msg, file=sys.stderr)
            data = self.multinode.snapshot()
        else:
            data = self._need_data()
        if is_aggregate(node):
            return data
        nodes = getattr(data, "nodes", None) or []
        if not nodes:
            raise UsageError(f"--node {node}: this session is not a multi-node run")
        if node not in nodes:
            raise UsageError(f"--node: '{node}' is not a node of this run (nodes: "
                             f"{', '.join(nodes)}; or <Aggregated>)")
        return data.node(node)

    def _level(self, level, data=None):
        data = data or self._need_data()
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

    def _min_duration(self):
        data = self._need_data()
        return float(data.interval or 0)

    def _default_report_cells(self):
        """JUmPER's report without --cell: the last cell that ran at least one interval."""
        if not len(self.history):
            return []  # no cells yet: the whole session
        c = self.history.last_long_cell(self._min_duration())
        if c is None:
            raise UsageError(f"no cell ran at least one sampling interval "
                             f"({self._min_duration():g} s); give --cell")
        return [c]

    def _default_plot_cells(self):
        """JUmPER's plot without --cell: from the last cell longer than an interval to the
        last cell."""
        cells = self.history.cells
        if not cells:
            return []
        start = 0
        for i in range(len(cells) - 1, -1, -1):
            if cells[i].duration > self._min_duration():
                start = i
                break
        return cells[start:]

    def perfdata(self, level, data=None):
        """A level's DataFrame with JUmPER's cell_index column (the cell a sample was taken
        in, <NA> between cells). `data`: a node's (_node_data), else the session's."""
        import numpy as np
        import pandas as pd

        df = (data or self._need_data()).frame(level)
        idx = np.full(len(df), -1, dtype=np.int64)
        wc = df["wallclock"].to_numpy()
        for c in self.history.cells:
            idx[(wc >= c.start_wallclock) & (wc <= c.end_wallclock)] = c.index
        col = pd.array(idx, dtype="Int64")
        col[idx < 0] = pd.NA
        df["cell_index"] = col
        return df

    @staticmethod
    def _window(cells):
        if not cells:
            return None
        return (min(c.start_wallclock for c in cells), max(c.end_wallclock for c in cells))

    def summary(self, cells, data=None):
        """summarize_run's JSON for `cells` (everything when empty): every level. `data`: a
        node's (_node_data), else the session's."""
        data = data or self._need_data()
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

    def _show_report(self, cells, level, text, data=None):
        from IPython.display import display

        summary = self.summary(cells, data)
        title = reporting.title_of(cells, level, getattr(data, "node_name", None))
        if text or self.display_disabled:
            print(reporting.render_text(summary, level, title))
        else:
            # HTML for a notebook, the text report for a front end without HTML (terminal
            # IPython prints text/plain; an HTML object alone would print its repr).
            display({"text/html": reporting.render_html(summary, level, title),
                     "text/plain": reporting.render_text(summary, level, title)}, raw=True)
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
        p.add_argument("--out", default=None,
                       help="slurm_multinode: the run directory of the nodes")
        args = _parse(p, line)
        if (self.monitor is not None and self.monitor.running) or \
                (self.multinode is not None and self.multinode.running):
            raise UsageError("the monitor is already running (stop it with %perfmonitor_stop)")
        if args.out is not None and args.monitor != "slurm_multinode":
            raise UsageError("--out: only with --monitor slurm_multinode (the nodes' run "
                             "directory)")
        if args.monitor == "slurm_multinode":
            return self._start_multinode(args)
        from .monitor import Monitor

        t0 = time.perf_counter()
        interval = args.interval if args.interval is not None else DEFAULT_INTERVAL
        pid = self.monitor_target()
        same = (self.monitor is not None and isinstance(self.data, LiveData)
                and self.data.monitor is self.monitor and args.levels is None
                and args.config is None and abs(self.monitor.interval - interval) < 1e-12
                and self.monitor.pid == (os.getpid() if pid is None else pid))
        if not same:
            self.monitor = Monitor(interval=interval, levels=args.levels, config=args.config,
                                   pid=pid)
            self.data = LiveData(self.monitor)
        self.monitor.start()
        self.user_interval = interval
        self.start_wall_s = time.perf_counter() - t0
        for w in self.monitor.warnings():
            print(f"sonde: warning: {w}", file=sys.stderr)
        print(f"sonde: monitoring pid {self.monitor.pid} every {self.monitor.interval:g} s at "
              f"levels {', '.join(self.monitor.levels)}")

    def _start_multinode(self, args):
        """--monitor slurm_multinode: the kernel's monitor as without it, and the multi-node
        head for every node of the job (sonde.multinode). Outside an allocation, or when the
        head does not start: an error and nothing running."""
        job = os.environ.get("SLURM_JOB_ID", "").strip()
        if not job:
            raise UsageError("--monitor slurm_multinode: not inside a Slurm allocation "
                             "(SLURM_JOB_ID is not set; start the kernel in an salloc/sbatch "
                             "job); nothing was started")
        if not job.isdigit():
            raise UsageError(f"--monitor slurm_multinode: SLURM_JOB_ID is '{job}', expected a "
                             "job id (digits); nothing was started")
        interval = args.interval if args.interval is not None else DEFAULT_INTERVAL
        if not interval > 0:
            raise UsageError(f"interval: {interval:g} s, expected a positive number of seconds")
        head = multinode_head.LiveMultinode(job, interval, args.out)
        line = " ".join(shlex.quote(a) for a in
                        ([repr(interval)] + (["--levels", args.levels] if args.levels else [])
                         + (["--config", args.config] if args.config else [])))
        head.start()
        try:
            self.perfmonitor_start.__wrapped__(self, line)
        except BaseException:
            head.stop()
            raise
        if self.monitor is None or not self.monitor.running:  # its error is printed
            head.stop()
            return
        self.multinode = head
        snap = head.snapshot()
        print(f"sonde: recording job {job} on {len(snap.nodes)} nodes ({', '.join(snap.nodes)}) "
              f"every {interval:g} s into {head.directory}; --node <Aggregated> or a node's "
              "name on the reports and plots")

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
        head = self.multinode if self.multinode is not None and not self.multinode.stopped \
            else None
        if (self.monitor is None or not self.monitor.running) and head is None:
            raise UsageError("no monitor is running (start one with %perfmonitor_start)")
        if self.monitor is not None and self.monitor.running:
            self.monitor.stop()
            st = self.monitor.stats()
            print(f"sonde: monitor stopped after {st['ticks']} ticks; reports, plots and exports "
                  "still work")
        if head is not None:
            self._stop_multinode(head)

    def _stop_multinode(self, head):
        if not head.running:  # it ended by itself (the job ended, or every agent)
            print(f"sonde: the multi-node head had ended (job {head.job}): see its summary",
                  file=sys.stderr)
        rc = head.stop()
        summary = head.summary_text()
        if summary:
            print(summary)
        if rc != 0:
            err = head.stderr().strip().splitlines()
            raise UsageError(f"the multi-node head ended with status {rc}"
                             + (f": {err[-1]}" if err else ""))
        print(f"sonde: the nodes' run directory {head.directory} is complete (`sonde report "
              f"{head.directory}`; --node on the reports and plots reads it)")

    @line_magic
    @_magic
    def perfmonitor_resources(self, line=""):
        """JUmPER's lines (CPUs, CPU affinity, Memory in GiB rounded to 2 decimals, GPUs), then
        sonde's memory limit per level."""
        _parse(_parser("perfmonitor_resources"), line)
        self._print_resources()
        if self.multinode is not None:
            for msg in self.multinode.new_messages():
                print(msg, file=sys.stderr)
            self._print_nodes(self.multinode.snapshot())
        elif self.data is not None and getattr(self.data, "nodes", None):
            self._print_nodes(self.data)

    def _print_nodes(self, data):
        """The nodes of a multi-node run: JUmPER's lines per node, and the agent's status."""
        gib = 1024.0 ** 3
        m = data.manifest()
        entries = {e.get("name"): e for e in m.get("nodes") or []}
        lines = [f"  nodes ({len(entries)}, job {(m.get('multinode') or {}).get('job', '?')}):"]
        for name, e in entries.items():
            info = e.get("node_info") or {}
            limits = info.get("memory_limits") or {}
            mem = limits.get("system", info.get("mem_total_bytes", 0)) or 0
            cpus = info.get("num_cpus", 0)
            cpus = int(cpus) if float(cpus).is_integer() else cpus
            status = e.get("status", "?") + (f" ({e['reason']})" if e.get("reason") else "")
            rows = e.get("rows", 0)
            if hasattr(data, "node_rows"):  # a live run: the rows in the files now
                rows = max(rows, data.node_rows(name))
            lines.append(f"    {name}: CPUs: {cpus}, Memory: {round(mem / gib, 2)} GiB, "
                         f"GPUs: {info.get('num_gpus', 0)}; {rows} rows, "
                         f"{status}" + (", head" if e.get("head") else ""))
        print("\n".join(lines))

    def _print_resources(self):
        if self.data is not None:
            info = self.data.manifest().get("node_info", {})
        else:
            from .monitor import Monitor

            info = Monitor(interval=DEFAULT_INTERVAL).node_info
        gib = 1024.0 ** 3
        limits = info.get("memory_limits") or {}
        system = limits.get("system", info.get("mem_total_bytes", 0)) or 0
        num_cpus = info.get("num_cpus", 0)
        num_cpus = int(num_cpus) if float(num_cpus).is_integer() else num_cpus
        lines = ["[sonde]:",
                 f"  CPUs: {num_cpus}",
                 f"    CPU affinity: {list(info.get('cpu_handles', []))}",
                 f"  Memory: {round(system / gib, 2)} GiB",
                 f"  GPUs: {info.get('num_gpus', 0)}"]
        if info.get("num_gpus"):
            lines.append(f"    {info.get('gpu_name', '')}, "
                         f"{round(float(info.get('gpu_memory_gib', 0)), 2)} GiB")
        levels = self.data.levels if self.data is not None else \
            [lvl for lvl in ("process", "user", "slurm", "system")
             if lvl != "slurm" or os.environ.get("SLURM_JOB_ID")]
        lines.append(f"  host: {info.get('hostname', '?')} (Linux {info.get('kernel', '?')}), "
                     f"{info.get('num_system_cpus', 0)} CPUs on the node"
                     + (f", cgroup CPU quota {info['cpu_quota']:g}" if info.get("cpu_quota")
                        else ""))
        for lvl, b in limits.items():
            if lvl in levels:
                lines.append(f"  Memory ({lvl}): {round(b / gib, 2)} GiB")
        print("\n".join(lines))

    @line_magic
    @_magic
    def perfmonitor_perfreport(self, line=""):
        p = _parser("perfmonitor_perfreport")
        p.add_argument("--cell", default=None)
        _level_arg(p)
        _node_arg(p)
        p.add_argument("--text", action="store_true")
        args = _parse(p, line)
        data = self._node_data(args.node)
        level = self._level(args.level, data)
        cells = self._cells(args.cell) if args.cell is not None else \
            self._default_report_cells()
        self._show_report(cells, level, args.text, data)

    @line_magic
    @_magic
    def perfmonitor_enable_perfreports(self, line=""):
        p = _parser("perfmonitor_enable_perfreports")
        _level_arg(p)
        p.add_argument("--text", action="store_true")
        p.add_argument("--interval", type=float, default=None)
        args = _parse(p, line)
        if args.level is not None and self.data is not None:
            self._level(args.level)
        if args.level is not None and args.level not in ("process", "user", "slurm", "system"):
            raise UsageError(f"--level: unknown level '{args.level}' (expected process, user, "
                             "slurm or system)")
        # As JUmPER: enabling reports starts the monitor (at --interval, default 1 s) when it
        # is not running.
        if self.monitor is None or not self.monitor.running:
            self.perfmonitor_start.__wrapped__(
                self, "" if args.interval is None else repr(float(args.interval)))
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
        _node_arg(p)
        p.add_argument("--save-jpeg", dest="save_jpeg", default=None)
        p.add_argument("--pickle", dest="pickle_file", default=None)
        p.add_argument("--backend", default=None, choices=["matplotlib", "plotly"])
        p.add_argument("--live", nargs="*", type=float, default=None)
        args = _parse(p, line)
        if self.plots_disabled:
            print(f"sonde: {self.plots_disabled}")
            return
        data = self._node_data(args.node)
        node = getattr(data, "node_name", None)
        if args.backend:  # as JUmPER: the choice stays for the next plots
            self.backend = args.backend
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()] \
            if args.metrics else None
        if args.live is not None:
            if args.node is not None:
                raise UsageError("--live plots the kernel's own monitor; without --live, --node "
                                 "plots the nodes' data as it is now")
            return self._plot_live(args, metrics)
        cells = self._cells(args.cell) if args.cell is not None else self._default_plot_cells()
        direct = args.level is not None or metrics or args.save_jpeg or args.pickle_file or \
            node is not None
        backend = self.backend
        if not direct and cells:
            ok, why = self._widget_frontend()
            if ok:
                return self._plot_widget(cells, metrics)
            # No front end to draw the widget (terminal IPython, jupyter nbconvert --execute):
            # its static stand-in, a PNG a headless notebook stores and any viewer shows.
            backend = "matplotlib"
            self.last_widget_fallback = why
        level = self._level(args.level, data)
        frame = data.frame(level)
        window = self._window(cells)
        if args.cell is None and window is not None and \
                not len(plotting.select_rows(frame, window)):
            cells = self.history.cells  # JUmPER's default range has no samples: every cell
            window = self._window(cells)
        title = reporting.title_of(cells, level, node)
        if args.save_jpeg:
            # JPEG with matplotlib whatever the backend (plotly's image export needs kaleido).
            plotting.save_jpeg(plotting.make_figure(frame, metrics, cells, level, window, title),
                               args.save_jpeg)
            print(f"sonde: plot saved to {args.save_jpeg}")
        if args.pickle_file:
            import pickle

            with open(args.pickle_file, "wb") as f:
                pickle.dump({"level": level, "node": node, "metrics": metrics, "frame": frame,
                             "cells": self.history.dataframe()}, f)
            print(f"sonde: plot data saved to {args.pickle_file} (a dict: level, metrics, "
                  "frame, cells; load it with pickle.load)")
        from IPython.display import display

        display(plotting.render(frame, metrics, cells, level, window, title, backend), raw=True)

    def _widget_frontend(self):
        """(True, "") where the front end draws widgets, else (False, why); self.plot_widget
        (True/False; None: plot.widget_frontend's guess) decides instead when set."""
        if self.plot_widget is not None:
            return bool(self.plot_widget), "" if self.plot_widget else "plot_widget is False"
        return plotting.widget_frontend(self.shell)

    def _plot_widget(self, cells, metrics):
        from IPython.display import display

        data = self.data
        levels = data.levels
        w = plotting.PlotWidget(data.frame, levels, self.history.cells,
                                (cells[0].index, cells[-1].index), metrics, self.backend,
                                "process" if "process" in levels else levels[0])
        display(w.box)
        w.update()
        self.last_widget = w
        return None

    def _plot_live(self, args, metrics):
        if not isinstance(self.data, LiveData):
            raise UsageError("--live plots a running monitor; this session is imported "
                             "(plot it without --live)")
        if not self.monitor.running:
            raise UsageError("--live: the monitor is stopped (start it with %perfmonitor_start)")
        live = list(args.live) + [2.0, 120.0][len(args.live):]  # JUmPER's defaults
        if len(args.live) > 2:
            raise UsageError("--live takes at most INTERVAL and WINDOW (e.g. --live 1.0 60)")
        level = self._level(args.level)
        plotting.resolve_metrics(self.data.frame(level), metrics)  # bad names fail here
        lp = plotting.LivePlot(self.monitor, self.history, metrics, level, self.backend,
                               live[0], live[1], button=self._widget_frontend()[0])
        self.live_plots = [x for x in self.live_plots if x.running] + [lp]
        return None

    @line_magic
    @_magic
    def perfmonitor_export_perfdata(self, line=""):
        for name, df in self.export_perfdata_frames(line).items():
            self._publish(name, df, f"{len(df)} rows, {len(df.columns)} columns")

    def export_perfdata_frames(self, line=""):
        """The work of %perfmonitor_export_perfdata: writes --file (JSON for .json, CSV
        otherwise; `.csv` appended to a name without a suffix) and returns {}, or returns
        {name: DataFrame} (default name perfdata_df)."""
        p = _parser("perfmonitor_export_perfdata")
        p.add_argument("file_pos", nargs="?", default=None)
        p.add_argument("--file", default=None)
        p.add_argument("--name", default=None)
        _level_arg(p)
        _node_arg(p)
        args = _parse(p, line)
        data = self._node_data(args.node)
        level = self._level(args.level, data)
        df = self.perfdata(level, data)
        path = args.file or args.file_pos
        if not path:
            name = args.name or EXPORT_VARS["perfdata"]
            if not name.isidentifier():
                raise UsageError(f"--name: '{name}' is not a Python identifier")
            return {name: df}
        fmt = os.path.splitext(path)[1].lower().lstrip(".")
        if not fmt:
            path, fmt = path + ".csv", "csv"
        if fmt == "json":
            import json

            records = [{k: (None if _missing(v) else v) for k, v in r.items()}
                       for r in df.astype(object).to_dict("records")]
            with open(path, "w") as f:
                json.dump(records, f, indent=2, allow_nan=False)
        elif fmt == "csv":
            df.to_csv(path, index=False, na_rep="")
        else:
            raise UsageError(f"--file: unsupported format '{fmt}' (expected .csv or .json)")
        node = getattr(data, "node_name", None)
        print(f"sonde: {len(df)} rows of the {level} level"
              + (f" of node {node}" if node else "") + f" written to {path}")
        return {}

    @line_magic
    @_magic
    def perfmonitor_load_perfdata(self, line=""):
        for name, df in self.load_frames(line, "perfdata").items():
            self._publish(name, df, f"{len(df)} rows, {len(df.columns)} columns")

    @line_magic
    @_magic
    def perfmonitor_load_cell_history(self, line=""):
        for name, df in self.load_frames(line, "cell_history").items():
            self._publish(name, df, f"{len(df)} cells")

    def load_frames(self, line, what):
        """%perfmonitor_load_perfdata FILE / %perfmonitor_load_cell_history FILE: a CSV or JSON
        file with the columns JUmPER requires; returns {loaded_..._df: DataFrame}."""
        p = _parser(f"perfmonitor_load_{what}")
        p.add_argument("file")
        args = _parse(p, line)
        required = PERFDATA_REQUIRED if what == "perfdata" else CELL_HISTORY_REQUIRED
        df = load_dataframe(args.file, required,
                            "performance data" if what == "perfdata" else "cell history")
        return {LOADED_VARS[what]: df}

    def _publish(self, name, df, what):
        """Puts a DataFrame into the notebook's namespace under `name` (an --name option)."""
        if not name.isidentifier():
            raise UsageError(f"--name: '{name}' is not a Python identifier")
        if self.shell is not None:
            self.shell.push({name: df})
        print(f"sonde: DataFrame '{name}' ({what})")

    @line_magic
    @_magic
    def perfmonitor_export_cell_history(self, line=""):
        for name, df in self.export_cell_history_frames(line).items():
            self._publish(name, df, f"{len(df)} cells")

    def export_cell_history_frames(self, line=""):
        p = _parser("perfmonitor_export_cell_history")
        p.add_argument("file_pos", nargs="?", default=None)
        p.add_argument("--file", default=None)
        p.add_argument("--name", default=None)
        args = _parse(p, line)
        path = args.file or args.file_pos
        if path:
            written = self.history.export(path)
            print(f"sonde: {len(self.history)} cells written to {written}")
            return {}
        name = args.name or EXPORT_VARS["cell_history"]
        if not name.isidentifier():
            raise UsageError(f"--name: '{name}' is not a Python identifier")
        return {name: self.history.dataframe()}

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
                       df["wallclock_start_time"]]
        # Both numbers: JUmPER's cell_index (--cell N) and IPython's In [n] (--cell In[n]).
        view = df[["cell_index", "execution_count", "start", "duration", "raw_cell"]]
        # Text where there is no HTML (terminal IPython): every column, the code on one line
        # (pandas' own text would hide the middle columns in 80 characters).
        plain = view.assign(duration=[f"{d:.2f}" for d in view["duration"]],
                            raw_cell=[_one_line(c, 44) for c in view["raw_cell"]])
        text = plain.to_string(index=False, justify="left",
                               formatters={"raw_cell": lambda c: f"{c:<44}"})
        display({"text/html": view.to_html(),
                 "text/plain": "\n".join(ln.rstrip() for ln in text.splitlines())}, raw=True)

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
        if (self.monitor is not None and self.monitor.running) or \
                (self.multinode is not None and self.multinode.running):
            raise UsageError("stop the running monitor first (%perfmonitor_stop)")
        data, history = import_session(args.path)
        self.data = data
        self.history = history
        self.monitor = None
        self.multinode = None
        print(f"sonde: session {args.path} imported: levels {', '.join(data.levels)}, "
              f"{len(history)} cells")


    # Script recording -----------------------------------------------------------------------
    @line_magic
    @_magic
    def start_write_script(self, line=""):
        """Records the next cells (not running them) into a Python script that replays them
        on sonde's engine (sonde.service.build_perfmonitor_magic_adapter), as JUmPER's."""
        path = line.strip() or time.strftime("notebook_script_%Y%m%d_%H%M%S.py")
        if self.recording is not None:
            raise UsageError(f"already recording into {self.recording['path']} "
                             "(%end_write_script writes it)")
        self.recording = {"path": path, "start": len(self.history), "started": time.time(),
                          "running": self.monitor is not None and self.monitor.running,
                          "interval": self.user_interval,
                          "auto_report": dict(self.auto_report) if self.auto_report else None}
        print(f"sonde: recording the next cells into {path} (they are not run until "
              "%end_write_script)")

    @line_magic
    @_magic
    def end_write_script(self, line=""):
        _parse(_parser("end_write_script"), line)
        if self.recording is None:
            raise UsageError("no script is being recorded (start with %start_write_script)")
        rec, self.recording = self.recording, None
        cells = [c for c in self.history.cells if c.index >= rec["start"]
                 and not _is_control(c.cell_magics)]
        if not cells:
            print("sonde: no cells were recorded; no script written")
            return None
        from .service import write_script

        write_script(rec, cells, self.called_line_magics)
        print(f"sonde: {len(cells)} cells written to {rec['path']} "
              f"(run it with python3 {shlex.quote(rec['path'])})")
        return None

    def is_recording_active(self):
        return self.recording is not None


class DropCellTransformer:
    """While a script is recorded, a cell is not run (JUmPER's behaviour): it is replaced by a
    print, except a cell calling %start_write_script / %end_write_script."""

    def __init__(self, magics):
        self.magics = magics

    def __call__(self, lines):
        if not self.magics.is_recording_active():
            return lines
        cell = "".join(lines)
        if _is_control(self.magics.called_line_magics(cell)):
            return lines
        return ["print('[sonde]: Cell execution skipped during script recording')\n"]


def _is_control(cell_magics):
    for m in cell_magics or ():
        parts = m.lstrip("%").split(None, 1)
        if parts and parts[0] in CONTROL_MAGICS:
            return True
    return False


def _one_line(code, width):
    """The first non-empty line of `code`, `...` where it is cut."""
    lines = [ln for ln in (code or "").splitlines() if ln.strip()]
    first = lines[0].strip() if lines else ""
    if len(first) > width or len(lines) > 1:
        return first[:width - 3] + "..." if len(first) > width - 3 else first + " ..."
    return first


def _missing(v):
    try:
        import pandas as pd

        return v is None or v is pd.NA or (isinstance(v, float) and v != v)
    except ImportError:
        return v is None


def load_dataframe(path, required, what):
    """A CSV or JSON file (by its suffix) with the columns `required` (JUmPER's check)."""
    import pandas as pd

    fmt = os.path.splitext(path)[1].lower().lstrip(".")
    readers = {"csv": pd.read_csv, "json": pd.read_json}
    if fmt not in readers:
        raise UsageError(f"{path}: unsupported format '{fmt}' for {what} (expected .csv or "
                         ".json)")
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    try:
        df = readers[fmt](path)
    except Exception as e:  # pandas' parser errors
        raise UsageError(f"{path}: cannot read {what} ({str(e).splitlines()[0]})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise UsageError(f"{path}: not {what}: missing the columns {', '.join(missing)} "
                         f"(expected {', '.join(required)})")
    return df


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
    magics.drop_transformer = DropCellTransformer(magics)
    ipython.input_transformer_manager.cleanup_transforms.append(magics.drop_transformer)
    _loaded[ipython] = magics
    import atexit

    atexit.register(_stop_at_exit, magics)  # join the sampling thread before the interpreter ends
    return magics


def _stop_at_exit(magics):
    for lp in magics.live_plots:
        lp.stop()
    if magics.monitor is not None:
        magics.monitor.stop()
    if magics.multinode is not None:
        magics.multinode.stop()


def unload(ipython):
    magics = _loaded.pop(ipython, None)
    if magics is None:
        return
    ipython.events.unregister("pre_run_cell", magics.pre_run_cell)
    ipython.events.unregister("post_run_cell", magics.post_run_cell)
    tm = ipython.input_transformer_manager
    if magics.drop_transformer in tm.cleanup_transforms:
        tm.cleanup_transforms.remove(magics.drop_transformer)
    for lp in magics.live_plots:
        lp.stop()
    if magics.monitor is not None:
        magics.monitor.stop()
    if magics.multinode is not None:
        magics.multinode.stop()
