"""Which nodes each shard owns, as its controller exports them (gputide_shard_nodes{shard},
gputide_shard_node_info{shard, node}): a GPU node labelled for no shard, or for one that does not run, is left alone
by every shard, and nothing said so; GputideGpuNodeInNoShard (rules/gputide-alerts.yaml) now finds it as a hostname
the exporters report that no shard's series names. An unsharded controller exports none (it owns every node), nor
does a replica that stopped leading (its successor reports)."""

from __future__ import annotations

from balancer.telemetry.shard import ShardedSource
from tests.multisite.test_multisite_shard_fail_static import Fleet, controller


def owned(reconciler) -> dict[str, set[str]]:
    """{shard: nodes} as the controller's registry serves gputide_shard_node_info, checked against
    gputide_shard_nodes' count of them."""
    out: dict[str, set[str]] = {}
    counts = {}
    for family in reconciler.metrics.registry.collect():
        for sample in family.samples:
            if sample.name == "gputide_shard_node_info":
                assert sample.value == 1
                out.setdefault(sample.labels["shard"], set()).add(sample.labels["node"])
            elif sample.name == "gputide_shard_nodes":
                counts[sample.labels["shard"]] = sample.value
    assert counts == {s: float(len(out.get(s, ()))) for s in counts} and set(out) <= set(counts), (counts, out)
    return {s: out.get(s, set()) for s in counts}


def test_each_shard_exports_its_nodes_and_a_node_labelled_for_no_shard_is_in_none():
    fleet = Fleet()
    fleet.hosts["node-c"] = "A"   # a typo: no shard's selector matches it
    a, b, whole = controller(fleet, "a"), controller(fleet, "b"), controller(fleet, None)
    assert [c.run_once().status for c in (a, b, whole)] == ["ok", "ok", "ok"]
    assert owned(a) == {"a": {"node-a"}} and owned(b) == {"b": {"node-b"}}
    assert owned(whole) == {}   # unsharded: it owns every node and says nothing of shards
    assert "node-c" in {n.name for n in whole.source.snapshot().nodes}   # reported, balanced by no shard


def test_a_node_relabelled_out_of_its_shard_leaves_its_series_even_as_the_shards_last():
    """Shard a's only node relabelled for no shard: shard a holds (no GPU of its own), and no longer claims it."""
    fleet = Fleet()
    a = controller(fleet, "a")
    assert a.run_once().status == "ok" and owned(a) == {"a": {"node-a"}}
    fleet.hosts["node-a"] = "none"
    assert a.run_once().status == "fail_static"
    assert owned(a) == {"a": set()} and a.source.shard_nodes == ("a", frozenset())


def test_a_dark_node_stays_with_its_shard_and_a_demoted_replica_reports_no_nodes():
    fleet = Fleet()
    a = controller(fleet, "a")
    a.run_once()
    fleet.dark.add("node-a")   # its exporter serves nothing: still shard a's (it holds for it)
    a.run_once()
    assert isinstance(a.source, ShardedSource) and owned(a) == {"a": {"node-a"}}
    a.metrics.standby()   # lost its Lease: the new leader reports the shard's nodes
    assert owned(a) == {}
