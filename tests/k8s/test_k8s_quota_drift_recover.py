"""The correction of quota lent to training beyond what its Jobs hold (`KueueQuota.reconcile`) is a capacity move:
it runs in the per-cycle housekeeping, which a cycle that holds still (an emergency stop, fail-static) never
reaches, and not in `recover()`, which a new leader's first cycle runs before anything is checked (it finishes what
a previous process left half done: expired taints and holds, quota moves left open). Chained to the settling of
open moves, the correction ran from `recover()` too: a new leader moved quota under an emergency stop."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_quota_drift import cohort, controller, corrected, grow_that_dies, quota


def test_recover_settles_but_moves_no_quota_back_and_housekeeping_does(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    assert quota(kube) == (12, 12)   # 4 GPUs lent that no Job holds
    successor = controller(api, clock, sleeps)
    notes = successor.recover()
    assert quota(kube) == (12, 12), notes
    assert not any("kueue quota correction" in n for n in notes), notes
    corrected(successor, clock)   # seen at two checks, the action deadline apart
    assert quota(kube) == (16, 8)
