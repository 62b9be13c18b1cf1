"""The shipped Prometheus rules (share/sonde/prometheus): promtool check and unit tests.

Run by ctest (tests/CMakeLists.txt, test prometheus_rules); needs Debian's prometheus package
(promtool), see scripts/install-deps --tests.
"""
import glob
import os
import shutil
import subprocess

import yaml

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES_DIR = os.path.join(SOURCE, "share", "sonde", "prometheus")
RULES = os.path.join(RULES_DIR, "sonde-rules.yml")
TESTS = sorted(glob.glob(os.path.join(RULES_DIR, "tests", "*.yml")))


def promtool():
    path = shutil.which("promtool")
    assert path, "promtool (Debian package prometheus) is required"
    return path


def run(args):
    proc = subprocess.run(args, cwd=RULES_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(args)} failed:\n{proc.stdout}"
    return proc.stdout


def load_rules():
    with open(RULES) as f:
        groups = {g["name"]: g["rules"] for g in yaml.safe_load(f)["groups"]}
    assert set(groups) == {"sonde-jobs", "sonde-alerts"}, f"{RULES}: groups {sorted(groups)}"
    return groups


def test_promtool_check_rules():
    out = run([promtool(), "check", "rules", RULES])
    assert "SUCCESS" in out


def test_promtool_unit_tests():
    assert TESTS, f"no unit test files in {RULES_DIR}/tests"
    out = run([promtool(), "test", "rules"] + TESTS)
    assert "FAILED" not in out


def test_recording_rule_names():
    for rule in load_rules()["sonde-jobs"]:
        name = rule["record"]
        level, what, agg = name.split(":")
        assert level == "job" and what.startswith("sonde_") and agg, name


def test_every_rule_is_unit_tested():
    """Each recording rule has an expected non-empty result; each alert fires and does not."""
    groups = load_rules()
    recorded_with_samples = set()
    alerts_firing, alerts_silent = set(), set()
    for path in TESTS:
        with open(path) as f:
            doc = yaml.safe_load(f)
        for test in doc["tests"]:
            for case in test.get("promql_expr_test", []):
                if case.get("exp_samples"):
                    recorded_with_samples.add(case["expr"].strip())
            for case in test.get("alert_rule_test", []):
                (alerts_firing if case.get("exp_alerts") else alerts_silent).add(case["alertname"])
    records = {r["record"] for r in groups["sonde-jobs"]}
    alerts = {r["alert"] for r in groups["sonde-alerts"]}
    assert records - recorded_with_samples == set(), "recording rules without a unit test"
    assert alerts - alerts_firing == set(), "alerts never tested firing"
    assert alerts - alerts_silent == set(), "alerts never tested not firing"
    for rule in groups["sonde-alerts"]:
        annotations = rule.get("annotations", {})
        assert {"summary", "description"} <= set(annotations), rule["alert"]
        assert "$labels" in annotations["summary"], rule["alert"]
