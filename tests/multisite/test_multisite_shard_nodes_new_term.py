"""A shard's nodes are those of its current term as leader, and while no reading of it has shown which are the
shard's (Prometheus down), those the Kubernetes API's node list says.

A replica that led, was demoted and led again kept the nodes of its earlier term (`ShardedSource.nodes`): one
relabelled into another shard meanwhile was still reported as its own (gputide_shard_node_info, the node owned by two
shards) and had its power caps renewed while the new term held still, until a reading reached the scope check. And a
leader whose readings all failed before the scope check reported no node at all, so GputideGpuNodeInNoShard named
every node of its shard after 15 minutes, though the node list tells them without any telemetry. Nor did a replica
leading again hold still for a dark node of its shard: knowing none, it found the node no shard's."""

from __future__ import annotations

from types import MappingProxyType

import pytest
import requests

from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd._run_parts import bound_to_shard
from balancer.cmd.run import power_cap_scope
from balancer.errors import TelemetryUnavailable
from balancer.inventory import NodeMeta
from balancer.loop import InMemoryLeaderElector, InMemoryLease, Reconciler
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from balancer.telemetry.vanished import GPU_PRESENT
from tests.loop.loop_helpers import make_fleet
from tests.multisite.test_multisite_shard_fail_static import LABEL, NOW, Fleet, taint_every_node
from tests.multisite.test_multisite_shard_nodes_gauge import owned

LEASE_S = 90.0


class Cluster(Fleet):
    """node-a and node-c (shard a), node-b (shard b), GPU nodes as the GPU operator labels them; `down`: Prometheus
    does not answer; `listed`: whether the Kubernetes API's nodes are listed yet; `cpu`: nodes the API lists that carry
    no GPU (no exporter, no telemetry), by their shard label."""

    def __init__(self) -> None:
        super().__init__()
        self.hosts["node-c"] = "a"
        self.cpu: dict[str, str] = {}
        self.down, self.listed = False, True

    def nodes(self):
        if not self.listed:
            return None
        gpu = {h: NodeMeta(labels=MappingProxyType({LABEL: s, GPU_PRESENT: "true"})) for h, s in self.hosts.items()}
        return gpu | {h: NodeMeta(labels=MappingProxyType({LABEL: s})) for h, s in self.cpu.items()}

    def custom_query(self, promql: str) -> list[dict]:
        if self.down:
            raise requests.ConnectionError("connection refused")
        return super().custom_query(promql)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def replica(fleet: Cluster, lease: InMemoryLease, identity: str, clock: Clock) -> Reconciler:
    """One replica of shard a's Deployment, as `gputide run --shard a --selector gputide.io/shard=a --leader-elect
    --dry-run` builds it."""
    source = ShardedSource(PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                                     client=fleet, clock=lambda: NOW, node_overrides=fleet.nodes),
                           parse_selector("a", f"{LABEL}=a"))
    return Reconciler(source=source, actuator=bound_to_shard(DryRunActuator(), source), planner=taint_every_node,
                      clock=clock, elector=InMemoryLeaderElector(lease, identity))


def renewed(reconciler: Reconciler) -> set[str]:
    """The nodes whose power caps `reconciler`'s Kubernetes actuator would renew (`run.power_cap_scope`)."""
    keeps = power_cap_scope(reconciler.source, 30.0)["power_cap_nodes"]
    return {n for n in ("node-a", "node-b", "node-c") if keeps(n)}


def led_then_demoted(fleet: Cluster) -> tuple[Reconciler, Reconciler, Clock]:
    """Replica 1 leads and reads shard a's nodes (node-a, node-c); replica 2 takes the Lease over while node-c is
    relabelled into shard b; replica 1 finds itself a standby."""
    lease, clock = InMemoryLease(duration_s=LEASE_S), Clock()
    one, two = replica(fleet, lease, "1", clock), replica(fleet, lease, "2", clock)
    assert one.run_once().status == "ok" and owned(one) == {"a": {"node-a", "node-c"}}
    clock.now += LEASE_S + 10.0   # replica 1 stuck past its Lease
    fleet.hosts["node-c"] = "b"
    assert two.run_once().status == "ok" and owned(two) == {"a": {"node-a"}}
    assert one.run_once().status == "standby" and owned(one) == {}
    return one, two, clock


def lead_again(one: Reconciler, two: Reconciler, clock: Clock) -> None:
    """Replica 2 goes; replica 1 takes the Lease again, and its first reading is refused before the scope check."""
    clock.now += LEASE_S + 10.0
    report = one.run_once()
    assert (report.status, report.reason) == ("fail_static", "telemetry_unavailable")


def test_a_replica_leading_again_with_prometheus_down_owns_the_shards_nodes_of_now_not_of_its_earlier_term():
    fleet = Cluster()
    one, two, clock = led_then_demoted(fleet)
    fleet.down = True
    lead_again(one, two, clock)
    assert owned(one) == {"a": {"node-a"}}   # node-c is shard b's now: not reported, its caps not renewed
    assert renewed(one) == {"node-a"}


