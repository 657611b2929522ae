"""Leadership is asked again right before a binding and an eviction are written: the Lease may lapse while the call
just before is slow (the PATCH giving a WaitForFirstConsumer claim its node; the GET of a preemption's victim), and
a write without it may act on nodes the next leader is placing on already (audit a5: bind_after_lease_lost.py,
evict_after_lease_lost.py)."""

from __future__ import annotations

from fakeapi import FakeKube, claim, node, pod, storage_class
from test_k8s_bind_unknown_outcome import most_free

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def lapsing(kube: FakeKube, api, clock, during: tuple[str, str], write: str) -> tuple[SecondaryScheduler, list]:
    """A leading scheduler whose Lease lapses during the call `during` (method, path); the list gets, for each POST
    whose path matches `write`, whether the Lease was held then."""
    lease, writes = {"held": True}, []
    kube.before(*during, lambda: lease.update(held=False))
    kube.before("POST", write, lambda: writes.append(lease["held"]))
    return SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None,
                              leading=lambda: lease["held"]), writes


def test_no_binding_after_the_lease_lapsed_while_its_claim_was_given_the_node(kube: FakeKube, api, clock):
    kube.add(node("n1", 8))
    kube.add(storage_class("wffc"))
    kube.add(claim("ckpt", storage_class="wffc"))
    p = pod("train", gpus=1, scheduler="gputide", phase="Pending")
    p["spec"]["volumes"] = [{"name": "v", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    kube.add(p)
    sched, bindings = lapsing(kube, api, clock, ("PATCH", r"persistentvolumeclaims/ckpt$"), r"/binding$")
    assert sched.schedule_once() == {}
    assert bindings == []
    assert kube.get("pods", "train", "default")["spec"].get("nodeName") is None


def test_no_eviction_after_the_lease_lapsed_while_the_victim_was_read(kube: FakeKube, api, clock):
    kube.add(node("a", 8))
    low = pod("low", gpus=8, node_name="a")
    low["spec"]["priority"] = 1
    kube.add(low)
    urgent = pod("urgent", gpus=8, scheduler="gputide", phase="Pending")
    urgent["spec"]["priority"] = 50
    kube.add(urgent)
    sched, evictions = lapsing(kube, api, clock, ("GET", r"/namespaces/default/pods/low$"), r"/eviction$")
    sched.schedule_once()
    assert evictions == []
    assert kube.get("pods", "low", "default") is not None
