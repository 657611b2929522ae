"""A dark node relabelled out of a shard mid-term is no longer the shard's: it stops holding it still and having its
power caps renewed there, and holds the shard it is labelled for now.

A node no reading shows (its exporter dark) stayed with the shard that held it (`ShardedSource.nodes`) for the whole
term: listed at the term's start, or read before it went dark. Relabelled into another shard meanwhile, no reading
showed it again, so it stayed: the old shard held still for it (missing telemetry) until the node came back, reported
it as its own (gputide_shard_node_info: owned by two shards once the new one listed it) and renewed its power caps,
keeping alive the caps of a node another shard owns, which `run.power_cap_scope` is there to prevent."""

from __future__ import annotations

import pytest

from balancer.loop import InMemoryLease, Reconciler
from balancer.telemetry.shard import parse_selector
from tests.multisite.test_multisite_shard_fail_static import LABEL
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import LEASE_S, Clock, Cluster, renewed, replica


@pytest.mark.parametrize("read_first", [False, True], ids=["dark since before the term", "read, then dark"])
def test_a_dark_node_relabelled_out_mid_term_is_no_longer_the_shards_once_the_node_list_says_so(read_first):
    fleet = Cluster()
    if not read_first:
        fleet.dark.add("node-c")
    one = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    if read_first:
        assert one.run_once().status == "ok"
        fleet.dark.add("node-c")
    report = one.run_once()
    assert (report.status, report.reason) == ("fail_static", "missing_telemetry")
    assert owned(one) == {"a": {"node-a", "node-c"}} and renewed(one) == {"node-a", "node-c"}
    fleet.hosts["node-c"] = "b"   # relabelled while dark: no reading shows it
    fleet.listed = False          # ... and the node list is not known yet: which shard's it is is unknown, it stays
    report = one.run_once()
    assert report.status == "fail_static" and renewed(one) == {"node-a", "node-c"}
    fleet.listed = True
    assert one.run_once().status == "ok"
    assert owned(one) == {"a": {"node-a"}} and renewed(one) == {"node-a"}
    # shard b's leader owns it by the node list, and holds still for it
    b = replica(fleet, InMemoryLease(duration_s=LEASE_S), "b1", Clock())
    b.source.selector = parse_selector("b", f"{LABEL}=b")
    held = b.run_once()
    assert (held.status, held.reason) == ("fail_static", "missing_telemetry")
    assert owned(b) == {"b": {"node-b", "node-c"}} and renewed(b) == {"node-b", "node-c"}


def shard_replica(fleet, shard: str) -> Reconciler:
    """The leader of shard `shard` (`gputide run --shard NAME --selector gputide.io/shard=NAME`), on its own Lease."""
    leader = replica(fleet, InMemoryLease(duration_s=LEASE_S), f"{shard}1", Clock())
    leader.source.selector = parse_selector(shard, f"{LABEL}={shard}")
    return leader


def test_a_dark_node_relabelled_mid_term_is_the_shard_its_labelled_for_even_one_already_reading():
    """The shard it is relabelled into is mid-term too: its nodes grew only from a reading that shows the node or the
    node list at the term's start, a dark node in neither. The old shard dropped node-c and the new one never added
    it: owned by no shard, nobody held still for it, and its power caps were renewed by none, to lapse."""
    fleet = Cluster()
    a, b = shard_replica(fleet, "a"), shard_replica(fleet, "b")
    assert a.run_once().status == "ok" and b.run_once().status == "ok"   # both terms past their first reading
    relabel_dark_node_c_there_and_back(fleet, a, b)
    fleet.dark.discard("node-c")   # its exporter back: read where it is labelled
    assert a.run_once().status == "ok" and b.run_once().status == "ok"
    assert owned(a) == {"a": {"node-a", "node-c"}} and owned(b) == {"b": {"node-b"}}


@pytest.mark.parametrize("key", ["model", "pool"])
def test_a_dark_node_relabelled_mid_term_moves_with_its_label_under_a_selector_on_gpu_model_or_pool(key):
    """With no fleet file, a node the node list has is known by its labels only: without telemetry it had no model and
    no pool, so a selector that also names the GPU model or pool (`model=H100-SXM,gputide.io/shard=b`) never matched
    the dark node relabelled into shard b. Shard a dropped it (its label says b), shard b could not add it: both ok,
    no shard owned it, and its power caps lapsed. A node a reading showed is judged by the model and pool it showed."""
    fleet = Cluster()
    a, b = shard_replica(fleet, "a"), shard_replica(fleet, "b")
    assert a.run_once().status == "ok"
    shown = a.source.last_full.nodes[0]
    value = shown.gpu_model if key == "model" else (shown.pool or shown.gpu_model)
    for leader, shard in ((a, "a"), (b, "b")):
        leader.source.selector = parse_selector(shard, f"{key}={value},{LABEL}={shard}")
    assert a.run_once().status == "ok" and b.run_once().status == "ok"
    relabel_dark_node_c_there_and_back(fleet, a, b)   # and back: the model shard b remembers does not keep it


def relabel_dark_node_c_there_and_back(fleet, a: Reconciler, b: Reconciler) -> None:
    """node-c (shard a's) goes dark, is relabelled into shard b (which holds still for it and owns it, shard a no
    longer), then back into shard a (shard a's own again, not b's); both shards' terms past their first reading."""
    fleet.dark.add("node-c")
    held, on_b = a.run_once(), b.run_once()
    assert (held.status, held.reason, on_b.status) == ("fail_static", "missing_telemetry", "ok")
    fleet.hosts["node-c"] = "b"   # relabelled while dark
    on_a, held = a.run_once(), b.run_once()
    assert on_a.status == "ok" and owned(a) == {"a": {"node-a"}} and renewed(a) == {"node-a"}
    assert (held.status, held.reason) == ("fail_static", "missing_telemetry")
    assert owned(b) == {"b": {"node-b", "node-c"}} and renewed(b) == {"node-b", "node-c"}
    fleet.hosts["node-c"] = "a"   # ... and back: shard a's own again, not b's
    held, on_b = a.run_once(), b.run_once()
    assert (held.status, held.reason) == ("fail_static", "missing_telemetry")
    assert owned(a) == {"a": {"node-a", "node-c"}} and renewed(a) == {"node-a", "node-c"}
    assert on_b.status == "ok" and owned(b) == {"b": {"node-b"}} and renewed(b) == {"node-b"}
