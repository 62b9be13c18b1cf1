"""Per-cell and per-session reports: the summary table of `sonde report` (metric groups with mean,
min, max and limit, then totals) for one level, and its bottleneck tags, as text or HTML.

The figures come from sonde's C++ summarize_run (src/core/stored_summary.cpp, the code behind
`sonde report`) through the extension; `summarize_py` below is the same computation in Python
for a build without it (cpu-bound: mean CPU >= 70 % of the CPUs available at the level;
memory-bound: peak memory >= 80 % of the level's limit; gpu-util-bound: mean GPU utilisation
>= 70 %; gpu-memory-bound: peak GPU memory >= 90 % of one device's; gpu-allocated-but-not-used:
GPU memory held, mean utilisation < 10 %). The Python rules approximate the GPU ones from the
level's groups; the C++ summary (used whenever the extension has it) is the reference.
"""

import html
import math

GIB = 1024.0 ** 3

# The summary table of `sonde report` (web/report.js): group key, label, unit.
GROUPS = [("cpu", "CPU utilisation", "%"), ("cpu_cores", "CPU", "cores"),
          ("memory", "Memory", "GiB"), ("gpu_util", "GPU utilisation of the GPUs used", "%"),
          ("gpu_band", "GPU memory bandwidth", "%"), ("gpu_mem", "GPU memory, peak on one GPU",
                                                     "GiB")]
TOTALS = [("read_bytes", "io_read"), ("written_bytes", "io_write"), ("read_ops", "io_read_count"),
          ("write_ops", "io_write_count"), ("net_sent_bytes", "net_bytes_sent"),
          ("net_recv_bytes", "net_bytes_recv"), ("net_sent_packets", "net_packets_sent"),
          ("net_recv_packets", "net_packets_recv")]


def _num(v):
    return v if v is not None and isinstance(v, (int, float)) and math.isfinite(v) else None


def _stat(values, dts):
    vals = [(v, dt) for v, dt in zip(values, dts) if v is not None and math.isfinite(v)]
    if not vals:
        return {"count": 0, "mean": None, "min": None, "max": None, "integral": 0.0}
    xs = [v for v, _ in vals]
    return {"count": len(xs), "mean": sum(xs) / len(xs), "min": min(xs), "max": max(xs),
            "integral": sum(v * dt for v, dt in vals if math.isfinite(dt))}


def _group(st, scale, limit, unit):
    def sc(v):
        return _num(v * scale) if v is not None else None
    return {"mean": sc(st["mean"]), "min": sc(st["min"]), "max": sc(st["max"]),
            "limit": _num(limit), "unit": unit}


def summarize_py(frames, manifest, window=None):
    """summarize_run (src/core/stored_summary.cpp) in Python, same keys and rules, for builds of the
    extension without it. `frames`: {level: DataFrame with time, wallclock, columns}."""
    node = manifest.get("node_info") or {}
    interval = float(manifest.get("interval") or float("nan"))
    levels = {}
    for level, df in frames.items():
        times = df["time"].tolist()
        dts = [interval if i == 0 else times[i] - times[i - 1] for i in range(len(times))]
        wc = df["wallclock"].tolist()
        idx = [i for i, w in enumerate(wc) if window is None or window[0] <= w <= window[1]]
        first, last = (idx[0], idx[-1] + 1) if idx else (0, 0)
        rows = range(first, last)
        per_level = (node.get("cpus_per_level") or {}).get(level) or {}
        cpus = float(per_level.get("num_cpus")
                     or node.get("num_system_cpus" if level == "system" else "num_cpus") or "nan")
        limit_bytes = float((node.get("memory_limits") or {}).get(level) or "nan")

        def col(name):
            vals = df[name].tolist()
            return _stat([vals[i] for i in rows], [dts[i] for i in rows])

        L = {"ticks": last - first,
             "duration_s": (wc[last - 1] - wc[first] + (interval if math.isfinite(interval)
                                                        else 0)) if last > first else 0.0,
             "num_cpus": _num(cpus)}
        groups = {}
        if "cpu_util_avg" in df.columns:
            st = col("cpu_util_avg")
            groups["cpu"] = _group(st, 1, 100.0, "%")
            groups["cpu_cores"] = _group(st, cpus / 100, cpus, "cores")
            L["cpu_seconds"] = _num(st["integral"] / 100 * cpus) if st["count"] else None
        if "memory" in df.columns:
            groups["memory"] = _group(col("memory"), 1,
                                      limit_bytes / GIB if limit_bytes > 0 else None, "GiB")
        # The GPUs the level used (where it held memory; at the system level all), over which
        # utilisation and bandwidth are their mean per row, memory the largest on one GPU.
        used = []
        d = 0
        while f"gpu_mem_{d}" in df.columns or f"gpu_util_{d}" in df.columns:
            if level == "system":
                used.append(d)
            elif f"gpu_mem_{d}" in df.columns:
                peak = col(f"gpu_mem_{d}")
                if peak["count"] and peak["max"] > 0:
                    used.append(d)
            d += 1
        if d:
            L["gpus_used"] = len(used)
        for key in ("gpu_util", "gpu_band", "gpu_mem"):
            limit = 100.0
            if key == "gpu_mem":
                g = float(node.get("gpu_memory_gib") or 0)
                limit = g if g > 0 else None
            unit = "GiB" if key == "gpu_mem" else "%"
            cols = [f"{key}_{u}" for u in used if f"{key}_{u}" in df.columns]
            if cols:
                per_row = []
                for i in rows:
                    vals = [v for v in (df[c].iloc[i] for c in cols) if v == v]
                    per_row.append((max(vals) if key == "gpu_mem" else sum(vals) / len(vals))
                                   if vals else float("nan"))
                groups[key] = _group(_stat(per_row, [dts[i] for i in rows]), 1, limit, unit)
            elif f"{key}_0" not in df.columns and f"{key}_avg" in df.columns:
                groups[key] = _group(col(f"{key}_avg"), 1, limit, unit)
        L["groups"] = groups
        L["totals"] = {k: col(c)["integral"] for k, c in TOTALS if c in df.columns}
        levels[level] = L
    main = "process" if "process" in levels else "system" if "system" in levels else \
        next(iter(levels), "system")
    out = {"levels": levels, "level": main, "window": list(window) if window else None,
           "engine": "python"}
    out["tags"] = level_tags(out, main)
    return out


