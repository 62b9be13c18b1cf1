"""The shipped Grafana dashboard (share/sonde/grafana/sonde-jobs.json) against a real Prometheus.

A Prometheus (Debian's prometheus) is filled with synthetic `sonde serve --per-job` data
(make_openmetrics.py: 3 nodes, 2 jobs, an hour at 15 s) and started with the shipped rules; every
panel query, with the template variables substituted as Grafana would, must return data for each
job over the job's time range. The recording rules, backfilled over the same data, must too.

Run by ctest (tests/CMakeLists.txt, test prometheus_dashboard).
"""
import json
import os
import re
import sys
import tempfile

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from throwaway_prometheus import PrometheusError, ThrowawayPrometheus, fill  # noqa: E402

SOURCE = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(SOURCE, "share", "sonde", "grafana", "sonde-jobs.json")
RULES = os.path.join(SOURCE, "share", "sonde", "prometheus", "sonde-rules.yml")
STEP = 15


@pytest.fixture(scope="module")
def prom():
    with tempfile.TemporaryDirectory(prefix="sonde-dashboard-") as tmp:
        truth = fill(tmp, nodes=3, jobs=2, duration=3600, step=STEP, backfill_rules=RULES)
        with ThrowawayPrometheus(tmp, rule_files=[RULES]) as server:
            server.truth = truth
            yield server


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def variables(dashboard):
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def grafana_regex_escape(value):
    # What Grafana's Prometheus data source does to a multi-value variable's values.
    return re.sub(r"([\\^$*+?.()|{}\[\]])", r"\\\\\1", value)


def substitute(expr, values):
    """Replaces $name, ${name} and [[name]] as Grafana does; values: name -> text."""
    for name, value in values.items():
        expr = re.sub(r"\$\{" + name + r"(:[a-z]+)?\}|\[\[" + name + r"\]\]|\$" + name + r"\b",
                      lambda m: value, expr)
    return expr


def label_values_query(variable):
    query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
    assert m, f"variable {variable['name']}: expected label_values(SELECTOR, LABEL), got {query!r}"
    return m.group(1).strip(), m.group(2)


def test_dashboard_structure():
    dashboard = load_dashboard()
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] == "sonde-jobs"
    var = variables(dashboard)
    assert var["datasource"]["type"] == "datasource" and var["datasource"]["query"] == "prometheus"
    assert label_values_query(var["jobid"]) == ("sonde_job_processes", "jobid")
    assert label_values_query(var["instance"])[1] == "instance"
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids are not unique"
    for panel in all_panels(dashboard):
        if panel["type"] == "row":
            continue
        title = panel["title"]
        assert panel.get("targets"), f"panel {title!r} has no query"
        assert panel["datasource"]["uid"] == "${datasource}", f"panel {title!r}: data source"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", f"panel {title!r}: data source"
            assert target.get("expr"), f"panel {title!r}: target {target.get('refId')} has no expr"
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), f"panel {title!r}: gridPos"


def test_template_variables_return_values(prom):
    dashboard = load_dashboard()
    var = variables(dashboard)
    truth = prom.truth
    selector, label = label_values_query(var["jobid"])
    jobids = prom.api(f"label/{label}/values", **{"match[]": selector, "start": truth["start"], "end": truth["end"]})
    assert sorted(jobids) == sorted(j["jobid"] for j in truth["jobs"])
    for job in truth["jobs"]:
        selector, label = label_values_query(var["instance"])
        selector = substitute(selector, {"jobid": job["jobid"]})
        instances = prom.api(f"label/{label}/values", **{"match[]": selector, "start": truth["start"], "end": truth["end"]})
        assert sorted(instances) == sorted(n["instance"] for n in job["nodes"]), job["jobid"]


def test_every_panel_query_returns_data(prom):
    dashboard = load_dashboard()
    failures = []
    queries = 0
    for job in prom.truth["jobs"]:
        instances = "(" + "|".join(grafana_regex_escape(n["instance"]) for n in job["nodes"]) + ")"
        values = {"jobid": job["jobid"], "instance": instances, "__rate_interval": "1m",
                  "__interval": f"{STEP}s", "__range": f"{job['last'] - job['first']}s"}
        for panel in all_panels(dashboard):
            for target in panel.get("targets", []):
                expr = substitute(target["expr"], values)
                where = f"panel {panel['title']!r} query {target['refId']} for job {job['jobid']}: {expr}"
                if "$" in expr:
                    failures.append(f"{where}: a template variable was left unsubstituted")
                    continue
                queries += 1
                try:
                    result = prom.query_range(expr, job["first"], job["last"], 60)
                except PrometheusError as e:
                    failures.append(f"{where}: {e}")
                    continue
                points = [v for series in result for _, v in series["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if not points:
                    failures.append(f"{where}: no data")
    assert queries >= 2 * 20
    assert not failures, "dashboard queries without data:\n" + "\n".join(failures)


def test_rules_load_in_prometheus(prom):
    groups = {g["name"]: g for g in prom.api("rules")["groups"]}
    assert set(groups) == {"sonde-jobs", "sonde-alerts"}
    with open(RULES) as f:
        expected = sum(len(g["rules"]) for g in yaml.safe_load(f)["groups"])
    assert sum(len(g["rules"]) for g in groups.values()) == expected


def test_recording_rules_have_data(prom):
    """The recording rules, backfilled over the synthetic data, give every job a value."""
    with open(RULES) as f:
        records = [r["record"] for g in yaml.safe_load(f)["groups"] for r in g["rules"] if "record" in r]
    truth = prom.truth
    failures = []
    for record in records:
        result = prom.query_range(record, truth["start"], truth["end"], 60)
        jobs = {s["metric"].get("jobid") for s in result}
        missing = {j["jobid"] for j in truth["jobs"]} - jobs
        if missing:
            failures.append(f"{record}: no data for job(s) {sorted(missing)}")
    assert not failures, "\n".join(failures)
    # A figure that must match the generator's ground truth: the CPU efficiency of each job.
    for job in truth["jobs"]:
        result = prom.query(f'avg_over_time(job:sonde_cpu_efficiency_ratio:rate1m{{jobid="{job["jobid"]}"}}[{job["last"] - job["first"]}s])',
                            t=job["last"])
        assert result, job["jobid"]
        assert float(result[0]["value"][1]) == pytest.approx(job["cpu_efficiency"], rel=0.05), job["jobid"]
