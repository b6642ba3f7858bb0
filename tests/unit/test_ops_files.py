"""The ops files (ops/): Prometheus alert rules checked and unit-tested by promtool, and a
Grafana dashboard whose every query names metrics tidemark exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tidemark.jobs.metrics import ControllerMetrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "ops" / "prometheus" / "tidemark-alerts.yml"
RULE_TESTS = ROOT / "ops" / "prometheus" / "tidemark-alerts.test.yml"
DASHBOARD = ROOT / "ops" / "grafana" / "tidemark.json"
ALERTS = {
    "TidemarkWatermarkStalled",
    "TidemarkNoControllerLeader",
    "TidemarkMarksRejected",
    "TidemarkFreshnessP99High",
    "TidemarkReaderGroupTimeLag",
    "TidemarkTimelineClockDrift",
}
_SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def _promtool(*args: str) -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: `make setup` installs Debian's prometheus package")
    done = subprocess.run([tool, *args], capture_output=True, text=True, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _exported_metrics() -> set[str]:
    """Every metric family tidemark declares: the controller's from its own registry,
    the others (module-level or made at scrape time) by their literal names."""
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    names = {family.name for family in registry.collect()}
    for path in [*ROOT.glob("pipelines/**/*.py"), *ROOT.glob("tidemark/**/*.py")]:
        names.update(re.findall(r'"(tidemark_[a-z0-9_]+)"', path.read_text()))
    return names


def _metric_names(expr: str) -> set[str]:
    found = set(re.findall(r"\b(tidemark_[a-z0-9_]+)", expr))
    return {next((n[: -len(s)] for s in _SUFFIXES if n.endswith(s)), n) for n in found}


def test_alert_rules_pass_promtool_check_and_each_alert_has_a_test_case():
    assert "SUCCESS: 6 rules found" in _promtool("check", "rules", RULES.name)
    _promtool("test", "rules", RULE_TESTS.name)
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == ALERTS
    assert set(re.findall(r"- alert: (\w+)", RULES.read_text())) == ALERTS


def test_every_metric_the_alerts_and_the_dashboard_use_is_exported():
    exported = _exported_metrics()
    exprs = re.findall(r"expr: (.+)", RULES.read_text())
    dashboard = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = set().union(*(_metric_names(e) for e in exprs))
    # histogram_quantile(...) spans two lines in the rules file: take the whole file too
    used |= _metric_names(RULES.read_text())
    assert used, "no metric found in the ops files"
    assert used <= exported, f"not exported by tidemark: {sorted(used - exported)}"


def test_the_dashboard_is_importable_grafana_json():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tidemark" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"] and panel["datasource"]["uid"] == "${datasource}"