def add_energy(summary, frames, manifest, window=None):
    """Adds each level's energy in `window` (epoch seconds; None: the whole session) to
    summary["levels"][level]["energy"]: joules per domain of the energy collector
    (manifest node_info.energy.domains; docs/energy.md), their total over the domains that do not
    overlap (node_info.energy.counted), kWh and the CO2 estimate at the run's carbon intensity.

    energy_joules_<i> is cumulative since the first tick, and a row covers the interval that ends
    at it: the energy of the rows in the window is the last measured value in it less the last
    measured value before it (0 before the first row)."""
    en = (manifest.get("node_info") or {}).get("energy") or {}
    domains = en.get("domains") or []
    counted = set(en.get("counted") or [])
    intensity = _num(en.get("carbon_intensity_g_per_kwh"))
    if not domains:
        return summary
    for level, df in frames.items():
        L = (summary.get("levels") or {}).get(level)
        if L is None:
            continue
        wc = df["wallclock"].tolist()
        idx = [i for i, w in enumerate(wc) if window is None or window[0] <= w <= window[1]]
        if not idx:
            continue
        by, total, any_counted = {}, 0.0, False
        for i, d in enumerate(domains):
            name = f"energy_joules_{i}"
            if name not in df.columns:
                continue
            vals = df[name].tolist()
            inside = [vals[k] for k in idx if _num(vals[k]) is not None]
            if not inside:
                continue
            before = [vals[k] for k in range(idx[0]) if _num(vals[k]) is not None]
            joules = inside[-1] - (before[-1] if before else 0.0)
            by[d] = joules
            if d in counted:
                total += joules
                any_counted = True
        if not any_counted:
            continue
        L["energy"] = {"joules": total, "kwh": total / 3.6e6,
                       "co2_g": total / 3.6e6 * intensity if intensity is not None else None,
                       "carbon_intensity_g_per_kwh": intensity, "by_domain_j": by}
    return summary


def _joules(j):
    if abs(j) >= 1e6:
        return f"{j / 1e6:.2f} MJ"
    if abs(j) >= 1e3:
        return f"{j / 1e3:.2f} kJ"
    return f"{j:.1f} J"


def energy_line(L):
    """'1.23 kJ (0.000342 kWh; package-0 1.00 kJ, gpu-0 230.0 J), CO2 0.16 g at 480 g/kWh' or
    None without energy."""
    E = L.get("energy")
    if not E:
        return None
    parts = ", ".join(f"{d} {_joules(v)}" for d, v in (E.get("by_domain_j") or {}).items())
    line = f"{_joules(E['joules'])} ({E['kwh']:.6f} kWh" + (f"; {parts})" if parts else ")")
    if E.get("co2_g") is not None:
        line += f", CO2 {E['co2_g']:.3g} g at {E['carbon_intensity_g_per_kwh']:g} g/kWh"
    return line


