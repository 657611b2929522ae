"""Capacity shifting from the pods to the API objects: pods read from the (fake) API server become owners, the pure
planner decides, the safety guard reviews, and the Kubernetes actuator changes the right objects in the right
namespaces. Two Deployments share the name `vllm` (teams a and b); one lends, the other needs GPUs back from an
elastic Job in a third namespace."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from fakeapi import FakeKube, deployment, hpa, job, pod

from balancer import config
from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.fleet import scaled_fleet
from balancer.model import Forecast, Plan, ScaleInference, ScaleTraining, ServiceStatus
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import SafetyGuard, SafetyLedger
from balancer.sim import SimCluster
from tests.capacity.settled_state import settled

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "32"}


def serving_pods(kube: FakeKube, namespace: str, n: int) -> list[str]:
    names = []
    for i in range(n):
        p = pod(f"vllm-7d9f8-{namespace}-{i}", namespace, gpus=1, owner=("ReplicaSet", "vllm-7d9f8"),
                labels={"pod-template-hash": "7d9f8"})
        kube.add(p)
        names.append(f"{namespace}/{p['metadata']['name']}")
    return names


def flat(service: str, level: float, now: float) -> Forecast:
    a = np.full(24, level)
    return Forecast(service=service, issued_at=now, step_s=600.0, quantiles={0.5: a, 0.9: a, 0.99: a})


def test_two_same_named_deployments_lend_and_reclaim_through_the_api_each_in_its_own_namespace(kube: FakeKube, api):
    kube.add(deployment("vllm", "team-a", replicas=6))
    kube.add(deployment("vllm", "team-b", replicas=4))
    kube.add(hpa("vllm", "vllm", "team-b", lo=4, hi=16))
    kube.add(job("train", "research", parallelism=22))
    names = serving_pods(kube, "team-a", 6) + serving_pods(kube, "team-b", 4)
    for i in range(22):
        p = pod(f"train-{i}", "research", gpus=1, owner=("Job", "train"))
        p["metadata"]["annotations"] = ELASTIC
        kube.add(p)
        names.append(f"research/train-{i}")

    owners = KubernetesWorkloads(api)()
    assert {w.owner for w in owners.values()} == {"team-a/vllm", "team-b/vllm", "train"}
    sim = SimCluster(scaled_fleet(32), seed=0)  # 32 GPUs, every one taken by the pods above
    base = sim.snapshot()
    assert len(base.gpus) == len(names) == 32
    now = base.time
    services = {"team-a/vllm": ServiceStatus(name="team-a/vllm", demand_rps=5.0, p99_latency_s=0.1,
                                             slo_latency_s=1.0, replicas=6),
                "team-b/vllm": ServiceStatus(name="team-b/vllm", demand_rps=90.0, p99_latency_s=0.4,
                                             slo_latency_s=1.0, replicas=4)}
    snap = replace(base, workloads=tuple(owners[n] for n in names),
                   placements={n: (i,) for i, n in enumerate(names)}, services=services, suspended_jobs=())
    profiles = {n: ServiceCapacity(name=n, rps_per_replica=10.0, warmup_s=300.0, min_replicas=1, slo_latency_s=1.0)
                for n in services}
    forecasts = {"team-a/vllm": flat("team-a/vllm", 5.0, now), "team-b/vllm": flat("team-b/vllm", 90.0, now)}
    policy = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))

    def no_hotspots(snapshot, fc, pol, state):
        return Plan(actions=()), state or planner_mod.PlannerState()

    # a planner that has watched both services a while (a fresh one holds its loans until it has)
    watched = planner_mod.PlannerState(capacity=settled(view_from_snapshot(snap, profiles)))
    plan, _ = plan_with_capacity(snap, forecasts, policy, watched, profiles=profiles,
                                 capacity_policy=CapacityPolicy(min_hold_s=0.0), base=no_hotspots)
    review = SafetyGuard(policy.safety).review(plan.actions, snap, SafetyLedger(), now)
    assert not review.rejected, review.rejected
    kinds = {(type(a).__name__, a.target) for a in review.accepted}   # a shrink may name a service too
    assert kinds == {("ScaleInference", "team-a/vllm"), ("ScaleInference", "team-b/vllm"),
                     ("ScaleTraining", "train")}, kinds

    actuator = KubernetesActuator(api)
    for action in review.accepted:
        result = actuator.apply(action, snap)
        assert result.outcome is Outcome.APPLIED, (action, result.detail)

    lend = next(a for a in review.accepted if isinstance(a, ScaleInference) and a.service == "team-a/vllm")
    grow = next(a for a in review.accepted if isinstance(a, ScaleInference) and a.service == "team-b/vllm")
    shrink = next(a for a in review.accepted if isinstance(a, ScaleTraining))
    assert lend.replicas < 6 and grow.replicas > 4 and shrink.reclaim and shrink.workers < 22
    # team-a's Deployment scaled directly, team-b's through its HPA floor; never the other team's object
    assert kube.get("deployments", "vllm", "team-a")["spec"]["replicas"] == lend.replicas
    assert kube.get("deployments", "vllm", "team-b")["spec"]["replicas"] == 4
    assert kube.get("horizontalpodautoscalers", "vllm", "team-b")["spec"]["minReplicas"] == grow.replicas
    assert kube.get("jobs", "train", "research")["spec"]["parallelism"] == shrink.workers
    assert kube.get("jobs", "train", "default") is None and kube.get("deployments", "vllm", "default") is None
