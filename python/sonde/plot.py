"""Time-series plots of a session: one panel per metric, cells drawn as spans, with matplotlib
(Agg canvas, shown as PNG) or plotly (JUmPER's default backend); the interactive plot widget
(ipywidgets) and live plots that redraw while other cells run.
"""

import io
import os

from .session import UsageError

# JUmPER's metric keys: a summary key plots avg with the min..max band.
SUMMARY_KEYS = {
    "cpu_summary": "cpu_util",
    "gpu_util_summary": "gpu_util",
    "gpu_band_summary": "gpu_band",
    "gpu_mem_summary": "gpu_mem",
}
UNITS = {"cpu_util": "%", "gpu_util": "%", "gpu_band": "%", "gpu_mem": "GiB", "memory": "GiB",
         "io_read": "B/s", "io_write": "B/s", "io_read_count": "ops/s",
         "io_write_count": "ops/s", "net_bytes_sent": "B/s", "net_bytes_recv": "B/s"}


def available_metrics(frame):
    cols = [c for c in frame.columns if c not in ("time", "wallclock")]
    keys = [k for k, base in SUMMARY_KEYS.items() if f"{base}_avg" in cols]
    return keys + cols


def default_metrics(frame):
    out = [m for m in ("cpu_summary", "memory", "gpu_util_summary", "gpu_mem_summary")
           if m in available_metrics(frame)]
    return out or available_metrics(frame)[:2]


def resolve_metrics(frame, metrics):
    if not metrics:
        return default_metrics(frame)
    avail = available_metrics(frame)
    out = []
    for m in metrics:
        if m not in avail:
            raise UsageError(f"--metrics: unknown metric '{m}' at this level (available: "
                             f"{', '.join(avail[:40])}{', ...' if len(avail) > 40 else ''})")
        out.append(m)
    return out


def _prepare(frame, metrics, cells, window, compress):
    """The metrics, rows, x axis and cell spans both backends draw."""
    metrics = resolve_metrics(frame, metrics)
    df = select_rows(frame, window)
    if len(df) == 0:
        raise UsageError("no samples to plot in this range (the monitor has not sampled yet, "
                         "or the cells ran while it was stopped)")
    df, x, spans = _axis(df, cells, window, compress)
    if len(df) == 0:
        raise UsageError("no samples inside these cells (they ran for less than an interval)")
    return metrics, df, x, spans


