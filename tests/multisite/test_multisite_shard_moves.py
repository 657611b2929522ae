"""A node that moves to another shard (its `gputide.io/shard` label changed) is that shard's from the next reading,
in what the old shard reports too: `ShardedSource.forgotten` kept every node a snapshot of the shard ever held, so
the GPUs forgotten on a node that had moved away were gauged by both shards (`gputide_gpus_forgotten{node}` twice:
a dashboard summing the shards counted them twice, and the old shard named a node it no longer acts on)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from balancer.telemetry.shard import ShardedSource, parse_selector
from tests.loop.loop_helpers import make_fleet, snapshot

LABEL = "gputide.io/shard"


class Moving:
    """The whole cluster's telemetry: n0 in shard a, n1 in shard a then b; GPUs forgotten on n1 after the move, and
    n2 (shard a) gone from telemetry altogether, its GPUs forgotten with it."""

    def __init__(self) -> None:
        self.fl = make_fleet(nodes=3, gpus_per_node=2)
        self.n1_shard, self.with_n2 = "a", True
        self.forgotten: dict[str, str] = {}

    def snapshot(self):
        labels = {"n0": "a", "n1": self.n1_shard, "n2": "a"}
        nodes = [replace(n, labels=MappingProxyType({LABEL: labels[n.name]})) for n in self.fl.nodes]
        snap = snapshot(self.fl, nodes=nodes)
        if not self.with_n2:   # its exporter dark: neither its node nor its GPUs in the reading
            keep = [g for g in snap.gpus if g.node != "n2"]
            snap = snapshot(make_fleet(nodes=2, gpus_per_node=2), nodes=nodes[:2])
            assert [g.uuid for g in snap.gpus] == [g.uuid for g in keep]
        return snap


def test_gpus_forgotten_on_a_node_that_moved_are_reported_by_its_new_shard_alone():
    inner = Moving()
    a = ShardedSource(inner, parse_selector("a", f"{LABEL}=a"))
    b = ShardedSource(inner, parse_selector("b", f"{LABEL}=b"))
    a.snapshot()
    inner.n1_shard = "b"
    inner.with_n2 = False
    a.snapshot(), b.snapshot()
    inner.forgotten = {g.uuid: g.node for g in inner.fl.gpus if g.node in ("n1", "n2")}
    n1 = {g.uuid: "n1" for g in inner.fl.gpus if g.node == "n1"}
    n2 = {g.uuid: "n2" for g in inner.fl.gpus if g.node == "n2"}
    assert b.forgotten == n1
    assert a.forgotten == n2   # a node gone from telemetry altogether stays with the shard that last held it