def level_tags(summary, level):
    """The bottleneck tags of a level: summarize_run's for its main level, the same rules
    (core/summary.cpp) applied to the level's groups otherwise."""
    L = (summary.get("levels") or {}).get(level) or {}
    if "tags" in L:  # summarize_run tags every level (bottleneck_tags in core/summary.cpp)
        return list(L["tags"])
    if level == summary.get("level") and "tags" in summary:
        return list(summary["tags"])
    groups = ((summary.get("levels") or {}).get(level) or {}).get("groups") or {}

    def g(name, stat):
        return _num((groups.get(name) or {}).get(stat))

    tags = []
    if g("cpu", "mean") is not None and g("cpu", "mean") >= 70:
        tags.append("cpu-bound")
    if g("memory", "max") is not None and g("memory", "limit") and \
            g("memory", "max") >= 0.8 * g("memory", "limit"):
        tags.append("memory-bound")
    if g("gpu_util", "mean") is not None and g("gpu_util", "mean") >= 70:
        tags.append("gpu-util-bound")
    if g("gpu_mem", "max") is not None and g("gpu_mem", "limit") and \
            g("gpu_mem", "max") >= 0.9 * g("gpu_mem", "limit"):
        tags.append("gpu-memory-bound")
    if g("gpu_mem", "max") and g("gpu_util", "mean") is not None and g("gpu_util", "mean") < 10:
        tags.append("gpu-allocated-but-not-used")
    # node-saturated: the node's CPUs busy (system level's mean >= 90 %) while this level got
    # less than 90 % of its own, and used at least 0.05 cores (node_saturated in
    # core/summary.cpp: a program that waited was not held back).
    if level != "system":
        node = (((summary.get("levels") or {}).get("system") or {}).get("groups") or {})
        node_mean = _num((node.get("cpu") or {}).get("mean"))
        cpus = _num(((summary.get("levels") or {}).get(level) or {}).get("num_cpus"))
        mean = g("cpu", "mean")
        waited = mean is not None and cpus is not None and mean / 100 * cpus < 0.05
        if node_mean is not None and node_mean >= 90 and mean is not None and mean < 90 and \
                not waited:
            tags.append("node-saturated")
    return tags


def table(summary, level):
    """The rows of the report table for a level: (key, label, unit, mean, min, max, limit)."""
    L = (summary.get("levels") or {}).get(level)
    if L is None:
        return []
    out = []
    for key, label, unit in GROUPS:
        gr = (L.get("groups") or {}).get(key)
        if gr is None:
            continue
        out.append({"key": key, "label": label, "unit": gr.get("unit", unit),
                    "mean": _num(gr.get("mean")), "min": _num(gr.get("min")),
                    "max": _num(gr.get("max")), "limit": _num(gr.get("limit"))})
    return out


def metric(summary, level, key, stat="mean"):
    for row in table(summary, level):
        if row["key"] == key:
            return row[stat]
    return None


def _fmt(v, unit=""):
    if v is None:
        return "-"
    if unit == "GiB":
        return f"{v:.3f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.2f}"


def _bytes(v):
    if v is None:
        return "-"
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while abs(v) >= 1024 and u < 4:
        v /= 1024
        u += 1
    return f"{v:.0f} B" if u == 0 else f"{v:.1f} {units[u]}"


def _totals_line(L):
    T = L.get("totals") or {}
    parts = [f"read {_bytes(_num(T.get('read_bytes')))}",
             f"written {_bytes(_num(T.get('written_bytes')))}"]
    if "net_sent_bytes" in T:
        parts.append(f"sent {_bytes(_num(T.get('net_sent_bytes')))}")
        parts.append(f"received {_bytes(_num(T.get('net_recv_bytes')))}")
    cs = _num(L.get("cpu_seconds"))
    parts.append(f"CPU time {cs:.2f} s" if cs is not None else "CPU time -")
    return ", ".join(parts)


def cells_label(cells):
    """`cell [1] (In [3])`, `cells [1]..[2] (In [3]..In [4])`: JUmPER's cell_index and, where
    the cells have them, IPython's execution counts (terminal IPython numbers cells by these)."""
    def count(c):
        return getattr(c, "execution_count", None)

    if len(cells) == 1:
        n = count(cells[0])
        return f"cell [{cells[0].index}]" + (f" (In [{n}])" if n is not None else "")
    a, b = count(cells[0]), count(cells[-1])
    counts = f" (In [{a}]..In [{b}])" if a is not None and b is not None else ""
    return f"cells [{cells[0].index}]..[{cells[-1].index}]{counts}"