def test_a_replica_leading_again_before_the_nodes_are_listed_owns_none_and_renews_no_cap():
    """Which nodes are the shard's is not known at all: none claimed, and no cap renewed on a stale scope (nor
    dropped: the previous leader renewed them, and they lapse only once their expiry passes)."""
    fleet = Cluster()
    one, two, clock = led_then_demoted(fleet)
    fleet.down, fleet.listed = True, False
    lead_again(one, two, clock)
    assert owned(one) == {"a": set()} and renewed(one) == set()


def test_a_new_leader_whose_readings_fail_before_the_scope_check_owns_the_gpu_nodes_the_node_list_gives_it():
    fleet = Cluster()
    fleet.cpu = {"cpu-1": "a"}   # labelled for shard a, but no GPU node: not one GputideGpuNodeInNoShard looks for
    fleet.down = True
    one = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    assert one.run_once().status == "fail_static"
    assert owned(one) == {"a": {"node-a", "node-c"}} and renewed(one) == {"node-a", "node-c"}
    fleet.hosts["node-c"] = "b"   # relabelled while Prometheus is down: the node list follows
    assert one.run_once().status == "fail_static" and owned(one) == {"a": {"node-a"}}
    fleet.down = False
    assert one.run_once().status == "ok" and owned(one) == {"a": {"node-a"}}
    # once a reading of the term showed which nodes are the shard's, a refused one keeps them, and the node list still
    # counts both ways: node-c relabelled back into shard a is its own again (shard b's list drops it: else no shard's)
    fleet.hosts["node-c"], fleet.down = "a", True
    assert one.run_once().status == "fail_static" and owned(one) == {"a": {"node-a", "node-c"}}


def test_without_the_kubernetes_api_the_fleet_files_gpu_nodes_are_the_node_list():
    class Down:
        def custom_query(self, promql):
            raise requests.ConnectionError("connection refused")

    inner = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid"), fleet=make_fleet(nodes=3),
                                      client=Down(), clock=lambda: NOW)
    shard = ShardedSource(inner, parse_selector("a", "node=n0,node=n2"))
    assert shard.listed() == {"n0", "n2"}
    with pytest.raises(TelemetryUnavailable):
        shard.snapshot()
    assert shard.shard_nodes == ("a", frozenset({"n0", "n2"}))


def test_a_replica_leading_again_holds_still_for_a_dark_node_of_its_shard_and_renews_its_caps():
    """node-c's exporter goes dark while replica 2 leads (it holds still: missing telemetry); replica 1, leading
    again, knew no node of the new term, so the dark node was no shard's (`owns`: its name among none): its first
    reading went through without node-c, planned without it and its pods, reported node-a alone and let node-c's
    power caps lapse on GPUs nobody can see. The node list still labels node-c for shard a: it is the shard's."""
    fleet = Cluster()
    lease, clock = InMemoryLease(duration_s=LEASE_S), Clock()
    one, two = replica(fleet, lease, "1", clock), replica(fleet, lease, "2", clock)
    assert one.run_once().status == "ok" and owned(one) == {"a": {"node-a", "node-c"}}
    clock.now += LEASE_S + 10.0
    assert two.run_once().status == "ok"
    fleet.dark.add("node-c")
    held = two.run_once()
    assert (held.status, held.reason) == ("fail_static", "missing_telemetry")
    assert one.run_once().status == "standby"
    clock.now += LEASE_S + 10.0   # replica 2 goes; replica 1 leads again
    report = one.run_once()
    assert (report.status, report.reason) == ("fail_static", "missing_telemetry")
    assert owned(one) == {"a": {"node-a", "node-c"}} and renewed(one) == {"node-a", "node-c"}


class ApiDown(Cluster):
    """The Kubernetes API's node list fails its next `fails` calls (every call while None)."""

    def __init__(self, fails: int | None) -> None:
        super().__init__()
        self.fails = fails

    def nodes(self):
        if self.fails is None or self.fails > 0:
            self.fails = None if self.fails is None else self.fails - 1
            raise requests.ConnectionError("the API server is not answering")
        return super().nodes()


def test_a_node_list_that_fails_leaves_a_new_leaders_reading_its_own_error_and_outcome():
    """The node list is asked before a term's first reading (`ShardedSource.snapshot`); its failure is not the
    reading's: Prometheus down still holds with telemetry_unavailable (not an API error in its place), and a reading
    that gets through once the API answers again is acted on."""
    fleet = ApiDown(fails=None)
    fleet.down = True
    one = replica(fleet, InMemoryLease(duration_s=LEASE_S), "1", Clock())
    with pytest.raises(TelemetryUnavailable):
        one.source.snapshot()
    report = one.run_once()
    assert (report.status, report.reason) == ("fail_static", "telemetry_unavailable")
    assert owned(one) == {"a": set()} and renewed(one) == set()
    fleet.fails, fleet.down = 1, False   # the API fails the listing once more, then answers the reading
    assert one.run_once().status == "ok" and owned(one) == {"a": {"node-a", "node-c"}}
