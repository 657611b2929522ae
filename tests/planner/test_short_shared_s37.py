"""The short count (`balancer.unavailable`) of a snapshot derived from another that reads the same workloads,
placements, services and forgotten nodes (the capacity loop's `with_unseen`: only `demand_unknown` changed, a new
object) is the other's, not counted afresh: the planner asks it of the derived snapshot and the guard of the loop's
own in one cycle, each about 10 ms with 20k services counted from their spec. A snapshot that reads differently
(placements, services' replicas, forgotten nodes) is counted afresh, though it shares the workloads tuple."""

from __future__ import annotations

from types import MappingProxyType

from balancer import unavailable
from balancer.model import ServiceStatus
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(2, 4)
A, B = workload("svc-a-0", owner="svc-a"), workload("svc-b-0", owner="svc-b")


def service(name: str, replicas: int) -> ServiceStatus:
    return ServiceStatus(name=name, demand_rps=1.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=True)


def base():
    return snapshot(FL, workloads=[(A, (0,)), (B, (4,))],
                    services={"svc-a": service("svc-a", 2), "svc-b": service("svc-b", 1)})


def test_a_derived_snapshot_reading_the_same_shares_the_count_and_one_reading_otherwise_does_not() -> None:
    orig = base()
    derived = orig.replace(demand_unknown={"inference/unseen": "no series"})
    assert derived is not orig and derived.workloads is orig.workloads
    assert unavailable.short_now(derived) == {"svc-a": 1}
    assert unavailable.short_now(orig) is unavailable.short_now(derived)   # before: counted afresh, another mapping
    assert unavailable._counts(orig) is unavailable._counts(derived)
    assert unavailable.short(orig, ("svc-a",)) == {"svc-a": 1}
    # one that reads otherwise, though it shares the workloads tuple, is counted afresh
    unplaced = orig.replace(placements=MappingProxyType({A.name: (0,), B.name: ()}))
    assert unplaced.workloads is orig.workloads
    assert unavailable.short_now(unplaced) == {"svc-a": 1, "svc-b": 1}
    scaled = orig.replace(services={"svc-a": service("svc-a", 3), "svc-b": service("svc-b", 1)})
    assert unavailable.short_now(scaled) == {"svc-a": 2}
    dark = orig.replace(forgotten_nodes={"n9": 1})
    assert unavailable.short_now(dark) == {}   # svc-a's missing replica may run on the forgotten node
    assert unavailable.short_now(orig) == {"svc-a": 1}
