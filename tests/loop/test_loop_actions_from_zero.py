"""Every (type, reason) of `gputide_actions_total` the controller can count exists at 0 before its first action, so
increase() and rate() see that action: a series created at its first increment starts at 1 and reads as no change
(the Balancer dashboard's "Actions by type and reason" panel and the annotations missed first actions)."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry, generate_latest
from test_loop_metrics import Source, loop

from balancer.action_labels import action_label_pairs
from balancer.audit import reason_label
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, ScaleTraining, WorkloadClass
from balancer.plan import planner as planner_mod
from balancer.telemetry.promserver import Target

RECLAIM = ScaleTraining(job="job", workers=0, previous_workers=1, reason="make room for inference", reclaim=True,
                        cause="reclaim", expected_gain=5.0)


def counted(reg: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {(s.labels["type"], s.labels["reason"]): s.value for f in reg.collect() for s in f.samples
            if s.name == "gputide_actions_total"}


def test_every_pair_the_controller_can_count_starts_at_0():
    reg = CollectorRegistry()
    ControllerMetrics(reg)
    assert counted(reg) == dict.fromkeys(action_label_pairs(), 0.0)
    assert ("scale_training", "loan") in counted(reg) and ("taint_node", "hot_node") in counted(reg)
    assert len(counted(reg)) <= 20, "kinds x reasons stays small"


def test_the_loop_counts_an_action_from_0_and_leaves_the_other_pairs_at_0():
    snap = snapshot(make_fleet(1, 4), age=0.0,
                    workloads=[(workload("job-0", WorkloadClass.TRAINING, owner="job", elastic_min=0), (0,))])

    def planner(s, forecasts, policy, state):
        return Plan(actions=(RECLAIM,)), state or planner_mod.PlannerState()

    rec, reg = loop(Source(snap), [0.0], planner=planner)
    assert rec.run_once().status == "ok"
    after = counted(reg)
    assert after.pop(("scale_training", "reclaim")) == 1
    assert set(after.values()) == {0.0}


@pytest.mark.integration
def test_a_first_action_reads_as_an_increase_on_prometheus(prometheus_factory, metrics_server):
    metrics = ControllerMetrics(CollectorRegistry())
    server = metrics_server(generate_latest(metrics.registry).decode())
    prom = prometheus_factory([Target("gputide", server.address)])
    pair = f'type="{RECLAIM.kind}", reason="{reason_label(RECLAIM)}"'
    prom.wait_for(f"gputide_actions_total{{{pair}}} == 0", bool, timeout=30)
    metrics.actions.labels(type=RECLAIM.kind, reason=reason_label(RECLAIM)).inc()   # as the loop counts it
    server.text = generate_latest(metrics.registry).decode()
    (first,) = prom.wait_for(f"increase(gputide_actions_total{{{pair}}}[1m]) > 0", bool, timeout=30)
    assert float(first["value"][1]) >= 1
