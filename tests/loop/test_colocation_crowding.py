"""Co-location's crowding (which training jobs share a GPU with a pressured service) is computed over the snapshot's
columns; it must say what the per-workload definition says, on fleets with sharing, multi-GPU and unplaced pods,
protected jobs and protected namespaces."""

from __future__ import annotations

import dataclasses
import random

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ClusterSnapshot, WorkloadClass
from balancer.plan.colocation import _crowding


def reference(s: ClusterSnapshot, policy: BalancerPolicy, pressured: set[str]) -> dict[str, list[str]]:
    """The definition, one workload at a time."""
    gpu_services: dict[int, set[str]] = {}
    for w in s.workloads:
        if w.workload_class == WorkloadClass.INFERENCE and w.owner in pressured:
            for g in s.placements.get(w.name, ()):
                gpu_services.setdefault(g, set()).add(w.owner)
    shared: dict[str, list[str]] = {}
    for w in s.workloads:
        if (w.workload_class != WorkloadClass.TRAINING or w.protected
                or w.namespace in policy.safety.protected_namespaces):
            continue
        hit = set().union(*(gpu_services.get(g, set()) for g in s.placements.get(w.name, ())))
        if hit:
            shared.setdefault(w.owner, []).extend(sorted(hit))
    return shared


def fleet_snapshot(seed: int) -> ClusterSnapshot:
    rng = random.Random(seed)
    fl = make_fleet(6, 4)
    pods = []
    for i in range(40):
        cls = rng.choice([WorkloadClass.INFERENCE, WorkloadClass.TRAINING, WorkloadClass.BATCH])
        owner = f"{'svc' if cls == WorkloadClass.INFERENCE else 'job'}{rng.randrange(5)}"
        w = workload(f"{owner}-{i}", cls, owner=owner, milli=250, protected=rng.random() < 0.1,
                     namespace=rng.choice(["a", "b", "kube-system"]))
        pods.append((w, tuple(rng.sample(range(fl.n_gpus), rng.choice([0, 1, 1, 2])))))
    s = snapshot(fl, workloads=pods)
    unplaced = {w.name for w, _ in pods[::7]}   # some pods pending: no placement at all
    return dataclasses.replace(s, placements={k: v for k, v in s.placements.items() if k not in unplaced})


@pytest.mark.parametrize("seed", range(8))
def test_crowding_agrees_with_its_per_workload_definition(seed):
    s = fleet_snapshot(seed)
    policy = dataclasses.replace(BalancerPolicy(), safety=dataclasses.replace(
        BalancerPolicy().safety, protected_namespaces=frozenset({"kube-system"})))
    found = 0
    for pressured in ({"svc0"}, {"svc1", "svc2"}, {f"svc{i}" for i in range(5)}, set()):
        expected = reference(s, policy, pressured)
        assert _crowding(s, policy, pressured) == expected
        found += len(expected)
    assert found   # the fleet does share GPUs: the comparison is not of two empty answers
