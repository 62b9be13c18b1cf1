"""Time-series plots of a session with matplotlib: one panel per metric, cells drawn as spans.

Figures are drawn on the Agg canvas (no display needed) and shown in the notebook as PNG.
"""

import io

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


def make_figure(frame, metrics, cells, level, window=None, title=None):
    """Returns a matplotlib Figure (Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics = resolve_metrics(frame, metrics)
    df = frame
    if window is not None:
        df = df[(df["wallclock"] >= window[0]) & (df["wallclock"] <= window[1])]
    if len(df) == 0:
        raise UsageError("no samples to plot in this range (the monitor has not sampled yet, "
                         "or the cells ran while it was stopped)")
    t0 = window[0] if window is not None else float(df["wallclock"].iloc[0])
    x = df["wallclock"] - t0
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
        for i, c in enumerate(cells):
            lo, hi = c.start_wallclock - t0, c.end_wallclock - t0
            if hi < x.iloc[0] or lo > x.iloc[-1]:
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
