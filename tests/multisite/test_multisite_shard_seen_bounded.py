"""What a shard remembers of the nodes its readings showed (`ShardedSource._seen`, kept across terms for `listed`) is
bounded: a node deleted from the cluster is forgotten once it has left its shard, the node list having lacked it for
`forget_vanished_after_s` (`ShardedSource.listed_out`: until then it may be a node registered again under its name, its
model needed), and a source with no node list (where `listed` never reads it, and nothing would prune it) remembers
none. Before, every node ever read was kept as a whole `Node` (labels, taints, power caps) for the life of the process,
pruned only by a node list that answers."""

from __future__ import annotations

from balancer.loop import InMemoryLease
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from tests.multisite.test_multisite_shard_fail_static import NOW
from tests.multisite.test_multisite_shard_nodes_new_term import LEASE_S, Clock, Cluster, replica

FORGET_S = PrometheusOptions(url="http://prom.invalid").forget_vanished_after_s


def test_a_node_deleted_from_the_cluster_is_forgotten_once_it_has_left_its_shard():
    fleet = Cluster()
    leader = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    assert leader.run_once().status == "ok"
    seen = leader.source._seen
    assert set(seen) == {"node-a", "node-b", "node-c"}
    # only what `listed` judges by: the GPU model, pool and site the reading showed, no labels, taints or caps
    assert seen["node-c"] == next((n.gpu_model, n.pool, n.site) for n in leader.source.last_full.nodes
                                  if n.name == "node-c")
    fleet.listed = False
    del fleet.hosts["node-c"]      # deleted from the cluster while the node list is not known: kept meanwhile
    leader.run_once()
    assert set(leader.source._seen) == {"node-a", "node-b", "node-c"}
    fleet.listed = True            # the node list answers without it: still shard a's, its model kept
    assert leader.run_once().status == "ok"
    assert set(leader.source._seen) == {"node-a", "node-b", "node-c"}
    leader.source.inner.clock = lambda: NOW + FORGET_S   # lacked that long: it leaves the shard, and is forgotten
    assert leader.run_once().status == "ok"
    assert set(leader.source._seen) == {"node-a", "node-b"}


def test_a_source_without_a_node_list_remembers_no_node():
    """`listed` never reads `_seen` there (the fleet file's nodes, or the reading's alone), and no node list would ever
    forget a node gone from the fleet."""
    fleet = Cluster()
    sharded = ShardedSource(PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                                      client=fleet, clock=lambda: NOW),
                            parse_selector("a", "node=node-a,node=node-c"))
    assert sharded.snapshot().n_gpus == 4
    assert sharded._seen == {}
