"""The README's Prometheus section (docs/readme/prometheus.md) lists the alerts rules/gputide-alerts.yaml has: its
count line says how many, and its Alerts table names each one in its first column, where a row written
"InferenceSloBurnRateFast / Slow" stands for InferenceSloBurnRateFast and InferenceSloBurnRateSlow. Four SLO alerts
once shipped under a table row and a count that knew two."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "readme" / "prometheus.md").read_text()
ALERTS = {r["alert"] for g in yaml.safe_load((ROOT / "rules" / "gputide-alerts.yaml").read_text())["groups"]
          for r in g["rules"] if "alert" in r}


def _table_names() -> list[str]:
    table = DOC.split("### Alerts (`rules/gputide-alerts.yaml`)")[1].split("\n\n")[1]
    names = []
    for row in table.splitlines()[2:]:
        first, *rest = row.strip("|").split("|")[0].strip().split(" / ")
        names.append(first)
        for part in rest:  # a full name, or the first name's stem with this ending
            names.append(next((first[:k] + part for k in range(len(first), -1, -1) if first[:k] + part in ALERTS),
                              part))
    return names


def test_the_count_line_says_how_many_alerts_there_are():
    assert re.search(r"The rules and (\d+) alerts live in `rules/`", DOC).group(1) == str(len(ALERTS))


def test_the_alerts_table_names_every_alert_once_and_no_other():
    names = _table_names()
    assert sorted(names) == sorted(ALERTS)
