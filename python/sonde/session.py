"""Cell history, the data behind reports and plots (a live Monitor or an imported session), and
session export/import.

A session on disk is a sonde run directory (src/sinks/csv_run_dir.cpp): manifest.json, one
perf_<level>.csv per level (header `time,wallclock,<columns>`, NaN as an empty field), plus
cell_history.csv (`index,start_wallclock,end_wallclock,code`, RFC 4180 quoting; `index` is the
cell_index), so that `sonde report DIR` reads it too; the cells' execution counts are the
manifest's `cell_execution_counts` (a list in the order of cell_history.csv, null where a cell had
none), which keeps cell_history.csv as every sonde reads it. A .zip holds the same files at its
root.
"""

import csv
import io
import json
import math
import os
import re
import stat as _stat
import tempfile
import time
import zipfile
from dataclasses import dataclass

CELL_COLUMNS = ["index", "start_wallclock", "end_wallclock", "code"]
# The cell history as JUmPER's magics export it (%perfmonitor_export_cell_history, the DataFrame
# cell_history_df): cell_index is the cell's position in the history (0, 1, ...; every executed
# cell counts, magic cells too), start_time/end_time are time.perf_counter() (the clock of the
# perfdata `time` column), the wall-clock times follow; cell_magics lists the line magics called.
JUMPER_CELL_COLUMNS = ["cell_index", "raw_cell", "start_time", "end_time", "duration",
                       "wallclock_start_time", "wallclock_end_time", "cell_magics"]
# sonde's cell history DataFrame: JUmPER's columns, then IPython's execution count (the n of
# `In [n]`; <NA> for a cell without one, as a `with service.monitored():` block).
CELL_HISTORY_COLUMNS = JUMPER_CELL_COLUMNS + ["execution_count"]
# --cell In[7] (also `In [7]`, `in[7]`): a cell by its execution count.
_EXEC_COUNT = re.compile(r"in\s*\[\s*(\d+)\s*\]", re.IGNORECASE)


def label(cell):
    """`[1] (In [3])`: a cell's cell_index and, when it has one, its execution count."""
    n = cell.execution_count
    return f"[{cell.index}]" + (f" (In [{n}])" if n is not None else "")


class UsageError(Exception):
    """Bad input to a magic: shown as one line, without a traceback."""


@dataclass
class CellRecord:
    index: int  # JUmPER's cell_index: the position in the history (0 for the first cell)
    start_wallclock: float
    end_wallclock: float
    code: str
    start_time: float = math.nan  # time.perf_counter() (CLOCK_MONOTONIC, the perfdata `time`)
    end_time: float = math.nan
    cell_magics: tuple = ()
    execution_count: int = None

    @property
    def duration(self):
        return self.end_wallclock - self.start_wallclock


