"""The GPU Fleet and Balancer dashboards mark every hotspot action the controller carries out, and only those; the
Tidal Capacity dashboard marks the tide's loans and reclaims, and only those.

The controller counts an action as `gputide_actions_total{type=action.kind, reason=reason_label(action)}`
(balancer/loop.py); each case below builds one action as the planner would, takes its labels from that same code
and finds the annotation whose selector takes it. promtool then evaluates a committed annotation query over
counters: a (type, reason) series born at 1 (a restarted controller that acted before its first scrape), one
standing still, one incremented.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from panel_eval import run

from balancer.actions import Migrate, ScaleInference, ScaleTraining, SetPowerLimit, TaintNode
from balancer.audit import reason_label
from balancer.dashboards_render import interpolate

ROOT = Path(__file__).resolve().parents[2]
HEAT_DASHBOARDS = ["gpu-fleet", "balancer"]

HOTSPOT_ACTIONS = {
    "a hotspot migration": Migrate(reason="GPU 0 hot", workload="w", source_gpus=(0,), target_gpus=(1,),
                                   target_node="n1"),
    "a power cap": SetPowerLimit(reason="GPU 0 hot", gpu=0, uuid="GPU-0", node="n0", watts=500,
                                 previous_watts=700),
    "a power cap given back": SetPowerLimit(reason="cooled", gpu=0, uuid="GPU-0", node="n0", watts=700,
                                            previous_watts=500, give_back=True),
    "a hot taint": TaintNode(reason="GPU 0 hot", node="n0"),
    "a hot taint renewed": TaintNode(reason="still hot", node="n0", renew=True),
    "a hot taint removed": TaintNode(reason="cooled", node="n0", remove=True),
    "a training job shrunk for heat": ScaleTraining(reason="worker on hot GPU 0", job="j", workers=3,
                                                    previous_workers=4, shrunk_from=4),
    "a training job given its workers back": ScaleTraining(reason="cooled", job="j", workers=4,
                                                           previous_workers=3, shrunk_from=0),
}
TIDE_ACTIONS = {  # as balancer/plan/capacity_pools.py and capacity_plan.py build them, by the marker they belong to
    "a loan of idle GPUs to training": ("GPU loans to training", ScaleTraining(
        reason="loan idle GPUs to training: +2 workers on idle GPUs", job="j", workers=6, previous_workers=4,
        cause="loan")),
    "a training shrink to reclaim GPUs": ("GPU reclaims for inference", ScaleTraining(
        reason="make room for inference", job="j", workers=2, previous_workers=4, reclaim=True, cause="reclaim")),
    "an inference scale-up": ("GPU reclaims for inference", ScaleInference(
        reason="forecast", service="svc", replicas=3, previous_replicas=2)),
}
OTHER_ACTIONS = {
    "a co-location shrink for a service's SLO": ScaleTraining(
        reason="svc p99 190 ms near SLO 200 ms on GPUs shared with this job", job="j", workers=3,
        previous_workers=4, cause="colocation_slo"),
    "a co-location give-back once the service has slack": ScaleTraining(
        reason="svc has latency slack again: give the workers back", job="j", workers=4, previous_workers=3,
        cause="colocation_slack"),
    **{case: action for case, (_, action) in TIDE_ACTIONS.items()},
}


def all_annotations(name: str) -> list[dict]:
    dashboard = json.loads((ROOT / "dashboards" / f"{name}.json").read_text())
    return [a for a in dashboard["annotations"]["list"] if a.get("expr")]


def annotations(name: str) -> list[dict]:
    """The dashboard's markers of the controller's actions (gputide_actions_total)."""
    return [a for a in all_annotations(name) if "gputide_actions_total" in a["expr"]]


def marks(annotation: dict, action_type: str, reason: str) -> bool:
    """Whether one of the annotation's selectors takes the series {type=action_type, reason=reason}."""
    selectors = [dict(re.findall(r'(\w+)=~?"([^"]*)"', selector))
                 for selector in set(re.findall(r"gputide_actions_total\{([^}]*)\}", annotation["expr"]))]
    assert selectors, annotation["expr"]
    return any(labels["type"] == action_type and re.fullmatch(labels.get("reason", ".*"), reason) is not None
               for labels in selectors)


@pytest.mark.parametrize("dashboard", HEAT_DASHBOARDS)
@pytest.mark.parametrize("case", HOTSPOT_ACTIONS)
def test_each_hotspot_action_is_marked_by_one_annotation(dashboard, case):
    action = HOTSPOT_ACTIONS[case]
    marking = [a["name"] for a in annotations(dashboard) if marks(a, action.kind, reason_label(action))]
    assert len(marking) == 1, f"{dashboard}: {case} ({action.kind}, {reason_label(action)}) marked by {marking}"


@pytest.mark.parametrize("dashboard", HEAT_DASHBOARDS)
@pytest.mark.parametrize("case", OTHER_ACTIONS)
def test_actions_not_taken_for_heat_are_not_marked(dashboard, case):
    action = OTHER_ACTIONS[case]
    assert not [a["name"] for a in annotations(dashboard) if marks(a, action.kind, reason_label(action))]


