"""What a preemption that removed no pod says it did. A choice may name no victim (`balancer.plan.preemption.choose`:
the pod fits the node by what preemption weighs, as a 0-GPU pod refused a node whose GPUs are held for others does)
or only victims found gone already; the pod was told, and the log said, "preempting 0 pod(s) of lower priority on
a: ." (or that it preempted pods no one evicted), while the scheduler only held the node for it. Against the fake API
server."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, full, most_free, pending, reservations  # noqa: F401 (full: a fixture)

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def test_a_preemption_with_no_victim_says_it_holds_the_node_and_preempts_no_one(kube: FakeKube, api, clock, caplog):
    """a: 8 GPUs, 4 used by a pod of priority 1, all 8 held by a Migrate for a replacement (it counts against every
    pod): a pod asking no GPU is refused a ("GPUs reserved for other pods"); evicting nobody, it holds a."""
    a = node("a", 8)
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps(
        {"default/web": {"gpus": [], "count": 8, "expires": rfc3339(clock.now + 600)}})}
    kube.add(a)
    kube.add(bound("low", "a", 4, 1))
    kube.add(pending("tiny", 0, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    caplog.set_level("INFO", logger="balancer.actuate.k8s_holds")
    assert sched.schedule_once() == {"default/tiny": None}
    assert sched.preempted == [] and kube.get("pods", "low", "default") is not None
    held = reservations(kube, "a")["default/tiny"]
    why = sched.reasons["default/tiny"]
    assert "GPUs reserved for other pods" in why
    assert "preempting" not in why and "preempting" not in caplog.text
    assert (f"preemption: nothing to preempt on a (no pod of lower priority takes the room it needs there): a held "
            f"for it until {held['expires']}.") in why
    assert "default/tiny: nothing to preempt on a" in caplog.text


def test_a_preemption_whose_victims_were_gone_already_says_no_pod_was_evicted(full: FakeKube, api, clock):  # noqa: F811
    """low-1, the victim chosen on a, is deleted before the preemption reads it: nothing is evicted, a is held."""
    full.add(pending("urgent", 4, 50))
    full.before("GET", r"/namespaces/default/pods/low-1$", lambda: full.delete("pods", "low-1", "default"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert not [r for r in full.requests if r.path.endswith("/eviction")]
    why = sched.reasons["default/urgent"]
    assert "preempting" not in why
    assert (f"preemption: no pod evicted on a, its victims default/low-1 gone already: a held for it until "
            f"{reservations(full, 'a')['default/urgent']['expires']}.") in why
