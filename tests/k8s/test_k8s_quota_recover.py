"""The loop settles a Kueue quota move a dead controller left open, on its own: `recover()` (its first cycle as
leader) and `housekeeping()` (every cycle) call `KueueQuota.settle_all`, so the cohort gets its GPUs back without
waiting for the next quota shift (which may be hours away, at the next turn of the tide)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_quota_restart import Died, cohort, controller, dies_at, quota, scale

from balancer.actuate.k8s_actuator import KubernetesActuator


@pytest.mark.parametrize("hook", ["recover", "housekeeping"])
def test_a_new_leaders_cycle_rolls_back_quota_lent_for_a_grow_that_never_happened(kube: FakeKube, api, clock,
                                                                                   sleeps, hook) -> None:
    cohort(kube)
    dying = controller(api, clock, sleeps)
    dies_at(dying, "training", landed=False)
    with pytest.raises(Died):
        scale(dying, 6)
    assert quota(kube) == (12, 8)            # the lender lowered, the borrower never raised: 4 GPUs gone
    notes = getattr(controller(api, clock, sleeps), hook)()
    assert quota(kube) == (16, 8)
    assert any("rolled back" in n for n in notes), notes
    assert getattr(controller(api, clock, sleeps), hook)() == []


def test_without_kueue_queues_the_hooks_read_no_clusterqueue(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    plain = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    calls = []
    plain.api.custom.get_cluster_custom_object = lambda *a, **k: calls.append(a)
    assert plain.housekeeping() == [] and calls == []
