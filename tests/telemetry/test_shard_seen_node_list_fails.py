"""What a shard remembers of the nodes its readings showed (`ShardedSource._seen`: their GPU model, pool and site, for
`listed`) stays bounded while the inner source's node list fails and its readings go on: the nodes of the node list's
last answer (and the shard's own), and those a reading showed that the last answer has lacked for less than
`forget_vanished_after_s` (`UNLISTED_AFTER_S` here), no more; an answer with no node is no answer. Before, it was
pruned only when the node list answered, so a node list that never answered (or stopped answering) kept every node
ever read, each one of an autoscaler's replacements.

Kept still is what `listed` needs once the node list answers again: a node it had, dark since, relabelled into the
shard while it failed, is judged by the model a reading showed."""

from __future__ import annotations

from types import MappingProxyType

from balancer import fleet
from balancer.inventory import NodeMeta
from balancer.model import Node
from balancer.telemetry.shard import UNLISTED_AFTER_S, ShardedSource, parse_selector
from balancer.telemetry.vanished import GPU_PRESENT
from tests.loop.loop_helpers import snapshot

LABEL = "gputide.io/shard"
MODEL = "A100-SXM4-80GB"
STEP_S = 60.0   # between two readings (the loop's interval)
KEPT = int(UNLISTED_AFTER_S // STEP_S)   # the replacements a reading showed that are remembered still


class Churning:
    """A source whose reading needs no node list (as the simulator's): it shows the nodes `shown`, each with the
    shard label `labels` gives it; its node list (`node_overrides`) answers `listed`, or fails while `failing`, or
    answers with no node while `empty`. Its clock (`clock`, the shard's too) reads `now`."""

    def __init__(self) -> None:
        self.shown = ["n0", "n1"]
        self.labels = {"n0": "b", "n1": "a"}
        self.listed = dict(self.labels)
        self.failing = self.empty = False
        self.now = 0.0

    def clock(self) -> float:
        return self.now

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


def churn(inner: Churning, shard: ShardedSource, cycles: int, first: int = 0) -> None:
    """`cycles` readings `STEP_S` apart, each showing n0 and a new node (shard a's: spot-`first` on) replacing the last
    one, as an autoscaler's."""
    for k in range(first, first + cycles):
        inner.now += STEP_S
        inner.shown = ["n0", f"spot-{k}"]
        shard.snapshot()


def spots(last: int) -> set[str]:
    """The replacements remembered after the reading that showed spot-`last`: it, and those missing from the node list
    for less than `UNLISTED_AFTER_S` (each from the reading after the one that showed it)."""
    return {f"spot-{k}" for k in range(max(0, last - KEPT), last + 1)}


def test_a_node_list_that_never_answers_leaves_only_the_nodes_read_in_the_last_unlisted_after_s_remembered():
    inner = Churning()
    inner.failing = True
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    churn(inner, shard, 50)
    assert set(shard._seen) == {"n0"} | spots(49) and len(spots(49)) == KEPT + 1 < 50
    churn(inner, shard, 200, first=50)   # four times as many again: no more remembered
    assert set(shard._seen) == {"n0"} | spots(249)
    # nor timed: each remembered node but the latest reading's (no answer has lacked it yet), n0 kept as the shard's
    assert set(shard._absent) == set(shard._seen) - {"spot-249"}


def test_while_the_node_list_fails_the_nodes_of_its_last_answer_are_kept_and_a_dark_one_moves_with_its_label():
    inner = Churning()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 2 and shard.nodes == {"n0"}
    inner.failing = True   # n1 (shard a's) goes dark while the node list fails, and nodes come and go
    churn(inner, shard, 50)
    assert set(shard._seen) == {"n0", "n1"} | spots(49)
    inner.failing, inner.shown = False, ["n0"]
    inner.listed["n1"] = "b"   # relabelled into shard b while dark: its model is the one a reading showed
    shard.snapshot()
    assert shard.nodes == {"n0", "n1"} and set(shard._seen) == {"n0", "n1"} | spots(49)
    inner.now += UNLISTED_AFTER_S   # the replacements the answer lacks are forgotten in time, n1 is not
    shard.snapshot()
    assert set(shard._seen) == {"n0", "n1"}


def test_a_node_list_answering_with_no_node_is_unknown_and_forgets_no_model():
    """An empty answer (`{}`) says nothing of which nodes the cluster has, as for `listed_out`: it kept the models
    of no node, so a dark node relabelled into a shard on model was no shard's once the node list answered again.
    Answers with no node for the whole bound time nothing either: taken for an answer, they forgot the model of n1
    (no node of shard b) at the bound."""
    inner = Churning()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 2 and shard.nodes == {"n0"}
    inner.shown, inner.empty = ["n0"], True   # n1 (shard a's) goes dark; the node list answers with no node
    shard.snapshot()
    inner.now += UNLISTED_AFTER_S   # ... for the whole bound
    shard.snapshot()
    assert set(shard._seen) == {"n0", "n1"}
    inner.empty = False
    inner.listed["n1"] = "b"   # relabelled into shard b while dark: its model is the one a reading showed
    shard.snapshot()
    assert shard.nodes == {"n0", "n1"}


def with_n2() -> Churning:
    """`Churning` with n2, shard b's too, read and listed: shard b's reading goes on while its n0 is dark."""
    inner = Churning()
    inner.labels["n2"] = inner.listed["n2"] = "b"
    inner.shown = ["n0", "n1", "n2"]
    return inner


def test_a_node_list_answering_with_no_node_for_the_bound_keeps_the_shards_dark_node():
    """Answers with no node are unknown to `listed_out` too: taken for answers lacking every node, they dropped the
    shard's dark n0 at the bound (no reading shows it to add it back), its power caps no longer renewed."""
    inner = with_n2()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 4 and shard.nodes == {"n0", "n2"}
    inner.shown, inner.empty = ["n1", "n2"], True   # n0 goes dark; the node list answers with no node
    shard.snapshot()
    inner.now += UNLISTED_AFTER_S   # ... for the whole bound
    shard.snapshot()
    assert shard.nodes == {"n0", "n2"}


def test_the_model_of_a_node_the_shard_holds_is_kept_past_the_bound_so_a_new_term_claims_it_when_listed_again():
    """An answer lacks shard b's dark n0, then the node list fails for the bound: `listed_out` keeps n0 (no answer
    to judge by), so its model is kept too (`_forget_absent` spares the shard's `nodes`). Forgotten, n0 listed again
    for a new term failed the selector on model and was no shard's, its power caps lapsing."""
    inner = with_n2()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 4 and shard.nodes == {"n0", "n2"}
    inner.shown = ["n1", "n2"]   # n0 goes dark ...
    del inner.listed["n0"]       # ... and an answer lacks it (deleted)
    shard.snapshot()
    inner.failing = True         # then the node list fails for the bound
    inner.now += UNLISTED_AFTER_S
    shard.snapshot()
    assert shard.nodes == {"n0", "n2"} and "n0" in shard._seen
    shard.new_term()             # this replica takes the lead again; n0 is listed again (registered), still dark
    inner.failing, inner.listed["n0"] = False, "b"
    shard.snapshot()
    assert shard.nodes == {"n0", "n2"}


def test_a_dark_node_first_read_while_the_node_list_failed_stays_the_bound_after_the_first_answer_lacking_it():
    """Shard b's n3 registers and is read while the node list fails, goes dark, and the first answer after the bound
    lacks it (a blip: deleted and registered again). The node list has lacked it for one answer, not for the bound:
    the shard keeps it (`listed_out` times it from that answer, `_unlisted`), and with it its model, so it holds the
    shard still when listed again. Timed from the first pruning that found the failed list's last answer lacking it
    (as `_absent` is, to keep `_seen` bounded while the list never answers), it was dropped at that answer and its
    model forgotten: listed again, n3 failed the selector on model and was no shard's, its power caps lapsing."""
    inner = with_n2()
    shard = ShardedSource(inner, parse_selector("b", f"model={MODEL},{LABEL}=b"))
    assert shard.snapshot().n_gpus == 4 and shard.nodes == {"n0", "n2"}
    inner.failing = True
    inner.labels["n3"], inner.shown = "b", ["n0", "n1", "n2", "n3"]   # n3 registers, labelled b, and is read
    shard.snapshot()
    assert shard.nodes == {"n0", "n2", "n3"}
    inner.shown = ["n0", "n1", "n2"]   # n3 goes dark; the node list fails for the bound
    shard.snapshot()
    inner.now += UNLISTED_AFTER_S
    shard.snapshot()
    inner.failing = False   # the first answer lacks n3 (the blip) ...
    shard.snapshot()
    assert shard.nodes == {"n0", "n2", "n3"}
    inner.listed["n3"] = "b"   # ... and the next lists it again, dark still
    shard.snapshot()
    assert shard.nodes == {"n0", "n2", "n3"}
