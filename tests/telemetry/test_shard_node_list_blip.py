"""A dark node missing from one node-list answer (deleted and registered again under its name: a watch's DELETED then
ADDED) stays its shard's, and so does its GPU model: listed again, it holds its shard still as it holds the unsharded
controller, is reported as the shard's and has its power caps renewed.

Before, the shard dropped it at the first answer that lacked it (`ShardedSource.listed_out`) and forgot its model with
it (`_node_list`). Under a selector on pool (which falls back to the GPU model) or model, which only a reading gives,
the node listed again was then no shard's: the shard read ok and planned without it, where the unsharded controller
held still for it, and its power caps were no longer renewed. Each cycle here plans, so it reads twice (the fresh
reading before acting): the node is missing from both of the blip's readings."""

from __future__ import annotations

import pytest

from balancer.catalog import by_model_name
from balancer.cmd.run import power_cap_scope
from balancer.loop import Reconciler
from tests.multisite.test_multisite_shard_fail_static import LABEL, MODEL
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import Clock
from tests.telemetry.test_shard_node_deleted import Deleting, controller
from tests.telemetry.test_shard_node_joins_mid_term import statuses

GPU = by_model_name(MODEL).key   # the GPU model (and pool: the fleet file names none) a reading shows


HELD = ("fail_static", "missing_telemetry")


def through_a_blip(selector: str) -> tuple[Reconciler, Reconciler, dict[str, set[str]]]:
    """Shard a's controller (`selector`) and the unsharded one, once node-c went dark, was missing from the node list
    for one cycle (two readings) and is listed again, dark still; and the nodes shard a owned before."""
    fleet, clock = Deleting(), Clock()
    shard, whole = controller(fleet, selector, clock), controller(fleet, None, clock)
    assert statuses(shard, whole) == [("ok", None)] * 2
    fleet.dark.add("node-c")
    assert statuses(shard, whole) == [HELD] * 2
    before = owned(shard)
    assert "node-c" in before["a"]
    fleet.unlisted.add("node-c")   # deleted: its GPUs are forgotten at once, by both
    assert statuses(shard, whole) == [("ok", None)] * 2
    assert owned(shard) == before
    fleet.unlisted.clear()   # ... and registered again under its name, still dark
    return shard, whole, before


@pytest.mark.parametrize("selector", [f"pool={GPU},{LABEL}=a", f"model={GPU}", f"pool={GPU}"])
def test_a_dark_node_missing_from_one_node_list_answer_stays_its_shards_and_holds_it_when_listed_again(selector):
    shard, whole, before = through_a_blip(selector)
    for _ in range(3):
        assert statuses(shard, whole) == [HELD] * 2
    assert owned(shard) == before
    assert power_cap_scope(shard.source, 30.0)["power_cap_nodes"]("node-c")


@pytest.mark.parametrize("selector", [f"pool={GPU},{LABEL}=a", f"model={GPU}"])
def test_its_model_outlasts_the_blip_so_a_new_term_claims_it_when_listed_again(selector):
    """A new term knows no node but those the node list gives it (`listed`), judged by the model a reading showed:
    forgotten with the blip, the dark node was no shard's for the new term."""
    shard, whole, _ = through_a_blip(selector)
    shard.source.new_term()   # this replica takes the lead again (`Reconciler._take_office`)
    assert statuses(shard, whole) == [HELD] * 2
    assert "node-c" in owned(shard)["a"]
