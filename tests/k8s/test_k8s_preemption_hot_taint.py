"""gputide's own hot taint pauses a preemption rather than ending it. mid's preemption on a evicted low-1, low-2's
eviction was refused (left for the next pass); the controller then tainted a `gputide.io/hot` NoSchedule (a
Migrate's source, lapsing within minutes, `gputide.io/hot-until`). The next pass gave a back as a node that no
longer admits mid (55fb15a) and preempted low-3 on b: another pod evicted, and the room low-1's eviction made on
a left idle. Now, where the only rule refusing mid is that taint, the preemption is paused: no one is evicted
(low-2 neither: not into a hot node), a stays held as it was, mid is told why, and once the taint goes low-2 is
evicted for it on a. Any other refusal besides (a cordon) still gives the node back."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_room_taken import half_preempted

from balancer.actuate.kubernetes import HOT_TAINT_KEY

HOT = {"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def test_the_hot_taint_pauses_the_preemption_and_keeps_the_node_held(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    held = reservations(kube, "a")["default/mid"]
    kube.mutate("nodes", "a", "", {"spec": {"taints": [HOT]}})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "low-3", "default") is not None   # no one evicted on b
    assert kube.get("pods", "low-2", "default") is not None                             # nor into the hot node
    assert reservations(kube, "a")["default/mid"] == held and reservations(kube, "b") == {}
    said = sched.reasons["default/mid"]
    assert f"paused while a is tainted {HOT_TAINT_KEY}" in said and "default/low-2 not evicted" in said, said
    kube.mutate("nodes", "a", "", {"spec": {"taints": []}})   # the taint lapses: carried on where it was
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")] and kube.get("pods", "low-3", "default") is not None


def test_the_hot_taint_and_a_cordon_give_the_node_back(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    kube.mutate("nodes", "a", "", {"spec": {"taints": [HOT], "unschedulable": True}})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert "default/mid" not in reservations(kube, "a") and "a no longer admits it" in sched.reasons["default/mid"]
