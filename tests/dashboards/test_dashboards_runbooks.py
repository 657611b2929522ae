"""A panel that names an alert links that alert's runbook, and every runbook link on a dashboard lands on a runbook.

The alerts send an operator to the dashboards (rules/gputide-alerts.yaml: runbook_url); the panel showing the alert's
signal links the same runbook, at the anchor the alert uses, so what to do is one click away in an incident.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from panel_eval import ROOT

from dashboards import build
from dashboards.lint import panels

RUNBOOK_URLS = {r["alert"]: r["annotations"]["runbook_url"]
                for g in yaml.safe_load((ROOT / "rules" / "gputide-alerts.yaml").read_text())["groups"]
                for r in g["rules"] if "alert" in r}
ANCHORS = {f"#{h.strip().lower()}" for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.M)}


def _committed(name: str) -> dict:
    return json.loads((ROOT / "dashboards" / f"{name}.json").read_text())


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_a_panel_naming_an_alert_links_its_runbook(name):
    named = 0
    for p in panels(_committed(name)):
        links = {link["url"] for link in p.get("links", [])}
        for alert in set(re.findall(r"\b\w+\b", p["description"])) & set(RUNBOOK_URLS):
            named += 1
            assert RUNBOOK_URLS[alert] in links, f"{p['title']!r} names {alert} but does not link its runbook"
        for url in links:
            assert url in RUNBOOK_URLS.values() and url[url.index("#"):] in ANCHORS, (p["title"], url)
    assert named or name in {"fragmentation-utilisation", "usage-chargeback"}


def test_the_dashboards_link_the_alerts_an_operator_arrives_from():
    linked = {link["url"] for name in build.DASHBOARDS for p in panels(_committed(name)) for link in p.get("links", [])}
    for alert in ("GpuNearSlowdownTemperature", "GpuXidErrorFatal", "GputideFailStaticTooLong", "GpuTelemetryStale",
                  "GputideLedgerWriteFailing", "GputideSchedulerHoldStuck", "InferenceSloBurnRateFast"):
        assert RUNBOOK_URLS[alert] in linked, alert