class CellHistory:
    """Executed cells with their wall-clock start and end (pre_run_cell / post_run_cell)."""

    def __init__(self, cells=None):
        self.cells = list(cells or [])
        self._pending = None  # (start, code) of the cell being run

    def __len__(self):
        return len(self.cells)

    def start(self, code, wallclock=None, magics=()):
        self._pending = (time.time() if wallclock is None else wallclock, code,
                         time.perf_counter(), tuple(magics))

    def finish(self, execution_count=None, wallclock=None):
        if self._pending is None:
            return None
        start, code, start_perf, magics = self._pending
        self._pending = None
        index = (self.cells[-1].index + 1) if self.cells else 0
        rec = CellRecord(index, start, time.time() if wallclock is None else wallclock, code,
                         start_perf, time.perf_counter(), magics,
                         None if execution_count is None else int(execution_count))
        self.cells.append(rec)
        return rec

    def numbering(self):
        """`cell indices 0..7; execution counts In [2]..In [9]` (for messages)."""
        if not self.cells:
            return "no cells"
        out = f"cell indices {self.cells[0].index}..{self.cells[-1].index}"
        counts = [c.execution_count for c in self.cells if c.execution_count is not None]
        if counts:
            out += f"; execution counts In [{min(counts)}]..In [{max(counts)}]"
        return out

    def by_count(self, n, side):
        """The cell_index of the cell that ran as In [n] (side "="), of the first cell that ran
        at In [n] or later (">="), of the last at In [n] or earlier ("<=")."""
        with_counts = [c for c in self.cells if c.execution_count is not None]
        if not with_counts:
            raise UsageError(f"--cell In[{n}]: no cell of this history has an execution count "
                             f"(address them by cell_index: {self.numbering()})")
        if side == "=":
            found = [c for c in with_counts if c.execution_count == n]
            if not found:
                raise UsageError(f"--cell In[{n}]: no recorded cell ran as In [{n}] "
                                 f"({self.numbering()}; %show_cell_history lists them)")
            return found[-1].index
        if side == ">=":
            found = [c for c in with_counts if c.execution_count >= n]
            if not found:
                raise UsageError(f"--cell: In[{n}] is beyond the last cell ({self.numbering()})")
            return found[0].index
        found = [c for c in with_counts if c.execution_count <= n]
        if not found:
            raise UsageError(f"--cell: In[{n}] is before the first recorded cell "
                             f"({self.numbering()})")
        return found[-1].index

    def select(self, spec):
        """Cells addressed as JUmPER's parser does (core/parsers.py parse_cell_range): `5` (the
        cell with cell_index 5), `2:8` (inclusive), `:5`, `3:`; cell_index is the position in the
        history, from 0. JUmPER refuses negative numbers; sonde reads them (unambiguously) from
        the end: `-1` is the last cell, `-3:` the last three. A bound may also be an execution
        count, `In[7]` (IPython's `In [7]`): `In[7]` is the cell that ran as In [7],
        `In[3]:In[7]` the cells that ran from In [3] to In [7]."""
        spec = (spec or "").strip()
        if not self.cells:
            raise UsageError("no cells have been recorded yet")
        n = len(self.cells)
        last = self.cells[-1].index

        def bound(text, default, side="="):
            text = text.strip()
            if text == "":
                return default
            m = _EXEC_COUNT.fullmatch(text)
            if m:
                return self.by_count(int(m.group(1)), side)
            try:
                v = int(text)
            except ValueError:
                raise UsageError(f"--cell: '{spec}' is not a cell index or range "
                                 "(expected N, A:B, :B or A:; e.g. 5, 2:8, :5, 3:, or an "
                                 "execution count In[7], In[3]:In[7])") from None
            if v < 0:
                if -v > n:
                    raise UsageError(f"--cell: {v} reaches before the first recorded cell "
                                     f"({n} recorded)")
                return self.cells[v].index
            return v

        if ":" in spec:
            a, _, b = spec.partition(":")
            if ":" in b:
                raise UsageError(f"--cell: '{spec}' has more than one ':' (expected A:B)")
            lo, hi = bound(a, self.cells[0].index, ">="), bound(b, last, "<=")
        else:
            if spec == "":
                raise UsageError("--cell: expected a cell index or range")
            lo = hi = bound(spec, None)
        if lo > hi:
            raise UsageError(f"--cell: empty range '{spec}' (start {lo} is after end {hi})")
        if hi > last:
            raise UsageError(f"--cell: '{spec}' is beyond the last cell ({self.numbering()}; "
                             "--cell In[n] takes an execution count)")
        chosen = [c for c in self.cells if lo <= c.index <= hi]
        if not chosen:
            raise UsageError(f"--cell: no recorded cell in '{spec}' ({self.numbering()})")
        return chosen

    def last_long_cell(self, min_duration):
        """JUmPER's default for a report: the last cell that ran at least `min_duration`
        (the sampling interval), or None."""
        for c in reversed(self.cells):
            if c.duration >= min_duration:
                return c
        return None

    def dataframe(self):
        """JUmPER's cell history DataFrame (JUMPER_CELL_COLUMNS), then the execution count
        (CELL_HISTORY_COLUMNS; Int64, <NA> for none). A cell read back from a run directory has
        no perf_counter times: start_time/end_time are then its wall-clock times (duration
        stays right)."""
        import pandas as pd

        rows = []
        for c in self.cells:
            st = c.start_time if math.isfinite(c.start_time) else c.start_wallclock
            et = c.end_time if math.isfinite(c.end_time) else c.end_wallclock
            rows.append((c.index, c.code, st, et, et - st, c.start_wallclock, c.end_wallclock,
                         list(c.cell_magics), c.execution_count))
        df = pd.DataFrame(rows, columns=CELL_HISTORY_COLUMNS)
        df["execution_count"] = pd.array([c.execution_count for c in self.cells], dtype="Int64")
        return df

    def execution_counts(self):
        """The cells' execution counts in order (None for none): the manifest's
        cell_execution_counts."""
        return [c.execution_count for c in self.cells]

    def export(self, path):
        """%perfmonitor_export_cell_history --file: JSON (a list of records) for .json, CSV for
        .csv; a name without a suffix gets `.csv` (as JUmPER). Returns the path written."""
        import json as _json

        fmt = os.path.splitext(path)[1].lower().lstrip(".")
        if not fmt:
            path, fmt = path + ".csv", "csv"
        if fmt not in ("csv", "json"):
            raise UsageError(f"--file: unsupported format '{fmt}' (expected .csv or .json)")
        df = self.dataframe()
        if fmt == "json":
            records = df.to_dict("records")
            for r, c in zip(records, self.cells):
                r["execution_count"] = c.execution_count  # null, not pandas' <NA>
            with open(path, "w") as f:
                _json.dump(records, f, indent=2)
        else:
            df.to_csv(path, index=False)
        return path

    def write_csv(self, path):
        with open(path, "w", newline="") as f:
            self.write_csv_to(f)

    def write_csv_to(self, f):
        w = csv.writer(f, lineterminator="\n")
        w.writerow(CELL_COLUMNS)
        for c in self.cells:
            w.writerow([c.index, f"{c.start_wallclock:.6f}", f"{c.end_wallclock:.6f}", c.code])

    @classmethod
    def read_csv(cls, path, execution_counts=None):
        """Reads cell_history.csv (sonde's columns, or JUmPER's cell_index, raw_cell,
        wallclock_start_time, wallclock_end_time, and sonde's execution_count when there).
        `execution_counts`: the manifest's cell_execution_counts, one per row (sonde's columns
        have none; a session exported before they were stored has no execution counts)."""
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields = reader.fieldnames or []
            if set(CELL_COLUMNS) <= set(fields):
                names = CELL_COLUMNS
            elif {"cell_index", "raw_cell", "wallclock_start_time",
                  "wallclock_end_time"} <= set(fields):
                names = ["cell_index", "wallclock_start_time", "wallclock_end_time", "raw_cell"]
            else:
                raise UsageError(f"{path}: expected the columns {','.join(CELL_COLUMNS)}, "
                                 f"got {','.join(fields)}")
            cells, stored = [], []
            for line, row in enumerate(reader, start=2):
                try:
                    stored.append(int(float(row[names[0]])))
                    count = (row.get("execution_count") or "").strip()
                    cells.append(CellRecord(len(cells), float(row[names[1]]),
                                            float(row[names[2]]), row[names[3]] or "",
                                            execution_count=int(float(count)) if count
                                            else None))
                except (TypeError, ValueError):
                    raise UsageError(f"{path}:{line}: expected a cell number and two "
                                     "wall-clock times") from None
        if names is CELL_COLUMNS and execution_counts is None and stored != list(range(len(cells))):
            # A session exported before the magics numbered cells as JUmPER (cell_index): its
            # `index` column holds the execution counts.
            execution_counts = stored
        if isinstance(execution_counts, list) and len(execution_counts) == len(cells):
            for c, n in zip(cells, execution_counts):
                c.execution_count = int(n) if isinstance(n, (int, float)) and \
                    not isinstance(n, bool) and math.isfinite(n) else None
        return cls(cells)


