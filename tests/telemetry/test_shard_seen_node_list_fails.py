"""What a shard remembers of the nodes its readings showed (`ShardedSource._seen`: their GPU model, pool and site, for
`listed`) stays bounded while the inner source's node list fails and its readings go on: the nodes of the node list's
last answer and of the latest reading (and the shard's own), no more; an answer with no node is no answer. Before, it
was pruned only when the node list answered, so a node list that never answered (or stopped answering) kept every node
ever read, each one of an autoscaler's replacements.

Kept still is what `listed` needs once the node list answers again: a node it had, dark since, relabelled into the
shard while it failed, is judged by the model a reading showed."""

from __future__ import annotations

from types import MappingProxyType

from balancer import fleet
from balancer.inventory import NodeMeta
from balancer.model import Node
from balancer.telemetry.shard import ShardedSource, parse_selector
from balancer.telemetry.vanished import GPU_PRESENT
from tests.loop.loop_helpers import snapshot

LABEL = "gputide.io/shard"
MODEL = "A100-SXM4-80GB"


class Churning:
    """A source whose reading needs no node list (as the simulator's): it shows the nodes `shown`, each with the
    shard label `labels` gives it; its node list (`node_overrides`) answers `listed`, or fails while `failing`, or
    answers with no node while `empty`."""

    def __init__(self) -> None:
        self.shown = ["n0", "n1"]
        self.labels = {"n0": "b", "n1": "a"}
        self.listed = dict(self.labels)
        self.failing = self.empty = False

    def node_overrides(self):
        if self.failing:
            raise RuntimeError("nodes is forbidden: cannot list resource nodes")
        if self.empty:
            return {}
        return {n: NodeMeta(labels=MappingProxyType({LABEL: s, GPU_PRESENT: "true"})) for n, s in self.listed.items()}

    def snapshot(self):
        fl = fleet.build("t", [Node(name=n, gpu_model=MODEL, gpu_count=2) for n in self.shown])
        snap = snapshot(fl)
        return snap.replace(nodes=tuple(Node(name=n.name, gpu_model=n.gpu_model, gpu_count=n.gpu_count,
                                             labels=MappingProxyType({LABEL: self.labels.get(n.name, "a")}))
                                        for n in snap.nodes))


def churn(inner: Churning, shard: ShardedSource, cycles: int) -> None:
    """`cycles` readings, each showing n0 and a new node (shard a's) replacing the last one, as an autoscaler's."""
    for k in range(cycles):
        inner.shown = ["n0", f"spot-{k}"]
        shard.snapshot()


def test_a_node_list_that_never_answers_leaves_only_the_latest_readings_nodes_remembered():
    inner = Churning()
    inner.failing = True
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    churn(inner, shard, 50)
    assert set(shard._seen) == {"n0", "spot-49"}


def test_while_the_node_list_fails_the_nodes_of_its_last_answer_are_kept_and_a_dark_one_moves_with_its_label():
    inner = Churning()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 2 and shard.nodes == {"n0"}
    inner.failing = True   # n1 (shard a's) goes dark while the node list fails, and nodes come and go
    churn(inner, shard, 50)
    assert set(shard._seen) == {"n0", "n1", "spot-49"}
    inner.failing, inner.shown = False, ["n0"]
    inner.listed["n1"] = "b"   # relabelled into shard b while dark: its model is the one a reading showed
    shard.snapshot()
    assert shard.nodes == {"n0", "n1"} and set(shard._seen) == {"n0", "n1"}


def test_a_node_list_answering_with_no_node_is_unknown_and_forgets_no_model():
    """An empty answer (`{}`) says nothing of which nodes the cluster has, as for `listed_out`: it kept the models
    of no node, so a dark node relabelled into a shard on model was no shard's once the node list answered again."""
    inner = Churning()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 2 and shard.nodes == {"n0"}
    inner.shown, inner.empty = ["n0"], True   # n1 (shard a's) goes dark; the node list answers with no node
    shard.snapshot()
    assert set(shard._seen) == {"n0", "n1"}
    inner.empty = False
    inner.listed["n1"] = "b"   # relabelled into shard b while dark: its model is the one a reading showed
    shard.snapshot()
    assert shard.nodes == {"n0", "n1"}
