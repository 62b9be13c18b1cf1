"""The live multi-node monitor of the magics: `%perfmonitor_start --monitor slurm_multinode`.

Inside a Slurm allocation (SLURM_JOB_ID set) the kernel keeps its own in-process monitor (the
process level etc., as with every other --monitor) and starts sonde's multi-node head as a child
process:

    sonde record --slurm-job $SLURM_JOB_ID --interval I --out DIR

which starts one agent per node of the job through srun (docs/multinode.md) and writes the run
directory DIR: nodes/<node>/perf_<level>.csv per node and the aggregate perf_<level>.csv (levels
slurm and system). The files grow while the head runs; the reports and plots with --node read
what is there (LiveMultinode.snapshot). %perfmonitor_stop sends the head SIGINT: it closes its
agents, writes the manifest (complete) and exits.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from .session import StoredData, UsageError, _read_frame

LEVELS = ("process", "user", "slurm", "system")

START_TIMEOUT_S = 40.0  # the head waits up to 30 s for its agents' ready lines
STOP_TIMEOUT_S = 30.0  # the head gives its agents 5 s, then SIGTERM and SIGKILL


def sonde_binary():
    """The sonde executable the head runs: $SONDE_BINARY, else the one this package belongs to
    (SONDE_EXECUTABLE, set by the package on import), else `sonde` on PATH."""
    for c in (os.environ.get("SONDE_BINARY"), os.environ.get("SONDE_EXECUTABLE"),
              shutil.which("sonde")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise UsageError("--monitor slurm_multinode: the sonde executable was not found (set "
                     "SONDE_BINARY to its path); nothing was started")


def default_out(job):
    return os.path.abspath(time.strftime(f"sonde-slurm-{job}-%Y%m%d-%H%M%S"))


class LiveMultinode:
    """A running (or ended) `sonde record --slurm-job` head and its run directory."""

    def __init__(self, job, interval, out=None, levels=None):
        self.job = job
        self.interval = float(interval)
        self.directory = os.path.abspath(out) if out else default_out(job)
        if os.path.lexists(self.directory):
            raise UsageError(f"--out: {self.directory} already exists; choose another "
                             "directory (nothing was started)")
        self.argv = [sonde_binary(), "record", "--slurm-job", str(job), "--interval",
                     repr(self.interval), "--out", self.directory]
        if levels:
            self.argv += ["--levels", levels]
        self.proc = None
        self.log = None  # the head's stderr (warnings, its summary)
        self._shown = 0  # bytes of it whose messages were shown
        self.stopped = False  # stop() was called (the summary was shown)
        self._snapshot = None
        self._snapshot_key = None

    # Control --------------------------------------------------------------------------------
    def start(self, timeout=START_TIMEOUT_S):
        """Starts the head and waits until its agents are ready (the manifest lists nodes) or it
        ends (its stderr becomes the error)."""
        self.log = tempfile.TemporaryFile(mode="w+b", prefix="sonde-head-")
        # Its own session: a kernel interrupt (SIGINT to the kernel) does not end it; stop() does.
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=self.log,
                                     start_new_session=True, close_fds=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                lines = self.stderr().strip().splitlines()
                errors = [ln for ln in lines if ln.startswith("sonde: error: ")] or lines
                msg = "; ".join(ln.removeprefix("sonde: error: ") for ln in errors) or \
                    f"exit status {self.proc.returncode}"
                raise UsageError(f"--monitor slurm_multinode: the multi-node head "
                                 f"(sonde record --slurm-job {self.job}) did not start: {msg}")
            if self.nodes_listed():
                return self
            time.sleep(0.05)
        self.stop()
        raise UsageError(f"--monitor slurm_multinode: no agent of job {self.job} said ready "
                         f"within {timeout:g} s; the head was stopped ({self.stderr().strip()})")

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGINT to the head (it ends its agents, completes the run directory, exits); SIGTERM
        and SIGKILL if it does not within `timeout`. Returns its exit status."""
        if self.proc is None:
            return None
        self.stopped = True
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0),
                          (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        return self.proc.wait()

    def stderr(self):
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def new_messages(self):
        """The head's warnings and errors (a node lost, an agent's error) not shown yet."""
        if self.log is None:
            return []
        self.log.seek(self._shown)
        data = self.log.read()
        end = data.rfind(b"\n") + 1  # whole lines only
        self._shown += end
        lines = data[:end].decode("utf-8", "replace").splitlines()
        return [ln for ln in lines if ln.startswith(("sonde: warning", "sonde: error",
                                                     "sonde: agents:"))]

    def summary_text(self):
        """The head's multi-node summary (its stderr from `sonde multi-node summary` on)."""
        err = self.stderr()
        i = err.find("sonde multi-node summary")
        return err[i:].rstrip() if i >= 0 else ""

    # Data -----------------------------------------------------------------------------------
    def manifest_path(self):
        return os.path.join(self.directory, "manifest.json")

    def nodes_listed(self):
        try:
            with open(self.manifest_path()) as f:
                m = json.load(f)
        except (OSError, ValueError):
            return False
        return bool(m.get("nodes")) and bool(m.get("levels"))

    def _key(self):
        """What changed since the last snapshot: the sizes and times of the run's files."""
        key = []
        for root, _dirs, files in os.walk(self.directory):
            for name in sorted(files):
                try:
                    st = os.stat(os.path.join(root, name))
                except OSError:
                    continue
                key.append((root, name, st.st_size, st.st_mtime_ns))
        return tuple(sorted(key))

    def snapshot(self):
        """The run directory as it is now (a StoredData with its nodes): read again when a file
        grew. The last row of a file being written may be cut: it is skipped."""
        key = self._key()
        if self._snapshot is not None and key == self._snapshot_key:
            return self._snapshot
        data = LiveRunData.read(self.directory)
        data.source = f"{self.directory} (multi-node, job {self.job})"
        self._snapshot, self._snapshot_key = data, key
        return data


class LiveRunData(StoredData):
    """A multi-node run directory that may still grow: the aggregate is read at once, a node's
    files only when that node is asked for (a job of many nodes: one node's files per report)."""

    @classmethod
    def read(cls, directory):
        mpath = os.path.join(directory, "manifest.json")
        try:
            with open(mpath) as f:
                manifest = json.load(f)
        except FileNotFoundError:
            raise UsageError(f"the multi-node head has not written {mpath} yet") from None
        except ValueError as e:
            raise UsageError(f"{mpath}: malformed JSON ({e})") from None
        files = manifest.get("files") or {}
        frames = {}
        for level in manifest.get("levels") or []:
            fpath = os.path.join(directory, files.get(level, f"perf_{level}.csv"))
            if os.path.isfile(fpath):
                frames[level] = _read_frame(fpath)
        if not frames:
            raise UsageError(f"the multi-node run {directory} has no rows yet; try again in a "
                             "moment")
        entries = manifest.get("nodes") or []
        nodes = {}
        for e in entries:
            name = e.get("name") if isinstance(e, dict) else None
            if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
                raise UsageError(f"{mpath}: `nodes`: expected objects with a `name` that is a "
                                 f"plain file name, got {json.dumps(e)[:80]}")
            nodes[name] = (e, None)  # frames read on demand (node())
        return cls(directory, manifest, frames, None, nodes)

    def _node_frames(self, name):
        entry, frames = self._nodes[name]
        if frames is None:
            frames = {}
            for level in LEVELS:
                fpath = os.path.join(self.directory, "nodes", name, f"perf_{level}.csv")
                if os.path.isfile(fpath):
                    frames[level] = _read_frame(fpath)
            self._nodes[name] = (entry, frames)
        return frames

    def node(self, name):
        self._node_frames(name)
        return super().node(name)

    def node_rows(self, name):
        """How many rows the node's files hold now (the manifest counts at the end only)."""
        rows = 0
        for level in LEVELS:
            fpath = os.path.join(self.directory, "nodes", name, f"perf_{level}.csv")
            try:
                with open(fpath, "rb") as f:
                    rows = max(rows, sum(chunk.count(b"\n") for chunk in
                                         iter(lambda: f.read(1 << 20), b"")) - 1)
            except OSError:
                continue
        return rows
