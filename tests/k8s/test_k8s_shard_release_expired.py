"""A shard's controller releases the expired hot taints and reservations of its own nodes only, and never one renewed
after it listed the nodes (the fake API server, through the real clients).

Before, `ShardBound` passed `recover()` and `housekeeping()` through to `KubernetesActuator.release_expired`, which
went through every node: shard b removed shard a's expired taints and reservations, which shard a's planner may have
been about to renew. And the write removed the taint (or the reservations listed as expired) whatever the node said
by then: a renewal that landed between the list and the write (shard a's, or a previous leader's) was undone."""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import pytest
from fakeapi import FakeKube, node

from balancer.actions import TaintNode
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import KubernetesNodes
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    HOT_UNTIL_ANNOTATION,
    RESERVATION_ANNOTATION,
    parse_time,
    rfc3339,
)
from balancer.cmd._run_parts import ShardBound
from balancer.model import NodeMeta
from balancer.telemetry.shard import ShardedSource, parse_selector
from balancer.telemetry.vanished import GPU_PRESENT
from tests.loop.loop_helpers import make_fleet, snapshot

SHARD = "gputide.io/shard"
FL = make_fleet(3, 2, models=["A100-SXM4-80GB", "A100-SXM4-80GB", "L40S"])   # n0, n1: shard a; n2: shard b
LABELS = {"n0": "a", "n1": "a", "n2": "b"}
OWNER = "training/job"


