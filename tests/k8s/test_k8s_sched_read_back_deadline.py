"""A read-back the pass's read deadline left no time to try (`DeadlineExceeded`, less than `MIN_TRY_S` left: no GET
sent) is no read: the binding stays due and the next pass reads it. It used to count as a failed read, `checked`
set, so the binding waited another `assume_s` (a deleted pod's room held that much longer) for a GET never sent
(audit a9). Against the fake API server, with watches, the bound-pod cache broken as in test_k8s_sched_cut_watch."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_sched_cut_watch import POD_GET, left_pending, pending, scheduler, waiting  # noqa: F401  (fixture)

from balancer.actuate.kubernetes import MIN_TRY_S


def test_a_read_back_not_tried_for_the_deadline_is_read_in_the_next_pass(
        kube: FakeKube, clock, scheduler) -> None:  # noqa: F811
    sched = scheduler(8, broken=True)
    waiting(kube, sched, ["gone"], 8)
    assert sched.schedule_once() == {"default/gone": "a"}
    kube.delete("pods", "gone", "default")
    left_pending(sched)
    clock.advance(sched.assume_s)
    with sched.api.deadline(MIN_TRY_S / 2, reserve_s=0.0):   # the pass's reads left less than a try needs
        assert pending(sched) == []
    assert kube.calls("GET", POD_GET) == [] and "default/gone" in sched._assumed   # not tried, kept
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == 1   # the next pass reads it: gone
    assert sched._assumed == {} and sched.nodes_view()[0]["gpus_free"] == 8
