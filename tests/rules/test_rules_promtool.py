"""The rule files pass `promtool check rules` and their unit tests pass `promtool test rules`.

Also structural checks promtool cannot make: every alert carries severity, summary, description and a
runbook_url whose anchor exists in docs/runbooks.md; every record and alert appears in a promtool test
(alerts both firing and quiet); every record named in the metric contract (docs/metrics.md) exists.
"""

from __future__ import annotations

import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
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


def _promtool(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.integration
def test_promtool_check_rules_accepts_every_rule_file(promtool):
    result = _promtool(promtool, "check", "rules", *map(str, RULE_FILES + SERVING_FILES))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.integration
def test_promtool_unit_tests_of_the_rules_pass(promtool):
    """Every test file through `promtool test rules`, one process per file, as many at once as there are CPUs
    (at least two), the largest first: promtool evaluates a file's cases on about one core, so on 2 cores the files
    side by side took 64 s where one `promtool test rules rules/tests/*.yaml` took 97 s."""
    files = sorted(TEST_FILES, key=lambda f: f.stat().st_size, reverse=True)
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(lambda f: _promtool(promtool, "test", "rules", str(f)), files))
    failed = [f"{f.name}:\n{r.stdout}{r.stderr}" for f, r in zip(files, results, strict=True) if r.returncode != 0]
    assert not failed, "\n".join(failed)


def test_there_are_rule_files_and_tests():
    assert len(RULE_FILES) >= 2 and TEST_FILES and len(ALERTS) >= 13 and len(RECORDS) >= 40


@pytest.mark.parametrize("path", SERVING_FILES, ids=[p.name for p in SERVING_FILES])
def test_serving_rules_record_every_series_the_controller_reads_and_have_a_promtool_test(path):
    records = {r["record"] for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    helpers = {r for r in records if re.fullmatch(r"gputide:\w+:\w+", r)}  # level:metric:operation steps
    assert records - helpers == {"gputide_inference_demand_rps", "gputide_inference_latency_p99_seconds",
                                 "gputide_inference_replicas", "gputide_inference_replicas_ready",
                                 "gputide_inference_pods_reporting", "gputide_inference_pods_stalled"}
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
