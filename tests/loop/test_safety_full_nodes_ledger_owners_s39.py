"""The guard's full-node recount (`SafetyGuard.full_nodes`) counts the replicas not running only of the owners its
ledger holds migrations of (`unavailable.short`'s `owners`), the only ones `_in_flight` reads: counted for every
service, it was ~9 ms of the loop's recount at 20k services counted from their spec. The answer must not change: an
owner of the ledger left out frees a node its Pending replacement holds, an owner outside it holds none.

The fleet: n0..n4 of four GPUs, `maxConcurrentMigrationsPerNode` 1, a 4-GPU node forgotten. Past the settle window
(60 s), within `cooldownS`: svc-a moved n0 -> n1 and is short one replica (spec 2, 1 placed: not excused by the dark
node, it is moving), job-b moved n0 -> n2 with a pod Pending (no service: counted unplaced), svc-c moved n0 -> n3 and
runs all its replicas. svc-d, short 5, and job-e, Pending, are in no migration of the ledger."""

from __future__ import annotations

import dataclasses

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import safety, unavailable
from balancer.config import SafetyPolicy
from balancer.model import ServiceStatus, WorkloadClass
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(5, 4)
NOW = 10_000.0
LEDGER = SafetyLedger(migrations=((NOW - 90.0, "n0", "n1", "svc-a"), (NOW - 90.0, "n0", "n2", "job-b"),
                                  (NOW - 90.0, "n0", "n3", "svc-c")))
PODS = [(workload("svc-a-0", owner="svc-a"), (4,)), (workload("svc-c-0", owner="svc-c"), (8,)),
        (workload("svc-c-1", owner="svc-c"), (12,)), (workload("svc-d-0", owner="svc-d"), (16,)),
        (workload("job-b-0", WorkloadClass.TRAINING, owner="job-b"), ()),
        (workload("job-e-0", WorkloadClass.TRAINING, owner="job-e"), ())]


def status(name: str, replicas: int) -> ServiceStatus:
    return ServiceStatus(name=name, demand_rps=1.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=True)


def snap(dark: int = 4, d_replicas: int = 6):
    services = {"svc-a": status("svc-a", 2), "svc-c": status("svc-c", 2), "svc-d": status("svc-d", d_replicas)}
    return dataclasses.replace(snapshot(FL, workloads=PODS, services=services, time=NOW),
                               forgotten_nodes={"gone": dark} if dark else {})


def full(s) -> frozenset[str]:
    return SafetyGuard(SafetyPolicy(max_concurrent_migrations_per_node=1)).full_nodes(s, LEDGER, NOW)


def test_full_nodes_counts_every_owner_of_the_ledger_and_none_other(monkeypatch) -> None:
    asked = []

    def short(snapshot, moving=(), owners=None):
        asked.append(None if owners is None else set(owners))
        return unavailable.short(snapshot, moving, owners)

    monkeypatch.setattr(safety, "_short", short)
    # n1: svc-a's replacement Pending (its move counted as moving: the dark node excuses none of it); n2: job-b's
    # Pending pod; n3 has room: svc-c runs all its replicas
    assert full(snap()) == {"n1", "n2"}
    assert asked == [{"svc-a", "job-b", "svc-c"}]   # before: None, every service counted
    # an owner outside the ledger short by more, or not at all, changes nothing
    assert full(snap(d_replicas=1)) == {"n1", "n2"}
    assert full(snap(dark=0)) == {"n1", "n2"}


@pytest.mark.parametrize("dark", [0, 4])
@pytest.mark.parametrize("moving", [(), ("svc-a",), ("svc-a", "svc-d")])
@pytest.mark.parametrize("owners", [(), ("svc-a",), ("job-b", "svc-c"), ("svc-a", "job-b", "svc-d", "nobody"),
                                    ("svc-a", "svc-c", "svc-d", "job-b", "job-e")])
def test_short_of_some_owners_is_the_full_count_of_those(dark, moving, owners) -> None:
    s = snap(dark=dark)
    every = unavailable.short(s, moving)
    assert unavailable.short(s, moving, owners) == {o: n for o, n in every.items() if o in owners}
    assert unavailable.short(s, moving, None) == every


def test_short_of_some_owners_counts_what_every_owner_does() -> None:
    # spec shortfall, the dark node's excuse unless moving, unplaced pods with no service
    assert unavailable.short(snap(dark=4), (), ("svc-a", "svc-d", "job-b", "job-e")) == {
        "svc-d": 1, "job-b": 1, "job-e": 1}   # svc-a's missing replica may run on the dark node
    assert unavailable.short(snap(dark=4), ("svc-a",), ("svc-a", "svc-c")) == {"svc-a": 1}
    assert unavailable.short(snap(dark=0), (), ("svc-d",)) == {"svc-d": 5}
