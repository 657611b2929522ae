"""One identity for a service across the SLO rules: the rules `gputide slo-rules` writes label their series with
`SERVICE_IDENTITY` (cluster, namespace, service), and the gputide-slo group (rules/gputide-recording.yaml) and the
static burn-rate alerts (rules/gputide-alerts.yaml) keep and join on the same labels, so a service in one namespace
neither silences nor is silenced by one of the same name in another namespace of its cluster. The behaviour itself
is in the promtool tests (rules/tests/gputide-slo-namespaces_test.yaml)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from balancer.telemetry import slo_rules as sr

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = set(sr.SERVICE_IDENTITY)


def _group(path: Path, name: str) -> list[dict]:
    [group] = [g for g in yaml.safe_load(path.read_text())["groups"] if g["name"] == name]
    return group["rules"]


def _labels(text: str) -> set[str]:
    return {label.strip() for label in text.split(",")}


def test_a_service_is_its_cluster_namespace_and_name():
    assert sr.SERVICE_IDENTITY == ("cluster", "namespace", "service")


def test_the_generated_rates_carry_the_whole_identity():
    [slo] = sr.choose_buckets([("chat", 0.5)], sr.VLLM_E2E_BUCKETS)
    for rule in sr.rule_groups([slo])[0]["rules"]:
        if "labels" in rule:  # the rates; the ratios divide two of them
            summed = re.match(r"sum by \(([^)]*)\)", rule["expr"])
            assert summed and _labels(summed[1]) | set(rule["labels"]) == IDENTITY, rule["record"]


def test_the_recording_group_keeps_the_namespace_and_prefers_the_counters_per_identity():
    rates = [r for r in _group(ROOT / "rules" / "gputide-recording.yaml", "gputide-slo") if "_total[" in r["expr"]]
    assert len(rates) == 2 * len(sr.WINDOWS)
    for rule in rates:
        summed = re.match(r"sum by \(([^)]*)\)", rule["expr"])
        joined = re.search(r"\bor on \(([^)]*)\)", rule["expr"])
        assert summed and _labels(summed[1]) == IDENTITY, rule["record"]
        assert joined and _labels(joined[1]) == IDENTITY, rule["record"]


def test_the_static_alerts_skip_only_the_identities_the_generated_rules_cover():
    alerts = _group(ROOT / "rules" / "gputide-alerts.yaml", "gputide-slo-alerts")
    assert {a["alert"] for a in alerts} == {a.name for a in sr.BURN_ALERTS}
    for alert in alerts:
        joins = re.findall(r"\bunless on \(([^)]*)\)", alert["expr"])
        assert [_labels(j) for j in joins] == [IDENTITY], alert["alert"]
