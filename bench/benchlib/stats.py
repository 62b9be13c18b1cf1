"""Statistics of measured values."""


def pct(values, p):
    """The p-th percentile (nearest rank) of values."""
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
