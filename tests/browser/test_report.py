"""The HTML report in a real browser: headless Chromium driven by Selenium (chromium-driver).

A real `sonde run --report` of the test workload writes the report; the test opens it from disk
and checks that every chart drew its data on a canvas, that the console stayed clean, that
switching the level changes the drawn data, that zooming works, and that the page made no
network request. It saves screenshots under $SONDE_BROWSER_OUT (the build directory).

Environment (set by ctest): SONDE_BINARY, SONDE_WORKLOAD, SONDE_BROWSER_OUT.
"""

import json
import os
import shutil
import subprocess
import tempfile
import pathlib

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

SONDE = os.environ["SONDE_BINARY"]
WORKLOAD = os.environ["SONDE_WORKLOAD"]
OUT = pathlib.Path(os.environ["SONDE_BROWSER_OUT"])

# Counts the pixels of each chart's canvas that are drawn in a saturated colour: series lines and
# bands (axes, grid and text are grey), and a hash of the whole canvas to see a redraw.
CANVAS_PIXELS_JS = """
const out = [];
for (const card of document.querySelectorAll('.chart')) {
  const c = card.querySelector('canvas');
  if (!c) { out.push({name: card.dataset.chart, canvas: false, empty: card.classList.contains('empty')}); continue; }
  const ctx = c.getContext('2d');
  const d = ctx.getImageData(0, 0, c.width, c.height).data;
  let colored = 0, painted = 0, hash = 0;
  for (let i = 0; i < d.length; i += 4) {
    const r = d[i], g = d[i + 1], b = d[i + 2], a = d[i + 3];
    if (a > 0) painted++;
    if (a > 100 && Math.max(r, g, b) - Math.min(r, g, b) > 60) colored++;
    hash = (hash * 31 + r * 7 + g * 3 + b + a) | 0;
  }
  out.push({name: card.dataset.chart, canvas: true, width: c.width, height: c.height,
            colored: colored, painted: painted, hash: hash});
}
return out;
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    work = tmp_path_factory.mktemp("report")
    run_dir = work / "run"
    script = (
        f"{WORKLOAD} burn 0.6 & {WORKLOAD} hold 96 1.0; wait; "
        f"{WORKLOAD} write 16 {work}/data.bin; {WORKLOAD} spawn 3 150"
    )
    proc = subprocess.run(
        [SONDE, "run", "--interval", "0.1", "--levels", "process,user,system",
         "--out", str(run_dir), "--quiet", "--report", "--", "/bin/sh", "-c", script],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    html = run_dir / "report.html"
    assert html.exists(), proc.stderr
    assert "report written to" in proc.stderr
    return html


@pytest.fixture(scope="module")
def driver():
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    chromedriver = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1500,1100", "--hide-scrollbars", "--force-device-scale-factor=1",
              "--disable-background-networking", "--disable-component-update",
              "--no-first-run", "--disable-sync", "--disable-default-apps"):
        opts.add_argument(a)
    opts.add_argument("--user-data-dir=" + tempfile.mkdtemp(prefix="sonde-chromium-"))
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    d = webdriver.Chrome(service=Service(chromedriver), options=opts)
    yield d
    d.quit()


def network_requests(driver):
    """URLs the page asked for, from Chromium's DevTools performance log."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def full_page_screenshot(driver, path):
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1500, min(max(height, 800), 12000))
    driver.save_screenshot(str(path))
    driver.set_window_size(1500, 1100)


