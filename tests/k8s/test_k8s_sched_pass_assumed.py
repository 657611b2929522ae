"""Which assumed bindings a pass counts is decided once, as its view is made (`nodes_view`): none is dropped mid-pass
however long the pass takes or the bound-pod watch moves on. Before, each read of the pass's bound pods (`_bound`:
preemption's victims, a pod group's bound members) dropped those past `assume_s` again, so a binding the view counted
could be missing from what the pass read later (audit a1, minor). Against the fake API server, with watches."""

from __future__ import annotations

from fakeapi import FakeKube, pod
from test_k8s_sched_unsure_assumed import unanswered, watching
from test_k8s_watch import eventually


def test_an_assumed_binding_the_view_counted_stays_in_the_pass_s_bound_pods(kube: FakeKube, api, clock) -> None:
    sched = watching(kube, api, clock)
    try:
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        faults = unanswered(kube, "big", made=False)   # its outcome unknown: assumed on a, though not bound
        assert sched.schedule_once() == {"default/big": None} and sched.bind_unsure
        for fault in faults:
            fault.remaining = 0
        assert sched.nodes_view()[0]["gpus_free"] == 0   # a pass begins: its view counts big on a
        streams = sched.watches["bound pods"].streams
        clock.advance(sched.assume_s)                     # the pass takes long, the watch goes on meanwhile
        eventually(lambda: sched.watches["bound pods"].streams > streams + 1)
        assert [u.key for u in sched._bound()] == ["default/big"]   # still, for the rest of the pass
        assert [r["pod"] for r in sched.pending()] == ["big"]   # the next pass reads it back: on no node
        assert sched.nodes_view()[0]["gpus_free"] == 8 and sched._bound() == []   # and drops it
    finally:
        sched.close()
