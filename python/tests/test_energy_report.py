"""Per-cell energy of the Jupyter reports (sonde.report.add_energy): the growth of the energy
collector's cumulative columns over the cells' rows, per domain, with kWh and CO2."""

import math

import pandas as pd

from sonde import report

NAN = float("nan")
MANIFEST = {"interval": 1.0, "node_info": {"energy": {
    "domains": ["package-0", "core-0", "dram-0", "gpu-0"],
    "counted": ["package-0", "dram-0", "gpu-0"],
    "carbon_intensity_g_per_kwh": 400.0}}}


def frame():
    # 1 s rows; package-0 at 50 W, core-0 at 30 W (inside the package), dram-0 at 5 W; gpu-0 at
    # 200 W not measured at row 3 (its last value before the window is used).
    n = 8
    return pd.DataFrame({
        "time": [float(i) for i in range(n)],
        "wallclock": [1000.0 + i for i in range(n)],
        "energy_joules_0": [50.0 * i for i in range(n)],
        "energy_joules_1": [30.0 * i for i in range(n)],
        "energy_joules_2": [5.0 * i for i in range(n)],
        "energy_joules_3": [200.0 * i if i != 3 else NAN for i in range(n)],
    })


def summary():
    return {"levels": {"process": {"ticks": 8}}}


def test_whole_session():
    s = report.add_energy(summary(), {"process": frame()}, MANIFEST)
    E = s["levels"]["process"]["energy"]
    assert math.isclose(E["joules"], (50 + 5 + 200) * 7)
    assert math.isclose(E["by_domain_j"]["core-0"], 30 * 7)
    assert math.isclose(E["kwh"], E["joules"] / 3.6e6)
    assert math.isclose(E["co2_g"], E["kwh"] * 400)


def test_cell_window():
    # Rows at 1004..1006 cover the intervals (1003, 1006]: 3 s of each rate; gpu-0's value
    # before the window is row 2's (row 3 is not measured), so it gets 4 s.
    s = report.add_energy(summary(), {"process": frame()}, MANIFEST, (1003.5, 1006.0))
    E = s["levels"]["process"]["energy"]
    assert math.isclose(E["by_domain_j"]["package-0"], 150)
    assert math.isclose(E["by_domain_j"]["dram-0"], 15)
    assert math.isclose(E["by_domain_j"]["gpu-0"], 800)
    assert math.isclose(E["joules"], 150 + 15 + 800)
    text = report.render_text(s, "process", "t")
    assert "energy: 965.0 J (0.000268 kWh; package-0 150.0 J" in text
    assert "CO2 0.107 g at 400 g/kWh" in text
    assert "energy:" in report.render_html(s, "process", "t")


def test_no_energy_collector():
    s = report.add_energy(summary(), {"process": frame()}, {"node_info": {}})
    assert "energy" not in s["levels"]["process"]
    assert "energy:" not in report.render_text(s, "process", "t")