def test_report_in_chromium(report, driver):
    OUT.mkdir(parents=True, exist_ok=True)
    url = report.resolve().as_uri()
    driver.get("about:blank")
    network_requests(driver)  # drop what the browser itself loaded before (its new-tab page)
    driver.get(url)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.sondeReport && window.sondeReport.ready)"))

    # No console errors (and no warnings from the page's own code).
    logs = driver.get_log("browser")
    severe = [l for l in logs if l["level"] == "SEVERE"]
    assert not severe, severe
    assert driver.execute_script("return window.sondeReport.errors") == []

    # No network request: the only URL loaded is the file itself.
    requests = network_requests(driver)
    others = [u for u in requests if u != url and not u.startswith("data:")]
    assert not others, others

    # The summary: command, exit status, tags and the per-level table.
    header = driver.find_element(By.CSS_SELECTOR, "header.top").text
    assert "sonde-test-workload" in header
    assert "exit status" in header.lower()
    table = driver.find_element(By.ID, "summary-table").text
    for needle in ("CPU utilisation", "Memory", "process", "system"):
        assert needle in table

    levels = driver.execute_script("return window.sondeReport.levels")
    assert levels == ["process", "user", "system"]
    assert driver.execute_script("return window.sondeReport.level()") == "process"

    # Every chart with data drew it: a canvas per chart with coloured (data) pixels.
    charts = driver.execute_script("return window.sondeReport.charts()")
    pixels = driver.execute_script(CANVAS_PIXELS_JS)
    assert len(charts) == len(pixels) and len(charts) >= 5, (charts, pixels)
    drawn = {c["name"] for c in charts if c["drawn"]}
    for want in ("cpu_summary", "cpu_cores", "memory", "io_bytes"):
        assert want in drawn, (want, charts)
    for c, p in zip(charts, pixels):
        assert c["name"] == p["name"]
        if c["drawn"]:
            assert p["canvas"] and p["width"] > 300 and p["height"] > 100, p
            assert p["colored"] > 50, ("chart drew no data", p)
        else:
            assert p["empty"], p
    full_page_screenshot(driver, OUT / "report_process.png")

    # Switching the level changes the data and the drawing.
    process = {c["name"]: c for c in charts}
    before = {p["name"]: p["hash"] for p in pixels}
    driver.find_element(By.ID, "level-system").click()
    assert driver.execute_script("return window.sondeReport.level()") == "system"
    sys_charts = driver.execute_script("return window.sondeReport.charts()")
    sys_pixels = driver.execute_script(CANVAS_PIXELS_JS)
    system = {c["name"]: c for c in sys_charts}
    assert system["memory"]["sum"] != process["memory"]["sum"]
    assert system["cpu_summary"]["sum"] != process["cpu_summary"]["sum"]
    after = {p["name"]: p["hash"] for p in sys_pixels}
    assert after["memory"] != before["memory"]
    assert "net_bytes" in system and system["net_bytes"]["drawn"], sys_charts
    for c, p in zip(sys_charts, sys_pixels):
        if c["drawn"]:
            assert p["colored"] > 50, ("chart drew no data", p)
    full_page_screenshot(driver, OUT / "report_system.png")

    # Zoom: dragging across one chart narrows the time axis of every chart; reset restores it.
    full = driver.execute_script("return window.sondeReport.xRange()")
    over = driver.find_element(By.CSS_SELECTOR, ".chart[data-chart='cpu_summary'] .u-over")
    w = over.size["width"]
    ActionChains(driver).move_to_element_with_offset(over, -w // 4, 0).click_and_hold() \
        .move_by_offset(w // 3, 0).release().perform()
    zoomed = driver.execute_script("return window.sondeReport.xRange()")
    assert zoomed[1] - zoomed[0] < 0.8 * (full[1] - full[0]), (full, zoomed)
    assert all(r == zoomed for r in driver.execute_script("return window.sondeReport.xRanges()"))
    driver.find_element(By.ID, "reset-zoom").click()
    assert driver.execute_script("return window.sondeReport.xRange()") == full

    # Still nothing fetched, nothing logged.
    assert not [l for l in driver.get_log("browser") if l["level"] == "SEVERE"]
    others = [u for u in network_requests(driver) if u != url and not u.startswith("data:")]
    assert not others, others


def synthetic_run(d, rows=600):
    """A run directory with GPU columns, a plugin's columns and notebook cells (no GPU needed)."""
    import math
    levels = ["process", "system"]
    start = 1_700_000_000.0
    manifest = {
        "command": ["python3", "train.py"], "mode": "run", "start_wallclock": start,
        "end_wallclock": start + rows, "exit_status": 0, "complete": True, "host": "gpu-node",
        "interval": 1.0, "levels": levels, "sonde_version": "test",
        "node_info": {"num_cpus": 4, "num_system_cpus": 4, "num_gpus": 2, "gpu_name": "Fake GPU",
                      "gpu_memory_gib": 16.0,
                      "memory_limits": {l: 8 * 1024 ** 3 for l in ["process", "user", "slurm", "system"]}},
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    for li, level in enumerate(levels):
        cols = ["time", "wallclock", "cpu_util_0", "cpu_util_1", "cpu_util_avg", "cpu_util_min",
                "cpu_util_max", "memory", "gpu_util_0", "gpu_util_1", "gpu_util_avg",
                "gpu_util_min", "gpu_util_max", "gpu_mem_0", "gpu_mem_1", "gpu_mem_avg",
                "gpu_mem_min", "gpu_mem_max", "lustre_read", "temp_0", "temp_1"]
        lines = [",".join(cols)]
        for r in range(rows):
            p = 0.5 + 0.5 * math.sin(r / 40 + li)
            c0, c1 = 90 * p, 60 * p + 5
            g0, g1 = 95 * p, 80 * p
            m0, m1 = 14 * p + 1, 10 * p + 1
            row = [r + 1, start + r + 1, c0, c1, (c0 + c1) / 2, min(c0, c1), max(c0, c1),
                   2 + 4 * p + li, g0, g1, (g0 + g1) / 2, min(g0, g1), max(g0, g1), m0, m1,
                   (m0 + m1) / 2, min(m0, m1), max(m0, m1), 1e6 * p, 40 + 30 * p, 45 + 20 * p]
            lines.append(",".join("%.6f" % v if i < 2 else "%.6g" % v for i, v in enumerate(row)))
        (d / ("perf_%s.csv" % level)).write_text("\n".join(lines) + "\n")
    (d / "cell_history.csv").write_text(
        'index,start_wallclock,end_wallclock,code\n'
        '1,%f,%f,"import torch"\n2,%f,%f,"model.fit(x, y)\nprint(""done"")"\n'
        % (start + 1, start + 20, start + 30, start + 500))


def test_gpu_and_plugin_columns(tmp_path, driver):
    run = tmp_path / "run"
    run.mkdir()
    synthetic_run(run)
    out = tmp_path / "gpu.html"
    proc = subprocess.run([SONDE, "report", str(run), "-o", str(out)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    driver.get("about:blank")
    network_requests(driver)
    driver.get(out.resolve().as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.sondeReport && window.sondeReport.ready)"))
    assert not [l for l in driver.get_log("browser") if l["level"] == "SEVERE"]
    charts = {c["name"]: c for c in driver.execute_script("return window.sondeReport.charts()")}
    for want in ("gpu_util_summary", "gpu_util", "gpu_mem_summary", "gpu_mem", "auto:lustre_read",
                 "auto:temp_"):
        assert want in charts and charts[want]["drawn"], (want, sorted(charts))
    pixels = {p["name"]: p for p in driver.execute_script(CANVAS_PIXELS_JS)}
    for name, c in charts.items():
        if c["drawn"]:
            assert pixels[name]["colored"] > 50, pixels[name]
    tags = driver.find_element(By.ID, "tags").text
    assert "gpu-util-bound" not in tags  # mean GPU utilisation is about 44 %
    assert "Notebook cells" in driver.find_element(By.ID, "app").text
    table = driver.find_element(By.ID, "summary-table").text
    assert "GPU utilisation" in table and "GPU memory" in table
    assert not [u for u in network_requests(driver) if not u.startswith("file:")]
    full_page_screenshot(driver, OUT / "report_gpu.png")

    # The same page with the data as plain JSON draws the same charts.
    plain = tmp_path / "plain.html"
    proc = subprocess.run([SONDE, "report", str(run), "-o", str(plain), "--uncompressed"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert 'type="application/json"' in plain.read_text()
    driver.get(plain.resolve().as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.sondeReport && window.sondeReport.ready)"))
    again = {c["name"]: c for c in driver.execute_script("return window.sondeReport.charts()")}
    assert again == charts
    assert not [l for l in driver.get_log("browser") if l["level"] == "SEVERE"]


def test_multinode_node_selector(tmp_path, driver):
    """A multi-node run (tests/fixtures/make_multinode_run.py: n1 burns 2 CPUs, n2 holds
    0.5 GiB, n3 idles and is lost after 6 ticks): the node selector switches every chart, the
    per-node table and the node-imbalance tag are there."""
    OUT.mkdir(parents=True, exist_ok=True)
    source = pathlib.Path(__file__).resolve().parents[1]
    run = tmp_path / "job"
    subprocess.run(["/usr/bin/python3", str(source / "fixtures" / "make_multinode_run.py"),
                    str(run), "--ticks", "40", "--lose", "n3", "--lost-after", "25"], check=True)
    out = tmp_path / "job.html"
    proc = subprocess.run([SONDE, "report", str(run), "-o", str(out)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    url = out.resolve().as_uri()
    driver.get("about:blank")
    network_requests(driver)
    driver.get(url)
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.sondeReport && window.sondeReport.ready)"))
    assert not [l for l in driver.get_log("browser") if l["level"] == "SEVERE"]
    assert driver.execute_script("return window.sondeReport.errors") == []
    assert driver.execute_script("return window.sondeReport.nodes") == ["n1", "n2", "n3"]
    assert driver.execute_script("return window.sondeReport.node()") == ""
    assert driver.execute_script("return window.sondeReport.level()") == "slurm"
    assert "node-imbalance" in driver.find_element(By.ID, "tags").text

    table = driver.find_element(By.ID, "node-table").text
    for needle in ("n1 (head)", "n2", "n3", "lost", "complete", "+1.2 ms", "-250.0 ms"):
        assert needle in table, (needle, table)

    def drawn():
        charts = {c["name"]: c for c in driver.execute_script("return window.sondeReport.charts()")}
        pixels = {p["name"]: p for p in driver.execute_script(CANVAS_PIXELS_JS)}
        for name, c in charts.items():
            if c["drawn"]:
                assert pixels[name]["colored"] > 50, ("chart drew no data", pixels[name])
        return charts, pixels

    agg, agg_px = drawn()
    assert agg["cpu_summary"]["drawn"] and agg["memory"]["drawn"]
    full_page_screenshot(driver, OUT / "report_multinode_aggregate.png")

    # n1: its CPU is near 100 %, per-CPU charts appear (per-device columns are per node only).
    driver.find_element(By.CSS_SELECTOR, "#node-bar .node-btn[data-node='n1']").click()
    assert driver.execute_script("return window.sondeReport.node()") == "n1"
    assert driver.execute_script("return window.sondeReport.level()") == "slurm"
    n1, n1_px = drawn()
    assert n1["cpu_summary"]["sum"] != agg["cpu_summary"]["sum"]
    assert n1_px["cpu_summary"]["hash"] != agg_px["cpu_summary"]["hash"]
    assert n1["memory"]["sum"] < agg["memory"]["sum"]
    assert n1["cpu_cores"]["drawn"]
    assert "cpu_cores" not in agg or not agg["cpu_cores"]["drawn"]
    # The aggregate's own charts: the spread over the nodes and how many nodes a row covers.
    assert agg["cpu_nodes"]["drawn"] and agg["nodes"]["drawn"], sorted(agg)
    assert "cpu_nodes" not in n1 and "nodes" not in n1
    heading = driver.find_element(By.CSS_SELECTOR, "#charts h2").text
    assert "node n1" in heading, heading
    full_page_screenshot(driver, OUT / "report_multinode_n1.png")

    # n3 (lost): fewer points than n1; switching the level keeps the node.
    driver.find_element(By.CSS_SELECTOR, "#node-bar .node-btn[data-node='n3']").click()
    n3, _ = drawn()
    assert n3["memory"]["points"] < n1["memory"]["points"]
    driver.find_element(By.ID, "level-system").click()
    assert driver.execute_script("return window.sondeReport.node()") == "n3"
    n3sys, _ = drawn()
    assert n3sys["memory"]["sum"] > n3["memory"]["sum"]  # the node holds more than the job

    # Back to the aggregate: the same data as at first.
    driver.find_element(By.CSS_SELECTOR, "#node-bar .node-btn[data-node='']").click()
    driver.find_element(By.ID, "level-slurm").click()
    again, _ = drawn()
    assert again["cpu_summary"]["sum"] == agg["cpu_summary"]["sum"]
    assert not [l for l in driver.get_log("browser") if l["level"] == "SEVERE"]
    assert not [u for u in network_requests(driver) if u != url and not u.startswith("data:")]

    # --node n2: the report of one node, no selector.
    one = tmp_path / "n2.html"
    proc = subprocess.run([SONDE, "report", str(run), "--node", "n2", "-o", str(one)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    driver.get(one.resolve().as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script("return !!(window.sondeReport && window.sondeReport.ready)"))
    assert driver.execute_script("return window.sondeReport.nodes") == []
    assert not driver.find_elements(By.ID, "node-bar")
    assert "n2" in driver.find_element(By.CSS_SELECTOR, "header.top").text
