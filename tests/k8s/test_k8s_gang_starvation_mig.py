"""What a starving pod group's holds are said to reserve. Each member held a node "as GPUs free up there", though a
member asking MIG instances and no whole GPU waits for those (its hold reserves them, `k8s_preempt.mig_asked`), as
the message for a single starving pod says since it names the instances reserved. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_gang_starvation import most_free
from test_k8s_starvation_mig import SLICE, mig_node, using

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339


def test_a_starving_group_of_mig_members_says_the_instances_reserved_for_each(kube: FakeKube, api, clock):
    """a and b: no whole GPU free, 1 of 7 slices free each; w0 and w1, a group, ask 2 slices each: it fits nowhere,
    and after 11 min each member holds a node, reserving its 2 slices there."""
    for name in ("a", "b"):
        kube.add(mig_node(name, 4, 7))
        kube.add(using(f"whole-{name}", name, gpus=4))
        kube.add(using(f"slices-{name}", name, slices=6))
    for k in range(2):
        member = using(f"w{k}", None, slices=2, scheduler="gputide", phase="Pending")
        member["metadata"]["labels"] = {GROUP_LABEL: "train"}
        member["metadata"]["creationTimestamp"] = rfc3339(clock.now - 11 * 60)
        kube.add(member)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    holding = dict(sched.starving)
    assert sorted(holding) == ["default/w0", "default/w1"] and sorted(holding.values()) == ["a", "b"]
    why = sched.reasons["default/w0"]
    assert "GPUs" not in why.split("Waiting")[-1]   # they wait for no whole GPU
    assert (f"Waiting 11 min: holding nodes for the group's members (default/w0 on {holding['default/w0']}, "
            f"2 {SLICE} reserved; default/w1 on {holding['default/w1']}, 2 {SLICE} reserved) as what each waits for "
            "frees up there.") in why
