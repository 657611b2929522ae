"""A node deleted from the cluster is no longer its shard's once the node list has lacked it for
`forget_vanished_after_s` (the time the unsharded controller holds still for a dark GPU) and no reading shows it: gone
from gputide_shard_node_info then, Prometheus answering or not. Before that it stays, holding nothing (its GPUs are
forgotten at once once its node is gone): a node deleted and registered again under its name is missing from an
answer or two, and must still be its shard's when listed again (test_shard_node_list_blip.py). Before 204bec18 a node
missing from the reading stayed with the shard for the rest of the term; from it until this rule, it left at the first
answer that lacked it.

A node the node list lacks that a reading still shows (its exporter reporting after the deletion, or a hostname label
that is no node name) is the reading's to judge, as before: still the shard's where the selector names it."""

from __future__ import annotations

from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd._run_parts import bound_to_shard
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from tests.multisite.test_multisite_shard_fail_static import LABEL, taint_every_node
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import Clock, Cluster

FORGET_S = PrometheusOptions(url="http://prom.invalid").forget_vanished_after_s


class Deleting(Cluster):
    """`Cluster`, whose node list lacks the nodes `unlisted` while their exporters report or not (`dark`)."""

    def __init__(self) -> None:
        super().__init__()
        self.unlisted: set[str] = set()

    def nodes(self):
        listed = super().nodes()
        return None if listed is None else {n: m for n, m in listed.items() if n not in self.unlisted}


def controller(fleet: Deleting, selector: str | None, clock: Clock) -> Reconciler:
    """`gputide run [--shard a --selector SELECTOR] --dry-run`, its Prometheus source's clock (the vanished-GPU timer's
    and the shard's) `clock`."""
    source = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                       client=fleet, clock=clock, node_overrides=fleet.nodes)
    actuator = DryRunActuator()
    if selector is not None:
        source = ShardedSource(source, parse_selector("a", selector))
        actuator = bound_to_shard(actuator, source)
    return Reconciler(source=source, actuator=actuator, planner=taint_every_node, clock=clock,
                      policy=BalancerPolicy(safety=SafetyPolicy(power_cooldown_s=0.0)))


def test_a_node_deleted_from_the_cluster_leaves_its_shard_after_forget_vanished_after_s_unless_a_reading_shows_it():
    fleet, clock = Deleting(), Clock()
    leader = controller(fleet, "node=node-a,node=node-c", clock)   # by name: a node with no labels too
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    fleet.unlisted.add("node-c")   # deleted, its exporter still reporting: the reading shows it, still the shard's
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    fleet.dark.add("node-c")       # ... and now gone from the reading too: it holds nothing, still the shard's
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    clock.now += FORGET_S - 1.0    # from the first answer that lacked it
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a", "node-c"}}
    clock.now += 1.0
    assert leader.run_once().status == "ok" and owned(leader) == {"a": {"node-a"}}
    assert leader.source.shard_nodes == ("a", frozenset({"node-a"}))


def test_a_node_deleted_while_prometheus_is_down_leaves_its_shard_after_forget_vanished_after_s_too():
    fleet, clock = Deleting(), Clock()
    leader = controller(fleet, f"{LABEL}=a", clock)
    assert leader.run_once().status == "ok"
    fleet.down = True
    del fleet.hosts["node-c"]
    assert leader.run_once().status == "fail_static" and owned(leader) == {"a": {"node-a", "node-c"}}
    clock.now += FORGET_S
    assert leader.run_once().status == "fail_static" and owned(leader) == {"a": {"node-a"}}
