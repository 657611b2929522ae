"""A pass counts the bound pods once: the preemption it carries on (`k8s_holds.resume`) weighs the victims leaving a
node against the same bound-pod cache its view of the node was summed from. The pass read the cache twice: its
view's free room at its start, the pods bound on each node (victims among them) when a pod first fit nowhere, later
in the pass. A victim whose deletion the watch brought in between was still counted as using its room by the view
but was no longer leaving it: the victims left made too little room, the preemptor's hold looked taken (its room
"taken meanwhile"), the node was given back and its nomination cleared, then preempted on again at the next pass
(the pod lost its turn, the node was open to others meanwhile). Now the view pins the cache's items for the pass
(`k8s_sched_reads._bound`). Against the fake API server and the scheduler's watch caches."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_grace import GRACE_S, terminating
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def test_a_victim_gone_from_the_cache_mid_pass_does_not_give_the_hold_back(kube: FakeKube, api, clock) -> None:
    for obj in (node("a", 8), bound("low-1", "a", 4, 1), bound("low-2", "a", 4, 2), node("b", 1),
                pending("mid", 8, 10)):
        kube.add(obj)
    state = {"sched": None, "deleted": False}

    def place(req: dict, nodes: list[dict]) -> str | None:
        """first's turn, before mid's: low-1 finishes terminating and the bound-pod watch shows it gone."""
        if req["pod"] == "first" and not state["deleted"]:
            state["deleted"] = True
            kube.delete("pods", "low-1", "default")
            watch = state["sched"].watches["bound pods"]
            eventually(lambda: "default/low-1" not in watch.snapshot()[1])
        return most_free(req, nodes)

    sched = state["sched"] = SecondaryScheduler(api, "gputide", place, clock=clock, watch=True, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["mid"])
        bound_watch = sched.watches["bound pods"]
        before = bound_watch.generation   # low-1 and low-2 on a
        assert sched.schedule_once() == {"default/mid": None}
        assert sorted(sched.preempted) == [("default/low-1", "a"), ("default/low-2", "a")]
        start = clock.now
        for name, prio in (("low-1", 1), ("low-2", 2)):   # the fake deletes an evicted pod at once: a kubelet waits
            terminating(kube, name, "a", 4, prio, start + GRACE_S)
        kube.add(pending("first", 1, 20))
        # evicted (deleted), then back terminating: four changes. Not `len(snapshot) == 2`: that held at once while
        # a lagging watch had not brought the evictions, the view then counted low-1 and low-2 as before, and the
        # wait in `place` for low-1 gone was met by its eviction, not by its deletion there
        eventually(lambda: bound_watch.generation >= before + 4)
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["first", "mid"])
        clock.advance(60)
        assert sched.schedule_once() == {"default/first": "b", "default/mid": None}
        assert state["deleted"]
        assert "no longer make room" not in sched.reasons["default/mid"], sched.reasons["default/mid"]
        assert "holding a while default/low-1, default/low-2 terminate" in sched.reasons["default/mid"]
        assert kube.get("pods", "mid", "default")["status"].get("nominatedNodeName") == "a"
        clock.advance(60)   # the next pass reads low-1 gone: low-2 alone is leaving
        assert sched.schedule_once() == {"default/mid": None} and sched.preempted == []
        assert reservations(kube, "a")["default/mid"]["evicted"] == ["default/low-2"]
    finally:
        sched.close()