def title_of(cells, level, node=None):
    where = f"{level} level" + (f", node {node}" if node else "")
    if not cells:
        return f"sonde report: whole session, {where}"
    return f"sonde report: {cells_label(cells)}, {where}"


EMPTY = ("no samples in this range (shorter than the interval, or the monitor was not running)")


def node_lines(summary):
    """A multi-node run's aggregate: one line per node (summarize_run's `nodes`)."""
    out = []
    for n in summary.get("nodes") or []:
        parts = [f"{n.get('name', '')}{' (head)' if n.get('head') else ''}",
                 n.get("status") or "complete", f"{n.get('rows', 0)} rows"]
        cpu = _num(n.get("cpu_mean_pct"))
        if cpu is not None:
            peak = _num(n.get("cpu_peak_pct"))
            parts.append(f"CPU {cpu:.1f} % of {_num(n.get('num_cpus')) or 0:g} CPUs"
                         + (f" (peak {peak:.0f} %)" if peak is not None else ""))
        mem = _num(n.get("memory_peak_gib"))
        if mem is not None:
            lim = _num(n.get("memory_limit_gib"))
            parts.append(f"memory peak {mem:.3f} GiB" + (f" of {lim:.1f}" if lim else ""))
        off = _num(n.get("clock_offset_s"))
        if off is not None:
            parts.append(f"clock {off * 1000:+.1f} ms")
        if n.get("reason"):
            parts.append(n["reason"])
        out.append(", ".join(parts))
    return out


def render_text(summary, level, title):
    L = (summary.get("levels") or {}).get(level) or {}
    ticks = L.get("ticks", 0)
    dur = _num(L.get("duration_s"))
    lines = [title, f"{ticks} samples" + (f" over {dur:.2f} s" if dur is not None and ticks
                                          else "")]
    if not ticks:
        lines.append(EMPTY)
    header = f"{'metric':<28}{'mean':>10}{'min':>10}{'max':>10}{'limit':>10}"
    lines += [header, "-" * len(header)]
    for r in table(summary, level):
        lines.append(f"{r['label'] + ' (' + r['unit'] + ')':<28}{_fmt(r['mean'], r['unit']):>10}"
                     f"{_fmt(r['min'], r['unit']):>10}{_fmt(r['max'], r['unit']):>10}"
                     f"{_fmt(r['limit'], r['unit']):>10}")
    lines.append("totals: " + _totals_line(L))
    if energy_line(L):
        lines.append("energy: " + energy_line(L))
    tags = level_tags(summary, level)
    lines.append("tags: " + (", ".join(tags) if tags else "none"))
    nodes = node_lines(summary)
    if nodes:
        lines.append(f"nodes ({summary.get('node_level', '')} level):")
        lines += ["  " + n for n in nodes]
    return "\n".join(lines)


def render_html(summary, level, title):
    e = html.escape
    L = (summary.get("levels") or {}).get(level) or {}
    ticks = L.get("ticks", 0)
    dur = _num(L.get("duration_s"))
    sub = f"{ticks} samples" + (f" over {dur:.2f} s" if dur is not None and ticks else "")
    rows = []
    for r in table(summary, level):
        rows.append(f"<tr><th style='text-align:left'>{e(r['label'])} ({e(r['unit'])})</th>"
                    + "".join(f"<td class='n' style='text-align:right'>"
                              f"{_fmt(r[k], r['unit'])}</td>"
                              for k in ("mean", "min", "max", "limit")) + "</tr>")
    tags = level_tags(summary, level)
    tag_html = " ".join(f"<span class='tag tag-{e(t)}' style='background:#c0392b;color:white;"
                        f"padding:1px 6px;border-radius:3px'>{e(t)}</span>" for t in tags) \
        or "<span class='tag tag-none'>no bottleneck tags</span>"
    empty = f"<p>{e(EMPTY)}</p>" if not ticks else ""
    return (f"<div class='sonde-report'><b>{e(title)}</b><br><small>{e(sub)}</small>{empty}"
            "<table class='summary sonde-report-table'><thead><tr><th>Metric</th><th>Mean</th>"
            "<th>Min</th><th>Max</th><th>Limit</th></tr></thead><tbody>" + "".join(rows)
            + f"</tbody></table><div>totals: {e(_totals_line(L))}</div>"
            + (f"<div class='energy'>energy: {e(energy_line(L))}</div>" if energy_line(L) else "")
            + f"<div class='tags'>tags: {tag_html}</div>"
            + ("<div class='nodes'>nodes:<ul>" + "".join(f"<li>{e(n)}</li>"
                                                        for n in node_lines(summary))
               + "</ul></div>" if summary.get("nodes") else "")
            + "</div>")
