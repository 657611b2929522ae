"""The per-snapshot indexes that keep a 10,000-GPU cycle O(n log n) answer exactly what the scans they replaced
answered: `workloads_on(g)` and `workloads_by_owner[o]`, same workloads, same order (bench/bench_scale.py)."""

from __future__ import annotations

import numpy as np
from fuzzing import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer import fleet
from balancer.model import ClusterSnapshot, Node, Workload, WorkloadClass

FLEET = fleet.build("idx", [Node(name=f"n{i}", gpu_model="T4", gpu_count=4) for i in range(2)])


def _snapshot(placements: list[tuple[int, ...]], owners: list[str]) -> ClusterSnapshot:
    n = FLEET.n_gpus
    workloads = tuple(Workload(name=f"ns/w{i}", workload_class=WorkloadClass.BATCH, owner=o, gpus=len(p) or 1)
                      for i, (p, o) in enumerate(zip(placements, owners, strict=True)))
    z = np.zeros(n)
    return ClusterSnapshot(time=0.0, nodes=FLEET.nodes, gpus=FLEET.gpus, temperature_c=z, memory_temperature_c=z,
                           slowdown_temp_c=z, power_w=z, power_limit_w=z, sm_active=z, mem_used_mib=z,
                           mem_total_mib=z, sm_clock_mhz=z, clock_event_reasons=z.astype(np.int64),
                           xid=z.astype(np.int64), sample_age_s=z, workloads=workloads,
                           placements={w.name: p for w, p in zip(workloads, placements, strict=True) if p})


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 7), max_size=3).map(tuple), st.sampled_from(["a", "b", ""])),
                max_size=12))
def test_indexes_answer_what_the_scans_answered(rows):
    s = _snapshot([p for p, _ in rows], [o for _, o in rows])
    for g in range(FLEET.n_gpus):
        assert s.workloads_on(g) == tuple(w for w in s.workloads if g in s.placements.get(w.name, ()))
        assert s.workloads_on(np.int64(g)) == s.workloads_on(g)
    for owner in ("a", "b", "", "nobody"):
        assert s.workloads_by_owner.get(owner, ()) == tuple(w for w in s.workloads if w.owner == owner)
