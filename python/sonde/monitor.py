"""The Python face of sonde's C++ engine: a Monitor whose samples are pandas DataFrames.

The engine samples on its own native thread (absolute monotonic schedule, no GIL); this module
only copies the buffered rows out, as numpy arrays, when asked.
"""

import json
import os
import tempfile

from . import _native

LEVELS = ("process", "user", "slurm", "system")


class Monitor:
    """Samples a process (default: this one) and its surroundings with sonde's engine.

    interval: seconds between ticks (None: the configuration's, 0.5 by default).
    levels: list or comma-separated string of process, user, slurm, system (None: every level
        that applies; slurm only inside a job).
    config: a YAML file merged last over the layered configuration (/etc/sonde/config.yaml,
        $XDG_CONFIG_HOME/sonde/config.yaml, ./sonde.yaml), or a dict with the same keys; plugins
        from the plugin directories are loaded as by the `sonde` command.
    pid: the target process (default: os.getpid(), the kernel).

    Bad levels, intervals or configurations raise ValueError with the configuration's message.
    """

    def __init__(self, interval=None, levels=None, config=None, pid=None):
        if isinstance(levels, (list, tuple)):
            levels = ",".join(levels)
        config_file = ""
        tmp = None
        if isinstance(config, dict):
            # JSON is YAML: the engine's loader reads it (errors name this temporary file).
            tmp = tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="sonde-config-",
                                              delete=False)
            json.dump(config, tmp)
            tmp.close()
            config_file = tmp.name
        elif config is not None:
            config_file = os.fspath(config)
        try:
            self._m = _native.Monitor(pid if pid is not None else os.getpid(),
                                      None if interval is None else float(interval),
                                      levels or "", config_file)
        finally:
            if tmp is not None:
                os.unlink(tmp.name)
        self._frames = {}  # level -> DataFrame cache (rows appended as they come)

    # Control --------------------------------------------------------------------------------
    def start(self):
        """Starts sampling on the native thread (no-op when running)."""
        self._m.start()
        return self

    def stop(self):
        """Stops sampling; the samples stay available."""
        self._m.stop()
        return self

    def retarget(self, pid):
        """Watches `pid` (and its descendants) from now on; the rows so far stay. The wrapper
        kernel (sonde.kernel) follows a wrapped kernel that was started again."""
        self._m.retarget(int(pid))
        return self

    @property
    def running(self):
        return self._m.running

    @property
    def interval(self):
        return self._m.interval

    @property
    def pid(self):
        return self._m.pid

    @property
    def levels(self):
        """The levels sampled, in order."""
        return list(self._m.levels())

    def columns(self, level):
        """The columns of a level's rows (without time and wallclock)."""
        return list(self._m.columns(level))

    @property
    def columns_by_level(self):
        return {lvl: self.columns(lvl) for lvl in self.levels}

    @property
    def node_info(self):
        """CPU counts and handles, memory limits per level, GPUs (as in the run manifest)."""
        return self._m.node_info()

    def manifest(self):
        """The manifest.json a run directory of this monitor has."""
        return self._m.manifest()

    def stats(self):
        """Ticks, missed ticks, the sampling thread's CPU time, collector states."""
        return self._m.stats()

    def warnings(self):
        """Warnings of the engine since the last call (a failing collector, a refused plugin)."""
        return list(self._m.take_warnings())

    def rows(self, level):
        return self._m.rows(self._check(level))

    def _check(self, level):
        if level not in self.levels:
            raise ValueError(f"level '{level}' is not sampled (sampled: {', '.join(self.levels)})")
        return level

    # Data -----------------------------------------------------------------------------------
    def samples_array(self, level, start=0):
        """Rows from `start` as a float64 numpy array: time, wallclock, then the columns."""
        return self._m.samples(self._check(level), start)

    def samples(self, level="process"):
        """Every row of a level so far as a DataFrame (time, wallclock, the level's columns);
        missing values are NaN."""
        import pandas as pd

        self._check(level)
        cached = self._frames.get(level)
        have = 0 if cached is None else len(cached)
        new = self._m.samples(level, have)
        if cached is not None and len(new) == 0:
            return cached.copy()
        cols = ["time", "wallclock"] + self.columns(level)
        df_new = pd.DataFrame(new, columns=cols)
        df = df_new if cached is None else pd.concat([cached, df_new], ignore_index=True)
        self._frames[level] = df
        return df.copy()

    def dataframes(self):
        """{level: DataFrame} for every level."""
        return {lvl: self.samples(lvl) for lvl in self.levels}

    def summarize(self, window=None, cells=()):
        """sonde's summary (src/core/stored_summary.cpp summarize_run) of the rows so far, or of
        the rows whose wallclock lies in `window` = (start, end)."""
        return self._m.summarize(window, [(c.index, c.start_wallclock, c.end_wallclock, c.code)
                                          for c in cells])

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def __del__(self):
        m = getattr(self, "_m", None)
        if m is not None:
            m.stop()