@pytest.mark.parametrize("case", TIDE_ACTIONS)
def test_the_tide_s_loans_and_reclaims_are_each_marked_by_their_own_capacity_annotation(case):
    name, action = TIDE_ACTIONS[case]
    marking = [a["name"] for a in annotations("tidal-capacity") if marks(a, action.kind, reason_label(action))]
    assert marking == [name], f"{case} ({action.kind}, {reason_label(action)}) marked by {marking}"


@pytest.mark.parametrize("case", [*HOTSPOT_ACTIONS, *(c for c in OTHER_ACTIONS if c not in TIDE_ACTIONS)])
def test_capacity_annotations_leave_hotspot_and_colocation_resizes_out(case):
    action = {**HOTSPOT_ACTIONS, **OTHER_ACTIONS}[case]
    assert not [a["name"] for a in annotations("tidal-capacity") if marks(a, action.kind, reason_label(action))]


@pytest.mark.parametrize("dashboard", [*HEAT_DASHBOARDS, "tidal-capacity"])
def test_events_name_the_reason_in_their_text_and_colours_differ(dashboard):
    found = annotations(dashboard)
    assert found
    for a in found:
        assert "{{reason}}" in a["textFormat"] and "by (type, reason)" in a["expr"], a["name"]
    every = all_annotations(dashboard)
    assert len({a["iconColor"] for a in every}) == len(every)


def test_hotspot_colours_differ_from_the_loans_and_reclaims():
    heat = {a["iconColor"] for a in annotations("gpu-fleet")}
    assert not heat & {a["iconColor"] for a in all_annotations("tidal-capacity")}


@pytest.mark.integration
def test_a_kueue_quota_correction_is_marked_with_its_queue(promtool, tmp_path):
    """The controller gives quota lent to a training queue beyond what its Jobs hold back to inference, once a cycle
    (gputide_kueue_quota_corrections_total{queue}, 0 from the start): the Tidal Capacity dashboard marks each
    correction, next to the loans and reclaims it follows, with the queue as its text."""
    (quota,) = [a for a in all_annotations("tidal-capacity") if "gputide_kueue_quota_corrections_total" in a["expr"]]
    assert quota["textFormat"] == "{{queue}}"
    expr = f"sgn({interpolate(quota['expr'], {'cluster': '.*'}, step=60, range_s=3600)})"
    series = 'gputide_kueue_quota_corrections_total{cluster="c", job="gputide", queue="training"}'
    run(promtool, tmp_path, [{"series": series, "values": "0x40 1x40"}], [
        {"expr": expr, "eval_time": "9m", "exp_samples": []},
        {"expr": expr, "eval_time": "10m15s", "exp_samples": [{"labels": '{queue="training"}', "value": 1}]},
        {"expr": expr, "eval_time": "15m", "exp_samples": []}], interval="15s")


def _taint_query() -> str:
    (taints,) = [a for a in annotations("gpu-fleet") if marks(a, "taint_node", "hot_node")]
    # Grafana's annotation step (1 m), as the PNG renderer fills $__rate_interval for it: 75 s
    return interpolate(taints["expr"], {"cluster": ".*"}, step=60, range_s=3600)


def _events(minute: str, *reasons: str) -> dict:
    """The query at `minute`, each event as 1: the taint reasons it marks then."""
    return {"expr": f"sgn({_taint_query()})", "eval_time": minute,
            "exp_samples": [{"labels": f'{{type="taint_node", reason="{r}"}}', "value": 1} for r in reasons]}


@pytest.mark.integration
def test_a_first_action_steady_counters_and_an_increment_read_as_events(promtool, tmp_path):
    """15 s scrapes: `hot_node` appears at 1 at minute 10 (a restarted controller's taint before its first
    scrape), `renew` appears at 0 then (a controller starts every pair at 0) and goes to 1 at minute 20 (its first
    renewal), `cooled` has counted 1 since minute 0 and goes to 2 at minute 20, a migration counts along and is
    not a taint."""
    actions = 'gputide_actions_total{{cluster="c", job="gputide", type="{}", reason="{}"}}'
    test = {"tests": [{
        "interval": "15s",
        "input_series": [
            {"series": actions.format("taint_node", "hot_node"), "values": "_x40 1x80"},
            {"series": actions.format("taint_node", "renew"), "values": "_x40 0x40 1x40"},
            {"series": actions.format("taint_node", "cooled"), "values": "1x80 2x40"},
            {"series": actions.format("migrate", "hotspot"), "values": "0+1x120"},
        ],
        "promql_expr_test": [
            _events("9m"),                        # nothing new: no event, a counter standing still included
            _events("10m15s", "hot_node"),        # the first taint: its series was born at 1; renew's at 0 is none
            _events("12m"),                       # the taint is over
            _events("20m30s", "cooled", "renew"),  # the second untaint and the first renewal: increments
            _events("25m"),
        ],
    }]}
    path = tmp_path / "annotations_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
