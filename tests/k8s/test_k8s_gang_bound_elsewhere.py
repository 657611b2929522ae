"""A pod group whose member someone else bound meanwhile binds no member on top of it. The trial placed m1 on b and
m2 on a (4 GPUs each, two 4-GPU nodes); another replica (its binding in flight as it lost the Lease) bound m1 to a
just before ours: ours was answered 409 and m1 counted on a, where it runs, but m2 was bound to a all the same, as
the trial had placed it: 8 GPUs asked of a 4-GPU node, the kubelet refusing one of them. Now each member is asked
again whether it still fits where the trial placed it: one that does not is left pending, with the members after
it, told why, and the next pass places them afresh."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_gang import member, nodes_of, two  # noqa: F401 - `two`: the fixture (nodes a and b, 4 GPUs each)

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def test_a_member_bound_elsewhere_by_someone_else_overbooks_no_node(two: FakeKube, api, clock):  # noqa: F811
    for name in ("m1", "m2"):
        two.add(member(name, "g", least=2))
    two.before("POST", r"/pods/m1/binding$", lambda: two.mutate("pods", "m1", "default", {"spec": {"nodeName": "a"}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/m2": None}                 # m1: bound by someone else, left out
    assert nodes_of(two, "m1", "m2") == ["a", None]                      # not both on a
    assert len(two.calls("POST", r"/binding$")) == 1
    assert "member default/m2 no longer fits a" in sched.reasons["default/m2"], sched.reasons
    clock.advance(5)
    assert sched.schedule_once() == {"default/m2": "b"}                  # placed afresh


def test_the_members_after_one_that_no_longer_fits_wait_too(two: FakeKube, api, clock):  # noqa: F811
    """m1 (4 GPUs) placed on b, m2 and m3 (2 each) on a; m1 bound to a by someone else fills it: m2 no longer fits
    there, and m3, which alone would, is not bound either (the group waits whole for the next pass)."""
    two.add(member("m1", "g", gpus=4, least=3))
    two.add(member("m2", "g", gpus=2, least=3))
    two.add(member("m3", "g", gpus=2, least=3))
    two.before("POST", r"/pods/m1/binding$", lambda: two.mutate("pods", "m1", "default", {"spec": {"nodeName": "a"}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    results = sched.schedule_once()
    assert results == {"default/m2": None, "default/m3": None}, results
    assert nodes_of(two, "m2", "m3") == [None, None] and len(two.calls("POST", r"/binding$")) == 1
    assert sched.reasons["default/m3"] == sched.reasons["default/m2"]
