"""A loan under an HPA, from the API objects to the plan: the HPA's own metrics, read from its status
(`k8s_hpa_reads.KubernetesHpaWants`, `k8s_hpa_wants`), reach the capacity planner through the snapshot's
`ServiceStatus.hpa_wants` (`serving.with_hpa_wants`, as `PrometheusTelemetrySource` merges them) and
`view_from_snapshot`. An HPA whose metrics keep all its replicas frees nothing, so no loan is made and training is
not grown onto GPUs it keeps; one whose metrics ask for 3 of 8 has its floor lowered, and training grows onto the 5
it gives up, not 7. Before this wiring `hpa_wants` was None in every view: a loan to the forecast's floor and
training grown by every replica above it, while the HPA kept them (workers pending)."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
from fakeapi import FakeKube, deployment, hpa, job, pod

from balancer import config
from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_hpa_reads import KubernetesHpaWants
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.fleet import scaled_fleet
from balancer.model import Forecast, Plan, ScaleInference, ScaleTraining, ServiceStatus
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.sim import SimCluster
from balancer.telemetry.serving import with_hpa_wants
from tests.capacity.settled_state import settled

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "32"}


def cluster(kube: FakeKube, utilization: int) -> list[str]:
    """8 vllm replicas under an HPA whose CPU reads `utilization` against a target of 80, and 24 training workers:
    32 GPUs, every one taken."""
    kube.add(deployment("vllm", "team-a", replicas=8))
    h = hpa("vllm", "vllm", "team-a", lo=8, hi=16)   # gputide's floor of 8 binds (the operator's own: 1)
    h["metadata"]["annotations"] = {"gputide.io/own-min-replicas": "1", "gputide.io/floor-min-replicas": "8"}
    h["spec"]["metrics"] = [{"type": "Resource", "resource": {
        "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    h["status"] = {"currentReplicas": 8, "desiredReplicas": 8, "lastScaleTime": "2020-01-01T00:00:00Z",
                   "currentMetrics": [{"type": "Resource", "resource": {
                       "name": "cpu", "current": {"averageUtilization": utilization, "averageValue": "2"}}}]}
    kube.add(h)
    kube.add(job("train", "research", parallelism=24))
    names = []
    for i in range(8):
        p = pod(f"vllm-7d9f8-{i}", "team-a", gpus=1, owner=("ReplicaSet", "vllm-7d9f8"),
                labels={"pod-template-hash": "7d9f8"})
        kube.add(p)
        names.append(f"team-a/{p['metadata']['name']}")
    for i in range(24):
        p = pod(f"train-{i}", "research", gpus=1, owner=("Job", "train"))
        p["metadata"]["annotations"] = ELASTIC
        kube.add(p)
        names.append(f"research/train-{i}")
    return names


def watched(api) -> dict | None:
    """What the reader says once it has listed the HPAs a whole scale-down window (300 s; before that each keeps its
    replicas: the recommendations the controller holds are not known), nothing higher seen meanwhile."""
    t = [1_700_000_000.0]
    reader = KubernetesHpaWants(api, ttl_s=10.0, clock=lambda: t[0])
    for _ in range(11):
        reader()
        t[0] += 30.0
    return reader()


def plan(api, names: list[str]):
    owners = KubernetesWorkloads(api)()
    base = SimCluster(scaled_fleet(32), seed=0).snapshot()
    workloads = tuple(owners[n] for n in names)
    # the serving series say 5 req/s (one replica's worth); the HPAs' reading is merged in as the telemetry does
    services = with_hpa_wants({"vllm": ServiceStatus(name="vllm", demand_rps=5.0, p99_latency_s=0.1,
                                                     slo_latency_s=1.0, replicas=8, namespace="team-a")},
                              workloads, watched(api))
    snap = replace(base, workloads=workloads, placements={n: (i,) for i, n in enumerate(names)}, services=services,
                   suspended_jobs=())
    profiles = {"vllm": ServiceCapacity(name="vllm", rps_per_replica=10.0, warmup_s=300.0, min_replicas=1,
                                        slo_latency_s=1.0)}
    a = np.full(24, 5.0)
    q = {0.5: a, 0.9: a, 0.99: a}
    # a planner that has watched the service a while (a fresh one holds its loans until it has); no hotspot plan
    out, _ = plan_with_capacity(
        snap, {"vllm": Forecast(service="vllm", issued_at=base.time, step_s=600.0, quantiles=q)},
        config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True)),
        planner_mod.PlannerState(capacity=settled(view_from_snapshot(snap, profiles))), profiles=profiles,
        capacity_policy=CapacityPolicy(min_hold_s=0.0),
        base=lambda snapshot, fc, pol, state: (Plan(actions=()), state or planner_mod.PlannerState()))
    scales = [x for x in out.actions if isinstance(x, ScaleInference)]
    grown = sum(x.workers - x.previous_workers for x in out.actions if isinstance(x, ScaleTraining))
    return snap, scales, grown


def test_an_hpa_whose_metrics_keep_its_replicas_lends_nothing(kube: FakeKube, api):
    # 78% of an 80% target: within the tolerance, the HPA keeps all 8 whatever its floor
    _, scales, grown = plan(api, cluster(kube, 78))
    assert scales == [] and grown == 0


def test_an_hpa_whose_metrics_ask_for_three_frees_five(kube: FakeKube, api):
    snap, (scale,), grown = plan(api, cluster(kube, 30))   # 8 x 30/80 = 3
    assert scale.service == "vllm" and scale.replicas < 3 and "its HPA keeps 3" in scale.reason
    assert grown == 5
    result = KubernetesActuator(api).apply(scale, snap)
    assert result.outcome is Outcome.APPLIED, result.detail
    # the floor goes down to the forecast's; the HPA keeps the 3 its metrics ask for
    assert kube.get("horizontalpodautoscalers", "vllm", "team-a")["spec"]["minReplicas"] == scale.replicas


def test_the_reader_lists_once_per_ttl_keeps_its_last_answer_and_knows_nothing_before_its_first(kube: FakeKube, api,
                                                                                               clock):
    cluster(kube, 30)
    reader = KubernetesHpaWants(api, ttl_s=10.0, clock=clock, sleep=lambda _s: None)

    def lists() -> int:
        return sum(1 for r in list(kube.requests) if "horizontalpodautoscalers" in r.path)

    kube.inject("GET", r"/horizontalpodautoscalers", 403)
    assert reader() is None   # never read: with_hpa_wants then has every service lend nothing
    assert reader()["team-a/vllm"][0] == 8   # a failed list is tried again at the next call; its window not watched
    listed = lists()
    clock.advance(9.0)
    assert reader()["team-a/vllm"][0] == 8 and lists() == listed   # within its ttl: no list
    for _ in range(30):
        clock.advance(10.0)
        reader()
    assert reader() == {"team-a/vllm": (3, "")}   # watched a whole window, nothing higher seen
    listed = lists()
    kube.inject("GET", r"/horizontalpodautoscalers", 500, count=10)
    clock.advance(10.0)
    assert reader() == {"team-a/vllm": (3, "")} and lists() > listed   # the list failed: the last answer


def test_the_reader_keeps_the_highest_recommendation_of_the_window(kube: FakeKube, api, clock):
    """Demand falls while gputide's floor binds: the HPA never scales (its lastScaleTime long past), but the
    controller keeps the highest recommendation of its last 300 s, which the reader saw (audit a7)."""
    cluster(kube, 78)   # within the tolerance: all 8
    reader = KubernetesHpaWants(api, ttl_s=10.0, clock=clock)
    for _ in range(40):
        reader()
        clock.advance(10.0)
    assert reader()["team-a/vllm"][0] == 8
    metrics = kube.get("horizontalpodautoscalers", "vllm", "team-a")["status"]["currentMetrics"]
    metrics[0]["resource"]["current"]["averageUtilization"] = 30   # 3 now
    kube.mutate("horizontalpodautoscalers", "vllm", "team-a", {"status": {"currentMetrics": metrics}})
    clock.advance(10.0)
    n, why = reader()["team-a/vllm"]
    assert n == 8 and "window" in why   # 8 asked for 10 s ago
    for _ in range(28):   # called once a ttl (a longer gap: watched anew)
        clock.advance(10.0)
        answer = reader()
    assert answer["team-a/vllm"][0] == 8   # 8 asked 290 s ago: within it still
    clock.advance(10.0)
    reader()
    clock.advance(10.0)
    assert reader() == {"team-a/vllm": (3, "")}


def test_a_reader_whose_lists_keep_failing_knows_nothing_after_three_ttls(kube: FakeKube, api, clock, caplog):
    """A failed list kept the last answer for ever (audit a7): the HPAs' metrics move on, and a loan counted what
    they asked for long before. Three ttls with no list: None (every service lends nothing), logged once; listed
    again, each HPA is watched anew (the recommendations of the gap were not seen)."""
    cluster(kube, 30)
    reader = KubernetesHpaWants(api, ttl_s=10.0, clock=clock, sleep=lambda _s: None)
    for _ in range(32):
        reader()
        clock.advance(10.0)
    assert reader() == {"team-a/vllm": (3, "")}
    fault = kube.inject("GET", r"/horizontalpodautoscalers", 500, count=1000)
    clock.advance(30.0)
    assert reader() == {"team-a/vllm": (3, "")}   # three ttls: the last answer still
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_hpa_reads"):
        clock.advance(1.0)
        assert reader() is None
        clock.advance(10.0)
        assert reader() is None
    assert sum("not listed" in r.getMessage() for r in caplog.records) == 1
    fault.remaining = 0
    clock.advance(10.0)
    assert reader()["team-a/vllm"][0] == 8   # listed again: watched anew, its window not yet whole
