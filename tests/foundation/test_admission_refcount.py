"""A snapshot whose admission was asked is freed by reference counting, as soon as the cycle lets it go.

`ClusterSnapshot.admission` caches an `Admission`; when that held the snapshot back, snapshot and admission formed
a cycle, and each cycle's snapshot (20,000 workloads at scale, every planner with defrag or pod affinity asks) lived
until a full garbage collection. With the collector off, dropping the last reference must free it at once, and the
answers must be those of a snapshot held as long as the admission is asked.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from balancer import fleet
from balancer.model import ClusterSnapshot, Node, Workload, WorkloadClass
from balancer.noderules import AffinityTerm, NodeRules, PodAffinity, Requirement, Selector

FLEET = fleet.build("admission", [Node(name=f"n{i}", gpu_model="T4", gpu_count=2, labels={"zone": f"z{i % 2}"})
                                  for i in range(4)])
SPREAD = PodAffinity(anti=(AffinityTerm(Selector((Requirement("app", "In", ("web",)),)), None, "zone"),))


def _snapshot() -> ClusterSnapshot:
    z = np.zeros(FLEET.n_gpus)
    ws = (Workload(name="ns/a", workload_class=WorkloadClass.INFERENCE, labels={"app": "web"}, pod_affinity=SPREAD),
          Workload(name="ns/b", workload_class=WorkloadClass.INFERENCE, labels={"app": "web"}, pod_affinity=SPREAD))
    return ClusterSnapshot(time=0.0, nodes=FLEET.nodes, gpus=FLEET.gpus, temperature_c=z, memory_temperature_c=z,
                           slowdown_temp_c=z, power_w=z, power_limit_w=z, sm_active=z, mem_used_mib=z,
                           mem_total_mib=z, sm_clock_mhz=z, clock_event_reasons=z.astype(np.int64),
                           xid=z.astype(np.int64), sample_age_s=z, workloads=ws,
                           placements={"ns/a": (0,), "ns/b": (3,)})


@pytest.fixture
def no_gc():
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_snapshot_asked_for_admission_is_freed_without_the_collector(no_gc):
    s = _snapshot()
    a = s.workloads[0]
    assert s.admits(NodeRules()).all()
    s.affinity_admits(a, {"ns/b": 2})
    gone = weakref.ref(s)
    del s, a
    assert gone() is None, "the snapshot outlived its last reference: a reference cycle holds it"


def test_answers_unchanged():
    s = _snapshot()
    a, b = s.workloads
    # a's replacement may not share a zone with b (node 1, zone z1): nodes 0 and 2 (z0) only; moved to node 2 (z0),
    # b leaves z1 free and fills z0
    assert s.affinity_admits(a).tolist() == [True, False, True, False]
    assert s.affinity_admits(a, {"ns/b": 2}).tolist() == [False, True, False, True]
    assert s.admits(NodeRules(selector=(("zone", "z1"),))).tolist() == [False, True, False, True]
    assert s.admission is s.admission
