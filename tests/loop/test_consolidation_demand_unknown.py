"""Consolidation does not restart the pods of a service whose demand is unknown (`ClusterSnapshot.demand_unknown`:
a stalled vLLM pod, pods not reporting). Before, they were migrated as any pod: a degraded service whose load nobody
sees was restarted for housekeeping. Other services' pods are still consolidated (a hotspot migration, for thermal
safety, still moves its pods: tests/loop/test_loop_demand_unknown.py)."""

from __future__ import annotations

from tests.loop.loop_helpers import make_fleet, snapshot
from tests.loop.test_loop_consolidation import halves, migrations
from tests.loop.test_loop_demand_unknown import WHY


def owners(snap, moves):
    return {snap.workload_by_name[m.workload].owner for m in moves}


def test_consolidation_leaves_the_pods_of_a_service_whose_demand_is_unknown_alone():
    snap = snapshot(make_fleet(nodes=2), workloads=halves())
    moved = owners(snap, migrations(snap))
    assert moved, "the scenario consolidates"
    held = snap.replace(demand_unknown=dict.fromkeys(moved, WHY))
    assert not owners(held, migrations(held)) & moved
    # every half's service unknown: nothing to consolidate
    unknown = {f"half{i}": WHY for i in range(4)}
    assert migrations(snap.replace(demand_unknown=unknown)) == []

