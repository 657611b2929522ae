"""The guard's per-review index answers what the snapshot's own lookups answer.

`SafetyGuard.review` looks the workloads on each throttled GPU up in one vectorised pass over the placements,
and nodes up in a dict; on random placements (multi-GPU workloads, repeated GPUs, unplaced workloads) they give
the same workloads in the same order as `ClusterSnapshot.workloads_on`, and the same node as a scan by name.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import make_fleet, snapshot, workload

from balancer.model import SetPowerLimit
from balancer.safety_context import ReviewContext

FL = make_fleet(3, 4)


@st.composite
def placements(draw):
    n = FL.n_gpus
    out = []
    for i in range(draw(st.integers(0, 20))):
        gpus = tuple(draw(st.lists(st.integers(0, n - 1), min_size=0, max_size=3)))
        out.append((workload(f"w{i}-0", owner=f"o{i % 3}", milli=1), gpus))
    return out


@settings(max_examples=80, deadline=None)
@given(placements(), st.lists(st.integers(-1, FL.n_gpus), max_size=6))
def test_workloads_on_a_throttled_gpu_match_the_snapshot_lookup(placed, gpus):
    snap = snapshot(FL, workloads=[(w, g) for w, g in placed if g])
    snap = snap.replace(workloads=tuple(w for w, _ in placed))   # unplaced workloads stay in the list
    actions = [SetPowerLimit(gpu=g, uuid="u", node="n0", watts=300.0, previous_watts=400.0, reason="t")
               for g in gpus]
    ctx = ReviewContext(snap, actions)
    for a in actions:
        assert ctx.touched(a) == list(snap.workloads_on(a.gpu))
    for name in ("n0", "n2", "missing"):
        assert ctx.node(name) == next((x for x in snap.nodes if x.name == name), None)
