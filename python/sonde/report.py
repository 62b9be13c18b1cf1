"""Per-cell and per-session reports: one table (metric, mean, min, max, limit) and bottleneck tags,
as text or HTML.

The figures come from sonde's C++ summarize_run (src/sinks/run_data.cpp, the code behind
`sonde report`) through the extension when the build has it; otherwise from `summarize_py`
below, which applies the same rules (cpu-bound: mean CPU >= 70 % of the CPUs available at the
level; memory-bound: peak memory >= 80 % of the level's limit; GPU tags at 80 %).
"""

import html
import math

GIB = 1024.0 ** 3

# (group label, column, unit, how to get the limit)
_METRICS = [
    ("CPU", "cpu_util_avg", "%", "cpu"),
    ("Memory", "memory", "GiB", "memory"),
    ("GPU util", "gpu_util_avg", "%", "percent"),
    ("GPU memory bandwidth", "gpu_band_avg", "%", "percent"),
    ("GPU memory", "gpu_mem_avg", "GiB", "gpu_memory"),
    ("I/O read", "io_read", "MiB/s", None),
    ("I/O write", "io_write", "MiB/s", None),
    ("I/O read ops", "io_read_count", "ops/s", None),
    ("I/O write ops", "io_write_count", "ops/s", None),
    ("Network sent", "net_bytes_sent", "MiB/s", None),
    ("Network received", "net_bytes_recv", "MiB/s", None),
]
_SCALE = {"io_read": 1 / 2 ** 20, "io_write": 1 / 2 ** 20, "net_bytes_sent": 1 / 2 ** 20,
          "net_bytes_recv": 1 / 2 ** 20}


def _finite(values):
    return [v for v in values if v is not None and math.isfinite(v)]


def summarize_py(frame, manifest, level, window=None):
    """The summary of one level's rows (a DataFrame), or of those with wallclock in window."""
    node = manifest.get("node_info", {}) or {}
    df = frame
    if window is not None:
        lo, hi = window
        df = df[(df["wallclock"] >= lo) & (df["wallclock"] <= hi)]
    n = len(df)
    cpus = float(node.get("num_system_cpus" if level == "system" else "num_cpus", 0) or 0)
    limits = node.get("memory_limits", {}) or {}
    mem_limit = float(limits.get(level, 0) or 0) / GIB
    gpu_mem = float(node.get("gpu_memory_gib", 0) or 0)
    metrics = []
    tags = []
    for label, col, unit, limit_kind in _METRICS:
        if col not in df.columns:
            continue
        vals = _finite(df[col].tolist())
        if not vals:
            if col in ("cpu_util_avg", "memory"):
                metrics.append({"name": label, "column": col, "unit": unit, "mean": None,
                                "min": None, "max": None, "limit": None})
            continue
        scale = _SCALE.get(col, 1.0)
        mean = sum(vals) / len(vals) * scale
        lo, hi = min(vals) * scale, max(vals) * scale
        limit = None
        if limit_kind == "cpu":
            limit = 100.0
        elif limit_kind == "memory":
            limit = mem_limit or None
        elif limit_kind == "percent":
            limit = 100.0
        elif limit_kind == "gpu_memory":
            limit = gpu_mem or None
        m = {"name": label, "column": col, "unit": unit, "mean": mean, "min": lo, "max": hi,
             "limit": limit}
        if col == "cpu_util_avg" and cpus:
            m["mean_cores"] = mean / 100 * cpus
            m["max_cores"] = hi / 100 * cpus
            m["cpus"] = cpus
        metrics.append(m)
        if col == "cpu_util_avg" and mean >= 70:
            tags.append("cpu-bound")
        if col == "memory" and mem_limit > 0 and hi >= 0.8 * mem_limit:
            tags.append("memory-bound")
        if col == "gpu_util_avg" and mean >= 80:
            tags.append("gpu-bound")
        if col == "gpu_mem_avg" and gpu_mem > 0 and hi >= 0.8 * gpu_mem:
            tags.append("gpu-memory-bound")
    duration = None
    if n:
        duration = float(df["wallclock"].iloc[-1] - df["wallclock"].iloc[0])
    if window is not None:
        duration = window[1] - window[0]
    return {"level": level, "rows": n, "duration_s": duration, "metrics": metrics, "tags": tags,
            "engine": "python"}


