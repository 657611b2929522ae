"""What a Kueue controller's time-based memories say is about its own term as leader only. The drift check gives back
an excess seen on consecutive checks for the action deadline (`Sightings`), and an owed give-back drops the part
training's Jobs hold once held so for as long (`Debt.short_since`); both were in-process memory kept across terms. A
replica that lost the Lease and took it again a while later gave back, at its first check, an excess it had seen a
term ago (here another leader's grow, whose Job resize was under way: voided), and dropped a debt's short part at its
first payment. A new term (`recover()`, its first cycle that plans) now forgets the sightings and restarts the short
parts' clocks; the debts themselves are kept (the lender's move history tells a lowering that landed from one that
did not, so paying them is safe)."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_quota_drift import cohort, controller, corrected, grow_that_dies, quota
from test_k8s_quota_owed_lender import reserving
from test_k8s_quota_owed_shared import owing_shrink

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S


def test_a_leader_back_for_a_new_term_gives_back_nothing_on_what_it_saw_a_term_ago(kube: FakeKube, api, clock,
                                                                                   sleeps) -> None:
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs, admitted
    grow_that_dies(api, clock, sleeps)   # 4 lent that no Job holds
    a = controller(api, clock, sleeps)
    a.recover()
    a.housekeeping()   # A sees the excess, and defers
    assert quota(kube) == (12, 12)
    # A loses the Lease; B leads, gives that loan back, then lends for a grow whose Job resize is under way
    clock.advance(ACTION_DEADLINE_S)
    b = controller(api, clock, sleeps)
    b.recover()
    corrected(b, clock)
    assert quota(kube) == (16, 8)
    grow_that_dies(api, clock, sleeps)
    assert quota(kube) == (12, 12)
    # A leads again: its first check has seen this loan once, not for the action deadline
    notes = a.recover() + a.housekeeping()
    assert quota(kube) == (12, 12), notes
    assert not any("kueue quota correction" in n for n in notes), notes
    clock.advance(ACTION_DEADLINE_S)
    assert any("kueue quota correction" in n for n in a.housekeeping())   # seen this term for long enough
    assert quota(kube) == (16, 8)


def test_a_leader_back_for_a_new_term_keeps_its_debt_and_restarts_the_clock_of_its_short_part(kube: FakeKube, api,
                                                                                            clock, sleeps) -> None:
    cohort(kube)
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    owing_shrink(kube, a)   # A owes 8, 4 of them lent to training: (12, 12)
    kube.mutate("clusterqueues", "training", "", reserving(4))   # Kueue: the Job's 2 x 2 GPUs reserved
    for _ in range(2):   # B's check gives the 4 lent back
        b.housekeeping()
        clock.advance(ACTION_DEADLINE_S)
    a.housekeeping()
    assert quota(kube) == (20, 4) and a.kueue.owes("training") == 4   # the rest held by the Job: short since now
    clock.advance(2 * ACTION_DEADLINE_S)   # A lost the Lease meanwhile, and now leads again
    notes = a.recover()
    assert not any("dropped" in n for n in notes), notes
    assert a.kueue.owes("training") == 4   # kept, its short part seen at this term's first payment
    clock.advance(ACTION_DEADLINE_S)
    assert any("dropped" in n for n in a.housekeeping())   # held so for the action deadline within this term
    assert quota(kube) == (20, 4) and a.kueue.owes("training") == 0
