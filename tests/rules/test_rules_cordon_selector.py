"""Which nodes are cordoned or tainted for deletion is said once for the alerts, by node:gpu_cordoned_or_tainted:bool,
and the no-cordon-series fallback once, inside node:gpu_departure_planned:last1h (rules/gputide-alerts.yaml). Both
are read from the same evaluation only while they are recorded in their readers' group, before them: a reader in
another group, or before the record, reads it an evaluation late (an uncordoned node counted a minute late). The raw
copies of the selector that stay (node:gpu_departure_planned:bool's own group and [1m] windows, last1h's upgrade-hour
subquery over the hour before the rules were loaded) must name the same taint keys. The values are pinned by the
promtool tests (rules/tests/gputide-cordon-record_test.yaml)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "rules").glob("*.yaml"))
GROUPS = [g for f in RULE_FILES for g in yaml.safe_load(f.read_text())["groups"]]
CORDON = "node:gpu_cordoned_or_tainted:bool"
LAST1H = "node:gpu_departure_planned:last1h"
TAINT_KEYS = re.compile(r'kube_node_spec_taint\{key=~"([^"]*)"\}')
FALLBACK = "present_over_time(kube_node_spec_unschedulable[1h])"


def _name(rule: dict) -> str:
    return rule.get("record") or rule["alert"]


def _reads(rule: dict, record: str) -> bool:
    return bool(re.search(rf"(?<![\w:]){re.escape(record)}(?![\w:])", rule["expr"]))


def _rules_naming(text: str) -> set[str]:
    return {_name(r) for g in GROUPS for r in g["rules"] if text in r["expr"]}


def _readers_follow_the_record(record: str) -> set[str]:
    [group] = [g for g in GROUPS if any(r.get("record") == record for r in g["rules"])]
    names = [_name(r) for r in group["rules"]]
    readers = {_name(r) for g in GROUPS for r in g["rules"] if _reads(r, record) and r.get("record") != record}
    assert readers <= set(names), f"{record} is read from another group: {readers - set(names)}"
    assert all(names.index(n) > names.index(record) for n in readers), f"{record} is read before it is recorded"
    return readers


def test_the_cordon_record_is_read_in_its_group_after_it_by_the_maintenance_rules():
    assert _readers_follow_the_record(CORDON) == {"node:gpu_maintained:bool", "GpuNodeDarkAfterMaintenance",
                                                  "node:gpu_count:in_service", "GpuNodeShortAfterMaintenance"}


def test_only_the_record_and_the_copies_a_record_would_change_name_the_taint_keys():
    assert _rules_naming("kube_node_spec_taint{key=~") == {CORDON, "node:gpu_departure_planned:bool", LAST1H}


def test_every_copy_of_the_selector_names_the_same_taint_keys():
    keys = [set(k.split("|")) for g in GROUPS for r in g["rules"] for k in TAINT_KEYS.findall(r["expr"])]
    assert len(keys) == 4 and all(k == keys[0] for k in keys), keys
    assert keys[0] == {"ToBeDeletedByClusterAutoscaler", "karpenter.sh/disrupted", "karpenter.sh/disruption",
                       "node.kubernetes.io/unschedulable"}


def test_the_no_cordon_series_fallback_is_written_once_inside_the_departure_record():
    assert _rules_naming(FALLBACK) == {LAST1H}
    assert _readers_follow_the_record(LAST1H) == {"GpuMissingFromTelemetry", "GpuCountDropped"}
