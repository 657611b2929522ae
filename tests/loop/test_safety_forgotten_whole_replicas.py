"""A forgotten node's GPUs excuse a service's missing replicas as whole replicas (`balancer.unavailable.short`): a
replica of 2 GPUs once per two dark GPUs. Counted one replica per GPU for every service, a 2-GPU service short one
replica with a 2-GPU node dark had both its missing replicas excused, and the move of a running one was accepted:
two down under `maxUnavailablePerWorkload` 1."""

from __future__ import annotations

import dataclasses

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import SafetyPolicy
from balancer.model import Migrate, ServiceStatus
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
NOW = 10_000.0


def status(replicas: int) -> ServiceStatus:
    return ServiceStatus(name="llm", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=True)


def review(pods, replicas: int, dark, src: tuple[int, ...], dst: tuple[int, ...]):
    forgotten = dark if isinstance(dark, dict) else {"gone": dark}
    snap = dataclasses.replace(snapshot(FL, workloads=pods, services={"llm": status(replicas)}),
                               forgotten_nodes=forgotten)
    move = Migrate(workload=pods[0][0].name, source_gpus=src, target_gpus=dst, target_node=FL.gpus[dst[0]].node,
                   reason="hot", expected_gain=1.0)
    r = SafetyGuard(SafetyPolicy()).review([move], snap, SafetyLedger(), NOW)   # maxUnavailablePerWorkload 1
    return [a.workload for a in r.accepted], [exc.reason for _, exc in r.rejected]


def test_two_dark_gpus_excuse_one_replica_of_two_gpus():
    # 4 asked, 2 running; the dark node holds one 2-GPU replica at most: one more is down, the move is refused
    pods = [(workload("llm-0", gpus=2), (0, 1)), (workload("llm-1", gpus=2), (4, 5))]
    assert review(pods, 4, 2, (0, 1), (8, 9)) == ([], ["max_unavailable"])
    # four dark GPUs may hold both missing replicas: none is known down, the move goes
    assert review(pods, 4, 4, (0, 1), (8, 9)) == (["inference/llm-0"], [])
    # a replica of one GPU is still excused once per dark GPU
    pods = [(workload("llm-0"), (0,)), (workload("llm-1"), (4,))]
    assert review(pods, 4, 2, (0,), (8,)) == (["inference/llm-0"], [])
    assert review(pods, 4, 1, (0,), (8,)) == ([], ["max_unavailable"])


def test_a_replica_is_counted_whole_node_by_node():
    # two forgotten boards of one GPU each hold no 2-GPU replica: 4 asked, 2 running, 2 down; summed first (2 // 2),
    # one was excused and the move of a running replica accepted (audit s36a6)
    pods = [(workload("llm-0", gpus=2), (0, 1)), (workload("llm-1", gpus=2), (4, 5))]
    assert review(pods, 4, {"g1": 1, "g2": 1}, (0, 1), (8, 9)) == ([], ["max_unavailable"])
    assert review(pods, 3, {"g1": 1, "g2": 1}, (0, 1), (8, 9)) == ([], ["max_unavailable"])
    assert review(pods, 3, {"g1": 2, "g2": 1}, (0, 1), (8, 9)) == (["inference/llm-0"], [])
