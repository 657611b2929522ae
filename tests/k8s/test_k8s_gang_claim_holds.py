"""A starving pod group whose members share one unbound WaitForFirstConsumer claim holds one node for all of them:
the claim is given the node of the first member bound, so they can only run together on one node (as the binding
path keeps them, `k8s_gang.trial`). Each member held the node closest to fitting it alone: w0 held b and w1 held a,
so what freed up on either was never enough for the group (trial keeps w1 to w0's node), while both nodes stayed
held; a member could even hold a node too small for the members sharing its claim."""

from __future__ import annotations

import json

from fakeapi import FakeKube, claim, node, pod, storage_class
from test_k8s_sched_volumes import SELECTED, mounting

from balancer.actuate.k8s_gang import GROUP_LABEL, MIN_ANNOTATION
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def most_free(request: dict, nodes: list[dict]) -> str | None:
    return max(nodes, key=lambda n: (n["gpus_free"], n["name"]))["name"] if nodes else None


def member(name: str, gpus: int, clock, *claims: str) -> dict:
    p = mounting(name, *claims, gpus=gpus)
    p["metadata"]["labels"] = {GROUP_LABEL: "train"}
    p["metadata"]["annotations"] = {MIN_ANNOTATION: "2"}
    p["metadata"]["creationTimestamp"] = rfc3339(clock.now - 11 * 60)   # starving
    return p


def held(kube: FakeKube, name: str) -> dict:
    return json.loads((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))


def half_busy(kube: FakeKube, *extra: dict) -> None:
    """a and b: 8 GPUs, 4 taken on each; a WaitForFirstConsumer claim `shared`, not yet given a node."""
    for name in ("a", "b"):
        kube.add(node(name, 8))
        kube.add(pod(f"busy-{name}", gpus=4, node_name=name))
    kube.add(storage_class("wffc"))
    kube.add(claim("shared", storage_class="wffc"))
    for obj in extra:
        kube.add(obj)


def test_members_sharing_a_claim_hold_one_node_and_are_bound_there_once_it_frees(kube: FakeKube, api, clock):
    half_busy(kube)
    for k in range(2):
        kube.add(member(f"w{k}", 4, clock, "shared"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/w0": None, "default/w1": None}
    holding = dict(sched.starving)
    assert sorted(holding) == ["default/w0", "default/w1"]
    [where] = set(holding.values())                                       # one node for both
    assert sorted(held(kube, where)) == ["default/w0", "default/w1"]
    kube.delete("pods", f"busy-{where}", "default")
    clock.advance(60)
    assert sched.schedule_once() == {"default/w0": where, "default/w1": where}
    claim_meta = kube.get("persistentvolumeclaims", "shared", "default")["metadata"]
    assert claim_meta["annotations"][SELECTED] == where


def test_members_sharing_a_claim_hold_no_node_too_small_for_them_all(kube: FakeKube, api, clock):
    """c, free with 4 GPUs, is the node closest to fitting a 4-GPU member alone, but cannot take both."""
    half_busy(kube, node("c", 4))
    for k in range(2):
        kube.add(member(f"w{k}", 4, clock, "shared"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert held(kube, "c") == {}
    assert len(set(dict(sched.starving).values())) == 1 and len(sched.starving) == 2


def test_members_without_a_shared_claim_still_hold_a_node_each(kube: FakeKube, api, clock):
    """8-GPU members, each with a claim of its own: each holds the node closest to fitting it, as before."""
    half_busy(kube, claim("own-0", storage_class="wffc"), claim("own-1", storage_class="wffc"))
    kube.add(member("w0", 8, clock, "own-0"))
    kube.add(member("w1", 8, clock, "own-1"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sorted(dict(sched.starving).values()) == ["a", "b"]


def test_a_member_whose_hold_lapsed_holds_again_the_node_its_claim_partner_holds(kube: FakeKube, api, clock):
    """w1's hold is gone (taken off by someone) while w0 still holds its node: w1 holds that node again, not the
    other, closest to fitting it alone."""
    half_busy(kube)
    for k in range(2):
        kube.add(member(f"w{k}", 4, clock, "shared"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    [where] = set(dict(sched.starving).values())
    kept = {k: v for k, v in held(kube, where).items() if k == "default/w0"}
    kube.mutate("nodes", where, "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(kept)}}})
    clock.advance(60)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)   # a new leader: reads the holds afresh
    sched.schedule_once()
    assert sched.starving == [("default/w1", where)] and sorted(held(kube, where)) == ["default/w0", "default/w1"]