def expired(name: str, shard: str, now: float, gpu: bool = True) -> dict:
    """A node that carries gputide's hot taint and a reservation, both expired a minute before `now`; a GPU node
    as the GPU operator labels one (`nvidia.com/gpu.present=true`, the exporter's nodeSelector) unless `gpu` is
    False."""
    obj = node(name, 2, labels={SHARD: shard} | ({GPU_PRESENT: "true"} if gpu else {}))
    obj["spec"]["taints"] = [{"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    obj["metadata"]["annotations"] = {
        HOT_UNTIL_ANNOTATION: rfc3339(now - 60),
        RESERVATION_ANNOTATION: json.dumps({OWNER: {"pod": f"{OWNER}-0", "gpus": [0], "count": 1,
                                                    "expires": rfc3339(now - 60)}}),
    }
    return obj


def held(kube: FakeKube, name: str) -> tuple[bool, set[str]]:
    """(whether `name` carries the hot taint, the owners it is reserved for)."""
    obj = kube.get("nodes", name)
    taint = any(t["key"] == HOT_TAINT_KEY for t in obj["spec"].get("taints") or ())
    reserved = json.loads((obj["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION) or "{}")
    return taint, set(reserved)


class KubeLabelled:
    """The shard's inner source as `gputide run` builds it: the fleet file, and the nodes' labels from the Kubernetes
    API (`node_overrides`), which the reading's nodes carry."""

    def __init__(self, api, clock, fleet=None) -> None:
        self.node_overrides = KubernetesNodes(api, ttl_s=0.0, clock=clock, sleep=lambda s: None)
        self.fleet = fleet

    def snapshot(self):
        meta = self.node_overrides()
        return snapshot(FL, nodes=[replace(n, labels=meta[n.name].labels) for n in FL.nodes])


@pytest.fixture
def nodes(kube: FakeKube, clock):
    for name, shard in LABELS.items():
        kube.add(expired(name, shard, clock()))


def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def shard_b(api, clock, selector: str = f"{SHARD}=b", fleet=None) -> tuple[ShardBound, ShardedSource]:
    source = ShardedSource(KubeLabelled(api, clock, fleet), parse_selector("b", selector))
    return ShardBound(actuator(api, clock), source), source


def test_a_shards_housekeeping_releases_its_own_nodes_expiries_only(kube, api, clock, nodes):
    bound, source = shard_b(api, clock)
    source.snapshot()   # the cycle's reading, before its housekeeping
    notes = bound.housekeeping()
    assert held(kube, "n2") == (False, set())
    assert sorted(notes) == ["n2: hot taint expired", f"n2: reservations expired: ['{OWNER}']"]
    assert held(kube, "n0") == held(kube, "n1") == (True, {OWNER})   # shard a's, left to shard a
    assert not kube.calls("PATCH", r"/nodes/n[01]$")
    # without a node filter (an unsharded controller) every node's, as before
    assert len(actuator(api, clock).housekeeping()) == 4
    assert held(kube, "n0") == held(kube, "n1") == (False, set())


@pytest.mark.parametrize("selector", [f"{SHARD}=b", "model=L40S"], ids=["by label", "by the fleet file's model"])
def test_a_shards_first_recover_before_any_reading_keeps_to_the_nodes_its_selector_matches(kube, api, clock, nodes,
                                                                                             selector):
    """`recover` runs on the first cycle as leader, before the first reading: the shard's nodes are those its selector
    matches as the Kubernetes API labels them (and the fleet file describes them)."""
    bound, source = shard_b(api, clock, selector, fleet=FL)
    assert source.last_full is None and bound.own_nodes() == {"n2"}
    bound.recover()
    assert held(kube, "n2") == (False, set())
    assert held(kube, "n0") == held(kube, "n1") == (True, {OWNER})


def test_a_node_relabelled_into_the_shard_is_its_own_before_the_first_reading(kube, api, clock, nodes):
    kube.mutate("nodes", "n1", "", {"metadata": {"labels": {SHARD: "b"}}})
    bound, _ = shard_b(api, clock)
    bound.recover()
    assert held(kube, "n1") == held(kube, "n2") == (False, set())
    assert held(kube, "n0") == (True, {OWNER})


def test_before_the_first_reading_a_node_without_gpus_labelled_for_the_shard_is_not_its_own(kube, api, clock, nodes):
    """The shard's nodes before a reading are the node list's GPU nodes (`ShardedSource.listed`), the set it reports
    and renews power caps on then, and the kind a reading shows after: a CPU node carrying the shard's label (a
    selector on a label CPU nodes share) is none of its own, however its annotations read."""
    kube.add(expired("cpu-1", "b", clock(), gpu=False))
    bound, source = shard_b(api, clock)
    assert source.last_full is None and bound.own_nodes() == source.listed() == {"n2"}
    bound.recover()
    assert held(kube, "n2") == (False, set())
    assert held(kube, "cpu-1") == held(kube, "n0") == (True, {OWNER})


def test_before_the_api_has_listed_the_nodes_a_shards_recover_releases_nothing(kube, api, clock, nodes):
    """The nodes' labels unknown, no node is known to be the shard's: the first housekeeping after the reading keeps
    them."""
    bound, source = shard_b(api, clock)
    source.inner.node_overrides = lambda: None
    assert bound.recover() == []
    assert all(held(kube, n) == (True, {OWNER}) for n in LABELS)
    source.inner.node_overrides = lambda: {n: NodeMeta(labels=MappingProxyType({SHARD: s})) for n, s in LABELS.items()}
    source.snapshot()
    bound.housekeeping()
    assert held(kube, "n2") == (False, set()) and held(kube, "n0") == (True, {OWNER})


@pytest.mark.parametrize("verb", ["GET", "PATCH"],
                         ids=["between the list and the read", "between the read and the write"])
@pytest.mark.parametrize("what", ["taint", "reservation"])
def test_a_renewal_that_lands_after_the_list_survives_the_release(kube, api, clock, nodes, verb, what):
    """Another controller (shard a, a previous leader) renews n1's taint or reservation while this one releases the
    expired ones: the expiry is judged again on the node the write reads, and the write's resourceVersion makes a
    renewal after that read a conflict, read again."""
    later = clock() + 600
    if what == "taint":
        other = actuator(api, clock)
        renew = lambda: other.apply(TaintNode(node="n1", reason="hot", renew=True), None)   # noqa: E731
    else:   # n1 without its taint: the reservation's read and write are n1's only ones
        kube.mutate("nodes", "n1", "", {"spec": {"taints": None}, "metadata": {"annotations": {
            HOT_UNTIL_ANNOTATION: None}}})
        entry = {"pod": f"{OWNER}-0", "gpus": [0], "count": 1, "expires": rfc3339(later)}
        renew = lambda: kube.mutate("nodes", "n1", "", {"metadata": {"annotations": {   # noqa: E731
            RESERVATION_ANNOTATION: json.dumps({OWNER: entry})}}})
    kube.before(verb, r"/api/v1/nodes/n1(\?|$)", renew)
    notes = actuator(api, clock).release_expired()
    taint, reserved = held(kube, "n1")
    annotations = kube.get("nodes", "n1")["metadata"]["annotations"]
    if what == "taint":
        assert taint and parse_time(annotations[HOT_UNTIL_ANNOTATION]) > clock()
        assert "n1: hot taint expired" not in notes
    else:
        assert (reserved == {OWNER}
                and json.loads(annotations[RESERVATION_ANNOTATION])[OWNER]["expires"] == rfc3339(later))
        assert f"n1: reservations expired: ['{OWNER}']" not in notes
    assert held(kube, "n0") == held(kube, "n2") == (False, set())   # the others released as before
