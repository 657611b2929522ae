"""A vLLM service run as a StatefulSet (0a4bf1df: its `gputide_inference_replicas` from `kube_statefulset_replicas`,
so `replicas_from_spec`): its pods are BATCH unless a --services profile names the StatefulSet or the pod carries the
workload-class label, and `short` counted only INFERENCE pods as placed, so every replica asked read "not running":
its hot pod was throttled, not moved, and the guard refused the move ("llm already has 2 replica(s) unavailable");
with a node forgotten, its 2-GPU replica was excused once per dark GPU."""

from __future__ import annotations

import dataclasses

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ServiceStatus, WorkloadClass
from balancer.plan.planner import plan
from balancer.safety import SafetyGuard, SafetyLedger
from balancer.unavailable import short, short_now

FL = make_fleet(3, 4)


def status(replicas: int = 2) -> ServiceStatus:
    return ServiceStatus(name="llm", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=True)


def llm(i: int, gpus: int = 1):
    return workload(f"llm-{i}", WorkloadClass.BATCH, owner="llm", gpus=gpus)


def test_a_statefulsets_batch_pods_placed_are_its_replicas_running():
    s = snapshot(FL, workloads=[(llm(0), (0,)), (llm(1), (4,))], services={"llm": status()})
    assert short(s) == {}
    assert dict(short_now(s)) == {}


def test_one_of_its_two_pods_not_placed_is_one_replica_down_not_two():
    s = snapshot(FL, workloads=[(llm(0), (0,)), (llm(1), ())], services={"llm": status()})
    assert short(s) == {"llm": 1}
    assert short(s, owners=["llm"]) == {"llm": 1}


def test_a_dark_node_excuses_its_2_gpu_replicas_whole():
    # 4 asked, 2 running, 2 dark GPUs: one 2-GPU replica may run there, one more is down
    pods = [(llm(0, 2), (0, 1)), (llm(1, 2), (4, 5))]
    s = dataclasses.replace(snapshot(FL, workloads=pods, services={"llm": status(4)}), forgotten_nodes={"gone": 2})
    assert short(s) == {"llm": 1}


def test_a_statefulsets_hot_pod_is_migrated_and_the_guard_agrees():
    s = snapshot(FL, workloads=[(llm(0), (0,)), (llm(1), (4,))], temps={0: 86}, services={"llm": status()})
    policy, state = BalancerPolicy(), None   # maxUnavailablePerWorkload 1
    for _ in range(2):   # two hot readings make a hotspot
        p, state = plan(s, None, policy, state)
    moves = [a for a in p.actions if a.kind == "migrate"]
    assert [a.workload for a in moves] == ["batch/llm-0"]
    assert "power_limit" not in {a.kind for a in p.actions}
    assert SafetyGuard(policy.safety).review(moves, s, SafetyLedger(), 2000.0).accepted == tuple(moves)