def format_number(v):
    """As sonde's CSV writer (sinks/format.cpp): 10 significant digits, NaN as empty."""
    if v is None or not math.isfinite(v):
        return ""
    return f"{v:.10g}"


class LiveData:
    """The data of a running (or stopped) Monitor."""

    def __init__(self, monitor):
        self.monitor = monitor
        self.source = "live"

    @property
    def levels(self):
        return self.monitor.levels

    def frame(self, level):
        return self.monitor.samples(level)

    def manifest(self):
        return self.monitor.manifest()

    @property
    def interval(self):
        return self.monitor.interval

    def summarize_native(self, window, cells):
        return self.monitor.summarize(window, cells)


AGGREGATE_NAMES = ("aggregate", "<aggregated>", "aggregated", "all")


def is_aggregate(node):
    """Whether a --node value names a multi-node run's aggregate (JUmPER's `<Aggregated>`)."""
    return node is None or str(node).strip().lower() in AGGREGATE_NAMES


def node_manifest(manifest, entry, levels):
    """One node's manifest, as sonde's readers build it (core/stored_run.hpp node_manifest)."""
    m = {k: v for k, v in manifest.items() if k not in ("nodes", "multinode", "files", "summary")}
    offset = float(entry.get("clock_offset_s") or 0)
    m["host"] = entry.get("name", "")
    m["node_info"] = entry.get("node_info") or {}
    for k in ("start_wallclock", "end_wallclock"):
        if isinstance(m.get(k), (int, float)):
            m[k] = m[k] + offset
    m["node"] = entry
    m["levels"] = list(levels)
    return m


