"""A dark node's GPU model (`ShardedSource._seen`) outlasts a node-list blip (a watch's DELETED then ADDED) on every
replica, not only on the one whose shard holds it: a node the node list lacks is forgotten once it has lacked it for
`forget_vanished_after_s` and no shard of this replica holds it, and one listed again is missing no more.

Before, a replica forgot such a node's model at the first answer that lacked it unless it was among its own `nodes`.
So shard b forgot the model of shard a's dark node, and once that node was relabelled to b under a selector on pool
or model (which only a reading gives) it was no shard's: a dropped it (labelled out), b could not match it, b read ok
and planned without it where the unsharded controller held still, and nobody renewed its power caps. Likewise a new
term during the blip (`new_term` empties `nodes`) forgot the model of its own dark node, and the node listed again was
no shard's for that term."""

from __future__ import annotations

import pytest

from balancer.catalog import by_model_name
from balancer.cmd.run import power_cap_scope
from balancer.loop import Reconciler
from balancer.telemetry.shard import parse_selector
from tests.multisite.test_multisite_shard_fail_static import LABEL, MODEL
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import Clock
from tests.telemetry.test_shard_node_deleted import FORGET_S, Deleting, controller
from tests.telemetry.test_shard_node_joins_mid_term import statuses

GPU = by_model_name(MODEL).key   # the GPU model (and pool: the fleet file names none) a reading shows
HELD = ("fail_static", "missing_telemetry")
SELECTORS = [f"pool={GPU},{LABEL}={{s}}", f"model={GPU},{LABEL}={{s}}"]


def shards(fleet: Deleting, selector: str, clock: Clock) -> tuple[Reconciler, Reconciler, Reconciler]:
    """Shard a's and shard b's controllers (`selector` with `{s}` their name) and the unsharded one, every term past
    its first reading; node-c (shard a's) dark since."""
    a = controller(fleet, selector.format(s="a"), clock)
    b = controller(fleet, selector.format(s="b"), clock)
    b.source.selector = parse_selector("b", selector.format(s="b"))
    whole = controller(fleet, None, clock)
    assert statuses(a, b, whole) == [("ok", None)] * 3
    fleet.dark.add("node-c")
    assert statuses(a, b, whole) == [HELD, ("ok", None), HELD]
    return a, b, whole


@pytest.mark.parametrize("selector", SELECTORS)
def test_a_dark_node_relabelled_to_another_shard_after_a_node_list_blip_holds_that_shard(selector):
    fleet, clock = Deleting(), Clock()
    a, b, whole = shards(fleet, selector, clock)
    fleet.unlisted.add("node-c")   # deleted ...
    assert statuses(a, b, whole) == [("ok", None)] * 3
    fleet.unlisted.clear()         # ... and registered again under its name, still dark
    assert statuses(a, b, whole) == [HELD, ("ok", None), HELD]
    fleet.hosts["node-c"] = "b"    # relabelled to shard b while dark: b judges it by the model a reading showed
    assert statuses(a, b, whole) == [("ok", None), HELD, HELD]
    assert owned(a) == {"a": {"node-a"}} and owned(b) == {"b": {"node-b", "node-c"}}
    assert power_cap_scope(b.source, 30.0)["power_cap_nodes"]("node-c")


@pytest.mark.parametrize("selector", [s.format(s="a") for s in SELECTORS] + [f"model={GPU}"])
def test_a_new_term_during_a_node_list_blip_claims_the_dark_node_when_listed_again(selector):
    fleet, clock = Deleting(), Clock()
    shard, whole = controller(fleet, selector, clock), controller(fleet, None, clock)
    assert statuses(shard, whole) == [("ok", None)] * 2
    fleet.dark.add("node-c")
    assert statuses(shard, whole) == [HELD] * 2
    fleet.unlisted.add("node-c")
    assert statuses(shard, whole) == [("ok", None)] * 2
    shard.source.new_term()        # this replica takes the lead again during the blip (`Reconciler._take_office`)
    assert statuses(shard, whole) == [("ok", None)] * 2
    fleet.unlisted.clear()
    assert statuses(shard, whole) == [HELD] * 2
    assert "node-c" in owned(shard)["a"]
    assert power_cap_scope(shard.source, 30.0)["power_cap_nodes"]("node-c")


def test_a_node_no_shard_of_the_replica_holds_is_forgotten_once_unlisted_for_forget_vanished_after_s():
    """Shard b never held node-c: it keeps its model while the node list lacks it for less than the bound, forgets
    it at the bound, and a node listed again between two blips starts its time missing afresh at the second."""
    fleet, clock = Deleting(), Clock()
    _, b, _ = shards(fleet, SELECTORS[0], clock)
    seen = b.source._seen
    fleet.unlisted.add("node-c")
    b.run_once()
    clock.now += FORGET_S - 1.0
    b.run_once()
    assert "node-c" in seen
    fleet.unlisted.clear()         # listed again: missing no more
    b.run_once()
    clock.now += 1.0
    fleet.unlisted.add("node-c")   # a second blip, FORGET_S after the first began
    b.run_once()
    assert "node-c" in seen
    clock.now += FORGET_S
    b.run_once()
    assert "node-c" not in seen and b.source._absent == {}