def make_figure(frame, metrics, cells, level, window=None, title=None, compress=False):
    """Returns a matplotlib Figure (Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics, df, x, spans = _prepare(frame, metrics, cells, window, compress)
    fig = Figure(figsize=(8, 2.2 * len(metrics) + 0.6), constrained_layout=True)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(metrics), 1, sharex=True, squeeze=False)[:, 0]
    for ax, m in zip(axes, metrics):
        if m in SUMMARY_KEYS:
            base = SUMMARY_KEYS[m]
            ax.plot(x, df[f"{base}_avg"], label=f"{base}_avg", color="tab:blue")
            if f"{base}_min" in df and f"{base}_max" in df:
                ax.fill_between(x, df[f"{base}_min"], df[f"{base}_max"], alpha=0.2,
                                color="tab:blue", label="min..max")
            unit = UNITS.get(base, "")
            ax.set_ylabel(f"{base} ({unit})" if unit else base)
        else:
            ax.plot(x, df[m], label=m, color="tab:green")
            unit = UNITS.get(m, "")
            ax.set_ylabel(f"{m} ({unit})" if unit else m)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right", fontsize="small")
        for i, (lo, hi, c) in enumerate(spans):
            if hi < x[0] or lo > x[-1]:
                continue
            ax.axvspan(lo, hi, color="tab:orange" if i % 2 else "tab:gray", alpha=0.12)
            if ax is axes[0]:
                ax.text((lo + hi) / 2, 1.0, f"[{c.index}]", transform=ax.get_xaxis_transform(),
                        ha="center", va="bottom", fontsize="small")
    axes[-1].set_xlabel("seconds")
    fig.suptitle(title or f"sonde: {level} level")
    return fig


def figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


def save_jpeg(fig, path):
    fig.savefig(path, format="jpeg", dpi=100)


# Cells and the time axis ----------------------------------------------------------------------

def _axis(df, cells, window, compress):
    """x values (seconds) for the rows of `df` and the (lo, hi, cell) spans to shade.

    compress=False: seconds since the window's (or the first row's) start, idle time between
    cells included. compress=True (JUmPER's default, "Show idle periods" off): only the rows
    inside `cells`, the cells laid end to end, so idle time between them takes no room."""
    import numpy as np

    if not compress or not cells:
        t0 = window[0] if window is not None else float(df["wallclock"].iloc[0])
        x = (df["wallclock"] - t0).to_numpy()
        return df, x, [(c.start_wallclock - t0, c.end_wallclock - t0, c) for c in cells]
    wc = df["wallclock"].to_numpy()
    keep = np.zeros(len(df), dtype=bool)
    x = np.zeros(len(df))
    spans, offset = [], 0.0
    for c in sorted(cells, key=lambda c: c.start_wallclock):
        m = (wc >= c.start_wallclock) & (wc <= c.end_wallclock) & ~keep
        x[m] = offset + (wc[m] - c.start_wallclock)
        keep |= m
        spans.append((offset, offset + c.duration, c))
        offset += c.duration
    return df[keep], x[keep], spans


def select_rows(frame, window):
    if window is None:
        return frame
    return frame[(frame["wallclock"] >= window[0]) & (frame["wallclock"] <= window[1])]


# plotly ----------------------------------------------------------------------------------------

def make_plotly_figure(frame, metrics, cells, level, window=None, title=None, compress=False):
    """The same panels as make_figure with plotly (JUmPER's default backend)."""
    from plotly.subplots import make_subplots
    import plotly.graph_objects as go

    metrics, df, x, spans = _prepare(frame, metrics, cells, window, compress)
    fig = make_subplots(rows=len(metrics), cols=1, shared_xaxes=True, vertical_spacing=0.06)
    shapes, notes = [], []
    for row, m in enumerate(metrics, start=1):
        if m in SUMMARY_KEYS:
            base = SUMMARY_KEYS[m]
            if f"{base}_min" in df and f"{base}_max" in df:
                fig.add_trace(go.Scatter(x=x, y=df[f"{base}_min"], mode="lines",
                                         line=dict(width=0), showlegend=False,
                                         hoverinfo="skip"), row=row, col=1)
                fig.add_trace(go.Scatter(x=x, y=df[f"{base}_max"], mode="lines",
                                         line=dict(width=0), fill="tonexty",
                                         fillcolor="rgba(31,119,180,0.2)",
                                         name=f"{base} min..max"), row=row, col=1)
            fig.add_trace(go.Scatter(x=x, y=df[f"{base}_avg"], mode="lines",
                                     name=f"{base}_avg", line=dict(color="#1f77b4")),
                          row=row, col=1)
            unit = UNITS.get(base, "")
            ylabel = f"{base} ({unit})" if unit else base
        else:
            fig.add_trace(go.Scatter(x=x, y=df[m], mode="lines", name=m), row=row, col=1)
            unit = UNITS.get(m, "")
            ylabel = f"{m} ({unit})" if unit else m
        fig.update_yaxes(title_text=ylabel, row=row, col=1)
        # Cells as shapes, set at once below (add_vrect per cell is quadratic in plotly).
        xref = "x" if row == 1 else f"x{row}"
        yref = "y domain" if row == 1 else f"y{row} domain"
        for i, (lo, hi, c) in enumerate(spans):
            if len(x) and (hi < x[0] or lo > x[-1]):
                continue
            shapes.append(dict(type="rect", xref=xref, yref=yref, x0=lo, x1=hi, y0=0, y1=1,
                               fillcolor="orange" if i % 2 else "gray", opacity=0.12,
                               line_width=0, layer="below"))
            if row == 1:
                notes.append(dict(x=(lo + hi) / 2, y=1, xref=xref, yref=yref, text=f"[{c.index}]",
                                  showarrow=False, yanchor="bottom", font=dict(size=10)))
    fig.update_layout(shapes=shapes, annotations=list(fig.layout.annotations) + notes)
    fig.update_xaxes(title_text="seconds", row=len(metrics), col=1)
    fig.update_layout(title=title or f"sonde: {level} level", height=220 * len(metrics) + 120,
                      margin=dict(l=60, r=20, t=60, b=40))
    return fig


def plotly_bundle(fig):
    """The notebook outputs of a plotly figure: JupyterLab's plotly MIME type, HTML (plotly.js
    from its CDN, so the notebook stays small) and a text line."""
    import plotly.io as pio

    return {"application/vnd.plotly.v1+json": fig.to_plotly_json(),
            "text/html": pio.to_html(fig, include_plotlyjs="cdn", full_html=False),
            "text/plain": f"<sonde plot: {len(fig.data)} traces>"}


def render(frame, metrics, cells, level, window, title, backend, compress=False):
    """A figure as notebook outputs ({mime: data}) for `backend` (plotly or matplotlib)."""
    if backend == "plotly":
        return plotly_bundle(make_plotly_figure(frame, metrics, cells, level, window, title,
                                                compress))
    fig = make_figure(frame, metrics, cells, level, window, title, compress)
    return {"image/png": figure_png(fig), "text/plain": f"<sonde plot: {level} level>"}


# The plot widget (ipywidgets) ---------------------------------------------------------------

WIDGET_ENV = "SONDE_PLOT_WIDGET"  # on / off / auto (the default)


def widget_frontend(shell=None):
    """Whether the front end running this kernel draws ipywidgets: (True, "") or (False, why).

    A widget needs a widget manager on the other side of the kernel. There is none in terminal
    IPython (no kernel), nor in nbclient, the engine of `jupyter nbconvert --execute` and
    papermill; Debian 12's nbclient 0.7 even aborts the whole run on the comm_open of Debian's
    ipywidgets 6 (widget protocol 1 sends the state as the message's data, nbclient reads
    data['state']: KeyError: 'state', outside any cell, so --allow-errors does not help).
    A kernel learns little of its front end: ipywidgets 6 records whether a widget manager
    validated its version (Widget._version_validated: True or False; None when nobody asked,
    or when ipywidgets was imported after the front end connected), and every execute request
    says whether the front end takes input: nbclient sends allow_stdin false, the notebook,
    JupyterLab, VS Code and the console true. $SONDE_PLOT_WIDGET=on|off overrides the guess."""
    forced = os.environ.get(WIDGET_ENV, "").strip().lower()
    if forced in ("1", "on", "yes", "true"):
        return True, ""
    if forced in ("0", "off", "no", "false"):
        return False, f"${WIDGET_ENV}={forced}"
    import importlib.util

    if importlib.util.find_spec("ipywidgets") is None:
        return False, "ipywidgets is not installed (Debian: python3-ipywidgets)"
    if shell is None:
        from IPython import get_ipython

        shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    if kernel is None:
        return False, "not in a Jupyter kernel"
    from ipywidgets import Widget

    validated = getattr(Widget, "_version_validated", None)  # ipywidgets < 7
    if validated:
        return True, ""
    if validated is False:
        return False, "the front end's widget manager does not match this ipywidgets"
    if not getattr(kernel, "_allow_stdin", True):
        return False, "a headless run (the front end takes no input: jupyter nbconvert --execute)"
    return True, ""


class PlotWidget:
    """%perfmonitor_plot without --level: JUmPER's interactive plot. A cell-range slider (cell
    indices), "Show idle periods", the level and the metrics; the plot below redraws on every
    change. `frame_of(level)` gives a level's DataFrame, `levels` the levels there are."""

    def __init__(self, frame_of, levels, cells, cell_range, metrics, backend, level=None):
        import ipywidgets as widgets

        self.frame_of, self.cells, self.backend = frame_of, list(cells), backend
        lo, hi = self.cells[0].index, self.cells[-1].index
        self.idle = widgets.Checkbox(value=False, description="Show idle periods")
        self.range = widgets.IntRangeSlider(value=cell_range, min=lo, max=hi, step=1,
                                            description="Cell range:")
        self.level = widgets.Dropdown(options=list(levels), value=level or levels[0],
                                      description="Level:")
        avail = available_metrics(frame_of(self.level.value))
        chosen = [m for m in (metrics or default_metrics(frame_of(self.level.value)))
                  if m in avail]
        self.metrics = widgets.SelectMultiple(options=avail, value=tuple(chosen),
                                              description="Metrics:")
        self.handle = None  # the plot: a display updated in place (no Output widget needed)
        self.error = None
        self.draws = 0
        for w in (self.idle, self.range, self.level, self.metrics):
            w.observe(lambda change: self.update(), names="value")
        self.box = widgets.VBox([
            widgets.HBox([widgets.HTML("<b>Plot Configuration:</b>"), self.idle, self.range]),
            widgets.HBox([self.level, self.metrics])])

    def selected_cells(self):
        a, b = self.range.value
        return [c for c in self.cells if a <= c.index <= b]

    def update(self):
        from IPython.display import display

        cells = self.selected_cells()
        window = (min(c.start_wallclock for c in cells), max(c.end_wallclock for c in cells))
        try:
            bundle = render(self.frame_of(self.level.value), list(self.metrics.value) or None,
                            cells, self.level.value, window,
                            f"sonde: {self.level.value} level, cells "
                            f"{self.range.value[0]}..{self.range.value[1]}", self.backend,
                            compress=not self.idle.value)
            self.error = None
        except UsageError as e:
            self.error = str(e)
            bundle = {"text/plain": f"sonde: {e}"}
        if self.handle is None:
            self.handle = display(bundle, raw=True, display_id=True)
        else:
            self.handle.update(bundle, raw=True)
        self.draws += 1


# Live plots ------------------------------------------------------------------------------------

class LivePlot:
    """%perfmonitor_plot --live [INTERVAL [WINDOW]]: redraws the last WINDOW seconds every
    INTERVAL seconds on a background thread while other cells run; stops with its button (shown
    where the front end draws widgets), with stop(), or after the monitor stops (one last
    frame)."""

    def __init__(self, monitor, history, metrics, level, backend, interval=2.0, window=120.0,
                 button=True):
        import threading

        from IPython.display import display

        if interval <= 0 or window <= 0:
            raise UsageError(f"--live: INTERVAL and WINDOW must be > 0 (got {interval:g}, "
                             f"{window:g})")
        self.monitor, self.history, self.metrics = monitor, history, metrics
        self.level, self.backend = level, backend
        self.interval, self.window = interval, window
        self.frames = 0
        self.last_error = None
        self._stop = threading.Event()
        self.handle = display({"text/plain": "sonde: live plot starting ..."}, raw=True,
                              display_id=True)
        self.button = None
        if button:  # a widget: only where the front end draws widgets (widget_frontend)
            import ipywidgets as widgets

            self.button = widgets.Button(description="Stop Live Update")
            self.button.on_click(lambda _b: self.stop())
            display(self.button)
        self.draw()
        self._thread = threading.Thread(target=self._loop, name="sonde-live-plot", daemon=True)
        self._thread.start()

    def draw(self):
        frame = self.monitor.samples(self.level)
        if len(frame) == 0:
            return False
        end = float(frame["wallclock"].iloc[-1])
        window = (end - self.window, end)
        cells = [c for c in self.history.cells if c.end_wallclock >= window[0]]
        try:
            bundle = render(frame, self.metrics, cells, self.level, window,
                            f"sonde live: {self.level} level, last {self.window:g} s",
                            self.backend)
        except UsageError as e:
            self.last_error = str(e)
            return False
        self.handle.update(bundle, raw=True)
        self.frames += 1
        return True

    def _loop(self):
        while not self._stop.wait(self.interval):
            running = self.monitor.running
            try:
                self.draw()
            except Exception as e:  # noqa: BLE001 - a plot error must not kill the kernel
                self.last_error = str(e)
            if not running:
                break
        self._stop.set()

    @property
    def running(self):
        return not self._stop.is_set()

    def stop(self):
        self._stop.set()
        if self.button is not None:
            self.button.disabled = True
            self.button.description = "Live Update Stopped"