class StoredData:
    """The data of an imported session directory (or stored run). A multi-node run also has
    `nodes` (their names) and node(name), the data of one node."""

    def __init__(self, directory, manifest, frames, tmpdir=None, nodes=None, node_name=None):
        self.directory = directory
        self._manifest = manifest
        self._frames = frames
        self._tmpdir = tmpdir  # kept alive for a .zip
        self._nodes = nodes or {}  # name -> (manifest entry, {level: frame})
        self.node_name = node_name  # set on the data of one node
        self.source = directory if node_name is None else f"{directory} node {node_name}"

    @property
    def levels(self):
        return list(self._frames)

    def frame(self, level):
        return self._frames[level].copy()

    def manifest(self):
        return self._manifest

    @property
    def interval(self):
        return float(self._manifest.get("interval", 0) or 0)

    @property
    def nodes(self):
        return list(self._nodes)

    def node(self, name):
        """The data of node `name`: its own rows, `wallclock` moved onto the head's clock (minus
        the node's clock offset) so that cells and windows compare."""
        entry, frames = self._nodes[name]
        offset = float(entry.get("clock_offset_s") or 0)
        shifted = {}
        for level, df in frames.items():
            df = df.copy()
            df["wallclock"] = df["wallclock"] - offset
            shifted[level] = df
        manifest = node_manifest(self._manifest, entry, list(frames))
        # On the head's clock, as the frames.
        for k in ("start_wallclock", "end_wallclock"):
            if isinstance(manifest.get(k), (int, float)):
                manifest[k] = manifest[k] - offset
        return StoredData(self.directory, manifest, shifted, self._tmpdir, None, name)

    def summarize_native(self, window, cells):
        from . import _native

        if self.node_name is None:
            return _native.summarize_dir(self.directory, window)
        # The node's rows are on its own clock in the files: the window moves there.
        offset = float((self._manifest.get("node") or {}).get("clock_offset_s") or 0)
        if window is not None:
            window = (window[0] + offset, window[1] + offset)
        # An extension without node= raises TypeError: the caller falls back to the Python
        # summary (report.summarize_py).
        return _native.summarize_dir(self.directory, window, self.node_name)


