"""`ClusterSnapshot.workloads_by_owner` is a read-only mapping that answers what grouping the workloads one by one
answers, without building an object per owner: at 10,000 GPUs every shared pod is its own owner, and 20,000 tuples a
cycle made Python's full collections (50-70 ms each) land in every second `plan()`. Co-location, the one planner that
asks for it on every cycle, asks only while it holds a shrink."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from balancer import fleet
from balancer.config import BalancerPolicy
from balancer.model import ClusterSnapshot, Node, Workload, WorkloadClass
from balancer.plan import colocation

FLEET = fleet.build("owners", [Node(name="n0", gpu_model="T4", gpu_count=4)])


def _snapshot(owners: list[str]) -> ClusterSnapshot:
    z = np.zeros(FLEET.n_gpus)
    ws = tuple(Workload(name=f"ns/w{i}", workload_class=WorkloadClass.TRAINING, owner=o) for i, o in enumerate(owners))
    return ClusterSnapshot(time=0.0, nodes=FLEET.nodes, gpus=FLEET.gpus, temperature_c=z, memory_temperature_c=z,
                           slowdown_temp_c=z, power_w=z, power_limit_w=z, sm_active=z, mem_used_mib=z,
                           mem_total_mib=z, sm_clock_mhz=z, clock_event_reasons=z.astype(np.int64),
                           xid=z.astype(np.int64), sample_age_s=z, workloads=ws)


def test_groups_in_workload_order_owners_in_first_appearance():
    s = _snapshot(["b", "a", "b", "", "a", "b"])
    by = s.workloads_by_owner
    assert list(by) == ["b", "a", ""] and len(by) == 3
    assert [w.name for w in by["b"]] == ["ns/w0", "ns/w2", "ns/w5"]
    assert by.get("a") == (s.workloads[1], s.workloads[4]) and by[""] == (s.workloads[3],)
    assert "nobody" not in by and by.get("nobody") is None
    with pytest.raises(KeyError):
        by["nobody"]
    assert dict(by) == {"b": by["b"], "a": by["a"], "": by[""]}
    assert not hasattr(by, "__setitem__")
    assert _snapshot([]).workloads_by_owner.get("a", ()) == ()


def test_index_builds_no_object_per_owner():
    s = _snapshot([f"svc-{i}" for i in range(5000)])
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        by = s.workloads_by_owner
        made = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert made < 100, made   # a tuple per owner was 5,000
    assert by["svc-4321"] == (s.workloads[4321],)


def test_calm_colocation_observe_leaves_the_owner_index_unbuilt():
    s = _snapshot(["job", "job", "svc"])
    colocation.observe(s, BalancerPolicy(), colocation.ColocationState())
    assert "workloads_by_owner" not in vars(s)
    held = colocation.ColocationState(shrunk={"gone-job": (3, "svc")})
    assert colocation.observe(s, BalancerPolicy(), held).shrunk == {}   # asked, and answered: no pod, forgotten
