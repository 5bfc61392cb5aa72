"""The shipped Grafana dashboard and Prometheus alert rules load, and use only metric names that
celery_fairqueue.metrics exports (tests/integration/test_console_store.py checks the other
direction: every name the collector exports is in METRIC_NAMES)."""

import json
import re
from pathlib import Path

import yaml

from celery_fairqueue.metrics import METRIC_NAMES

DOCS = Path(__file__).parents[2] / "docs"
METRIC = re.compile(r"\bfairqueue_[a-z_]+\b")


def names_in(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


def test_the_grafana_dashboard_is_valid_and_uses_exported_metrics():
    dashboard = json.loads((DOCS / "grafana" / "fairqueue-dashboard.json").read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    used: set[str] = set()
    for panel in panels:
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"]), panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used |= names_in(target["expr"])
    for variable in dashboard["templating"]["list"]:
        used |= names_in(variable.get("definition", ""))
    assert used <= METRIC_NAMES, used - METRIC_NAMES
    assert {"fairqueue_oldest_waiting_age_seconds",
            "fairqueue_account_oldest_waiting_age_seconds"} <= used


def test_the_alert_rules_are_valid_and_alert_on_the_oldest_waiting_age():
    rules = yaml.safe_load((DOCS / "prometheus" / "alerts.yml").read_text())
    [group] = rules["groups"]
    used: set[str] = set()
    for rule in group["rules"]:
        assert rule["alert"] and rule["expr"] and rule["annotations"]["summary"], rule
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule
        used |= names_in(rule["expr"])
    assert used <= METRIC_NAMES, used - METRIC_NAMES
    waiting = [r for r in group["rules"] if "oldest_waiting_age_seconds" in r["expr"]]
    assert waiting