def _open_new(directory, name):
    """A new file in `directory`, as sonde's C++ writers create them (src/core/fs.hpp): O_EXCL and
    O_NOFOLLOW, so an entry someone planted (a link to another file) is an error, never
    written through."""
    fd = os.open(os.path.join(directory, name),
                 os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "w", newline="")


def _check_output_dir(directory):
    """The directory must be a real directory (not a link) owned by the user or root."""
    st = os.lstat(directory)
    if _stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{directory} is a symbolic link; give the directory itself")
    if not _stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{directory} is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise UsageError(f"refusing to write into {directory}: it is owned by uid {st.st_uid}, "
                         f"not by you or root")


def export_session(data, history, path):
    """Writes a session directory (or a .zip when `path` ends in .zip); returns the path."""
    path = os.fspath(path)
    if path.endswith(".zip"):
        parent = os.path.dirname(path) or "."
        _check_output_dir(parent)
        with tempfile.TemporaryDirectory(prefix="sonde-session-") as tmp:
            _write_dir(data, history, tmp)
            # A temporary file with an unpredictable name (mkstemp: O_EXCL), renamed over the
            # target: a link at `path` is replaced, never followed.
            fd, part = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp",
                                        dir=parent)
            try:
                with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
                    for name in sorted(os.listdir(tmp)):
                        z.write(os.path.join(tmp, name), name)
                os.chmod(part, 0o644)
                os.replace(part, path)
            except BaseException:
                try:
                    os.unlink(part)
                except FileNotFoundError:
                    pass
                raise
        return path
    if os.path.lexists(os.path.join(path, "manifest.json")):
        raise UsageError(f"{path} already holds a session (manifest.json); choose another name")
    os.makedirs(path, exist_ok=True)
    _check_output_dir(path)
    _write_dir(data, history, path)
    return path


def _write_dir(data, history, directory):
    manifest = dict(data.manifest())
    files = {}
    ticks = 0
    for level in data.levels:
        cols, values = _level_rows(data, level)
        name = f"perf_{level}.csv"
        files[level] = name
        ticks = max(ticks, len(values))
        buf = io.StringIO()
        buf.write(",".join(cols) + "\n")
        wi = cols.index("wallclock")
        for row in values:
            buf.write(",".join(f"{v:.6f}" if i == wi else format_number(v)
                               for i, v in enumerate(row)) + "\n")
        with _open_new(directory, name) as f:
            f.write(buf.getvalue())
    manifest["files"] = files
    manifest.setdefault("mode", "jupyter")
    manifest["ticks"] = ticks
    manifest.setdefault("end_wallclock", time.time())
    if manifest.get("end_wallclock") is None:
        manifest["end_wallclock"] = time.time()
    manifest.setdefault("exit_status", None)
    manifest["complete"] = True
    manifest["cells"] = len(history)
    manifest["cell_history"] = "cell_history.csv"
    # The execution counts (In [n]) of the rows of cell_history.csv: in the manifest, so that
    # cell_history.csv keeps the four columns every sonde reads.
    manifest["cell_execution_counts"] = history.execution_counts()
    with _open_new(directory, "cell_history.csv") as f:
        history.write_csv_to(f)
    with _open_new(directory, "manifest.json") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def _level_rows(data, level):
    """A level's column names and rows (floats). A live monitor's come from the engine's
    buffer without pandas: the wrapper kernel saves its session within the few seconds a
    restarting front end waits (sonde.wrapper), pandas' import alone can take longer."""
    monitor = getattr(data, "monitor", None)
    if monitor is not None and hasattr(monitor, "samples_array"):
        return ["time", "wallclock"] + monitor.columns(level), monitor.samples_array(level)
    df = data.frame(level)
    return list(df.columns), df.to_numpy(dtype=float)


