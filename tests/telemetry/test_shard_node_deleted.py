"""A node deleted from the cluster is no longer its shard's once the node list no longer has it and no reading shows
it: gone from gputide_shard_node_info at the next reading, Prometheus answering or not. Before, a node missing from
the reading stayed with the shard for the rest of the term, reported as its own, though nothing held still for it (its
GPUs are forgotten at once once its node is gone) and no power cap or taint of it was left to keep.

A node the node list lacks that a reading still shows (its exporter reporting after the deletion, or a hostname label
that is no node name) is the reading's to judge, as before: still the shard's where the selector names it."""

from __future__ import annotations

from balancer.loop import InMemoryLease
from balancer.telemetry.shard import parse_selector
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import LEASE_S, Clock, Cluster, replica


class Deleting(Cluster):
    """`Cluster`, whose node list lacks the nodes `unlisted` while their exporters still report."""

    def __init__(self) -> None:
        super().__init__()
        self.unlisted: set[str] = set()

    def nodes(self):
        listed = super().nodes()
        return None if listed is None else {n: m for n, m in listed.items() if n not in self.unlisted}


def test_a_node_deleted_from_the_cluster_leaves_its_shard_at_the_next_reading_unless_a_reading_shows_it():
    fleet = Deleting()
    leader = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    leader.source.selector = parse_selector("a", "node=node-a,node=node-c")   # by name: a node with no labels too
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    fleet.unlisted.add("node-c")   # deleted, its exporter still reporting: the reading shows it, still the shard's
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    fleet.dark.add("node-c")       # ... and now gone from the reading too
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a"}}
    assert leader.source.shard_nodes == ("a", frozenset({"node-a"}))


def test_a_node_deleted_while_prometheus_is_down_leaves_its_shard_too():
    fleet = Deleting()
    leader = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    assert leader.run_once().status == "ok"
    fleet.down = True
    del fleet.hosts["node-c"]
    assert leader.run_once().status == "fail_static" and owned(leader) == {"a": {"node-a"}}
