"""The rule files pass `promtool check rules` and their unit tests pass `promtool test rules`.

Also structural checks promtool cannot make: every alert carries severity, summary, description and a
runbook_url whose anchor exists in docs/runbooks.md; every record and alert appears in a promtool test
(alerts both firing and quiet); every record named in the metric contract (docs/metrics.md) exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "rules").glob("*.yaml"))
SERVING_FILES = sorted((ROOT / "rules" / "serving").glob("*.yaml"))  # optional: for clusters, not loaded by default
TEST_FILES = sorted((ROOT / "rules" / "tests").glob("*.yaml"))
RUNBOOK_BASE = "https://github.com/gputide/gputide/blob/main/docs/runbooks.md#"


def _rules(kind: str) -> list[dict]:
    return [r for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"] if kind in r]


ALERTS = _rules("alert")
RECORDS = sorted({r["record"] for r in _rules("record")})
TESTS = [t for f in TEST_FILES for t in yaml.safe_load(f.read_text())["tests"]]


def github_anchors(markdown: str) -> set[str]:
    """Anchors GitHub generates for headings: lower case, punctuation dropped, spaces to dashes."""
    anchors = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", markdown, flags=re.M):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-"))
    return anchors


@pytest.mark.integration
@pytest.mark.parametrize(
    "command",
    [["check", "rules", *map(str, RULE_FILES + SERVING_FILES)], ["test", "rules", *map(str, TEST_FILES)]],
    ids=["promtool check rules accepts every rule file", "promtool unit tests of the rules pass"],
)
def test_promtool(promtool, command):
    result = subprocess.run([promtool, *command], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_are_rule_files_and_tests():
    assert len(RULE_FILES) >= 2 and TEST_FILES and len(ALERTS) >= 13 and len(RECORDS) >= 40


@pytest.mark.parametrize("path", SERVING_FILES, ids=[p.name for p in SERVING_FILES])
def test_serving_rules_record_every_series_the_controller_reads_and_have_a_promtool_test(path):
    records = {r["record"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    helpers = {r for r in records if re.fullmatch(r"gputide:\w+:\w+", r)}  # level:metric:operation steps
    assert records - helpers == {"gputide_inference_demand_rps", "gputide_inference_latency_p99_seconds",
                                 "gputide_inference_replicas", "gputide_inference_replicas_ready"}
    tested = {f for f in TEST_FILES if f"../serving/{path.name}" in f.read_text()}
    assert tested, f"no promtool test loads {path.name}"


@pytest.mark.parametrize("alert", ALERTS, ids=[a["alert"] for a in ALERTS])
def test_alert_has_severity_annotations_and_a_runbook_section(alert):
    anchors = github_anchors((ROOT / "docs" / "runbooks.md").read_text())
    assert alert["labels"]["severity"] in {"critical", "warning", "info"}
    assert {"summary", "description", "runbook_url"} <= set(alert["annotations"])
    url = alert["annotations"]["runbook_url"]
    assert url.startswith(RUNBOOK_BASE)
    assert url.removeprefix(RUNBOOK_BASE) in anchors


@pytest.mark.parametrize("alert", [a["alert"] for a in ALERTS])
def test_alert_has_a_firing_and_a_quiet_promtool_case(alert):
    evals = [e for t in TESTS for e in t.get("alert_rule_test", []) if e["alertname"] == alert]
    firing = [e for e in evals if e.get("exp_alerts")]
    assert any(e.get("exp_annotations") for f in firing for e in f["exp_alerts"]), "no firing case"
    assert any(not e.get("exp_alerts") for e in evals), "no case where it must stay quiet"


@pytest.mark.parametrize("record", RECORDS)
def test_record_has_a_promql_expr_test(record):
    exprs = [e["expr"] for t in TESTS for e in t.get("promql_expr_test", [])]
    assert any(re.search(rf"(?<![\w:]){re.escape(record)}(?![\w:])", expr) for expr in exprs)


def test_every_record_of_the_metric_contract_exists():
    contract = (ROOT / "docs" / "metrics.md").read_text().split("## 2.")[1].split("## 3.")[0]
    names = set(re.findall(r"`([a-z_]+:[a-z_0-9]+:[a-z_0-9]+)", contract)) - {"level:metric:operation"}
    assert names and names - set(RECORDS) == set()