def import_session(path):
    """Reads a session directory or .zip: returns (StoredData, CellHistory)."""
    import pandas as pd

    path = os.fspath(path)
    tmp = None
    directory = path
    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file or directory")
    if os.path.isfile(path):
        if not zipfile.is_zipfile(path):
            raise UsageError(f"{path}: expected a session directory or a .zip archive")
        tmp = tempfile.TemporaryDirectory(prefix="sonde-session-")
        with zipfile.ZipFile(path) as z:
            for member in z.namelist():
                if member.startswith("/") or ".." in member.split("/"):
                    raise UsageError(f"{path}: refusing the archive member {member!r}")
            z.extractall(tmp.name)
        directory = tmp.name
        entries = os.listdir(directory)
        if "manifest.json" not in entries and len(entries) == 1 and \
                os.path.isdir(os.path.join(directory, entries[0])):
            directory = os.path.join(directory, entries[0])
    mpath = os.path.join(directory, "manifest.json")
    if not os.path.exists(mpath):
        raise UsageError(f"{path}: no manifest.json (not a sonde session or run directory)")
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except json.JSONDecodeError as e:
        raise UsageError(f"{mpath}:{e.lineno}: malformed JSON ({e.msg})") from None
    levels = manifest.get("levels") or []
    files = manifest.get("files") or {}
    frames = {}
    for level in levels:
        fpath = os.path.join(directory, files.get(level, f"perf_{level}.csv"))
        if not os.path.exists(fpath):
            continue
        try:
            df = pd.read_csv(fpath, on_bad_lines="skip")
        except Exception as e:  # pandas' parser errors
            raise UsageError(f"{fpath}: cannot read ({e})") from None
        if "wallclock" not in df.columns:
            raise UsageError(f"{fpath}: expected a 'wallclock' column")
        frames[level] = df.astype(float)
    if not frames:
        raise UsageError(f"{path}: no perf_<level>.csv files")
    nodes = _read_nodes(directory, manifest, mpath)
    hpath = os.path.join(directory, "cell_history.csv")
    history = CellHistory.read_csv(hpath, manifest.get("cell_execution_counts")) \
        if os.path.exists(hpath) else CellHistory()
    return StoredData(directory, manifest, frames, tmp, nodes), history


def _read_frame(fpath):
    import pandas as pd

    try:
        df = pd.read_csv(fpath, on_bad_lines="skip")
    except Exception as e:  # pandas' parser errors
        raise UsageError(f"{fpath}: cannot read ({e})") from None
    if "wallclock" not in df.columns:
        raise UsageError(f"{fpath}: expected a 'wallclock' column")
    return df.astype(float)


def _read_nodes(directory, manifest, mpath):
    """A multi-node run's nodes (manifest `nodes`): name -> (entry, {level: frame}) from
    nodes/<name>/perf_<level>.csv. A node that is not complete may lack its files."""
    entries = manifest.get("nodes")
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise UsageError(f"{mpath}: `nodes`: expected a list of nodes")
    nodes = {}
    for e in entries:
        name = e.get("name") if isinstance(e, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise UsageError(f"{mpath}: `nodes`: expected objects with a `name` that is a plain "
                             f"file name, got {json.dumps(e)[:80]}")
        complete = e.get("status", "complete") == "complete"
        listed = e.get("columns_by_level") or {}
        frames = {}
        for level in ("process", "user", "slurm", "system"):
            fpath = os.path.join(directory, "nodes", name, f"perf_{level}.csv")
            if not os.path.isfile(fpath):
                if level in listed and complete:
                    raise UsageError(f"{fpath}: missing: the node {name} has the level {level} "
                                     f"in {mpath}")
                continue
            frames[level] = _read_frame(fpath)
        nodes[name] = (e, frames)
    return nodes
