"""A shard's snapshot names a service whose demand is unknown only where a replica of it is on the shard's nodes
(`shard.restrict`), spread over two shards or not: there its capacity plan holds (its GPUs must not be lent as
idle); a shard without one plans on. The Prometheus source already leaves a scope's unconcerned services out
(`prometheus._running`); a source without scopes (the simulator) hands every shard the whole mapping."""

from __future__ import annotations

from balancer.model import WorkloadClass
from balancer.telemetry.shard import parse_selector, restrict
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 2)   # n0: GPUs 0-1, n1: 2-3, n2: 4-5


def test_a_shard_names_the_unknown_demands_of_the_services_with_a_replica_on_its_nodes():
    snap = snapshot(FL, workloads=[(workload("chat-0", owner="chat"), (0,)), (workload("chat-1", owner="chat"), (2,)),
                                   (workload("embed-0", owner="embed"), (3,)),
                                   (workload("train-0", WorkloadClass.TRAINING, owner="train"), (4,))])
    snap = snap.replace(demand_unknown={"chat": "stalled", "embed": "1 of 2 ready pods reporting", "idle": "x"})
    unknown = {name: dict(restrict(snap, parse_selector(name, f"node={node}"))[0].demand_unknown)
               for name, node in (("a", "n0"), ("b", "n1"), ("c", "n2"))}
    assert unknown == {"a": {"chat": "stalled"}, "b": {"chat": "stalled", "embed": "1 of 2 ready pods reporting"},
                       "c": {}}