def from_native(summary, level, window=None):
    """Converts summarize_run's JSON for one level into the table this module renders; None when
    it has no entry for the level."""
    if not isinstance(summary, dict):
        return None
    levels = summary.get("levels")
    entry = None
    if isinstance(levels, dict):
        entry = levels.get(level)
    elif isinstance(levels, list):
        for e in levels:
            if isinstance(e, dict) and e.get("level") == level:
                entry = e
    if entry is None:
        return None
    metrics = []
    groups = entry.get("metrics") or entry.get("groups") or []
    if isinstance(groups, dict):
        groups = [dict(v, name=k) for k, v in groups.items()]
    for g in groups:
        metrics.append({"name": g.get("name") or g.get("label") or g.get("group", "?"),
                        "column": g.get("column", ""), "unit": g.get("unit", ""),
                        "mean": g.get("mean"), "min": g.get("min"), "max": g.get("max"),
                        "limit": g.get("limit")})
    tags = entry.get("tags", summary.get("tags", []))
    rows = entry.get("rows", entry.get("ticks", 0))
    duration = entry.get("duration_s", summary.get("duration_s"))
    if window is not None:
        duration = window[1] - window[0]
    return {"level": level, "rows": rows, "duration_s": duration, "metrics": metrics,
            "tags": list(tags), "engine": "sonde"}


def _fmt(v, unit=""):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if unit in ("GiB",):
        return f"{v:.3f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def title_of(cells, level):
    if not cells:
        return f"sonde report: whole session, {level} level"
    if len(cells) == 1:
        return f"sonde report: cell [{cells[0].index}], {level} level"
    return f"sonde report: cells [{cells[0].index}]..[{cells[-1].index}], {level} level"


def render_text(summary, title):
    lines = [title]
    dur = summary.get("duration_s")
    lines.append(f"duration {dur:.2f} s, {summary['rows']} samples" if dur is not None
                 else f"{summary['rows']} samples")
    if summary["rows"] == 0:
        lines.append("no samples in this range (shorter than the interval, or the monitor was "
                     "not running)")
    header = f"{'metric':<22}{'unit':<8}{'mean':>10}{'min':>10}{'max':>10}{'limit':>10}"
    lines.append(header)
    lines.append("-" * len(header))
    for m in summary["metrics"]:
        lines.append(f"{m['name']:<22}{m['unit']:<8}{_fmt(m['mean'], m['unit']):>10}"
                     f"{_fmt(m['min'], m['unit']):>10}{_fmt(m['max'], m['unit']):>10}"
                     f"{_fmt(m['limit'], m['unit']):>10}")
        if "mean_cores" in m:
            lines.append(f"{'  = CPU cores':<22}{'cores':<8}{_fmt(m['mean_cores']):>10}"
                         f"{'':>10}{_fmt(m['max_cores']):>10}{_fmt(m['cpus']):>10}")
    tags = summary.get("tags") or []
    lines.append("tags: " + (", ".join(tags) if tags else "none"))
    return "\n".join(lines)


def render_html(summary, title):
    e = html.escape
    dur = summary.get("duration_s")
    sub = (f"duration {dur:.2f} s, {summary['rows']} samples" if dur is not None
           else f"{summary['rows']} samples")
    rows = []
    for m in summary["metrics"]:
        rows.append("<tr>" + "".join(
            f"<td>{e(str(x))}</td>" for x in (m["name"], m["unit"])) + "".join(
            f"<td style='text-align:right'>{_fmt(m[k], m['unit'])}</td>"
            for k in ("mean", "min", "max", "limit")) + "</tr>")
        if "mean_cores" in m:
            rows.append(f"<tr><td>&nbsp;&nbsp;= CPU cores</td><td>cores</td>"
                        f"<td style='text-align:right'>{_fmt(m['mean_cores'])}</td><td></td>"
                        f"<td style='text-align:right'>{_fmt(m['max_cores'])}</td>"
                        f"<td style='text-align:right'>{_fmt(m['cpus'])}</td></tr>")
    tags = summary.get("tags") or []
    tag_html = " ".join(f"<span class='sonde-tag' style='background:#c0392b;color:white;"
                        f"padding:1px 6px;border-radius:3px'>{e(t)}</span>" for t in tags) \
        or "<span class='sonde-tag-none'>none</span>"
    empty = ("<p>no samples in this range (shorter than the interval, or the monitor was not "
             "running)</p>" if summary["rows"] == 0 else "")
    return (f"<div class='sonde-report'><b>{e(title)}</b><br><small>{e(sub)}</small>{empty}"
            "<table class='sonde-report-table'><thead><tr><th>metric</th><th>unit</th>"
            "<th>mean</th><th>min</th><th>max</th><th>limit</th></tr></thead><tbody>"
            + "".join(rows) + f"</tbody></table><div>tags: {tag_html}</div></div>")
