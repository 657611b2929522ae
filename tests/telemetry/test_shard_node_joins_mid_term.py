"""A GPU node that joins the cluster mid-term, labelled for a shard, whose exporter never reports, holds that shard
still for `forget_vanished_after_s` as it holds the unsharded controller, and no other shard; then it is forgotten
(gputide_gpus_forgotten) and the shard goes on, still owning it.

The shard's nodes grow mid-term from the node list (`ShardedSource.listed`, added before each reading): a reading
does not show the node, and it was in no node list at the term's start, so without that the shard found it no
shard's and went on without it from the first cycle, where the unsharded controller held still for it."""

from __future__ import annotations

from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd._run_parts import bound_to_shard
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from balancer.telemetry.vanished import dark_key
from tests.multisite.test_multisite_shard_fail_static import LABEL, taint_every_node
from tests.multisite.test_multisite_shard_nodes_gauge import owned
from tests.multisite.test_multisite_shard_nodes_new_term import Clock, Cluster

FORGET_S = PrometheusOptions(url="http://prom.invalid").forget_vanished_after_s


def controller(fleet: Cluster, shard: str | None, clock: Clock) -> Reconciler:
    """`gputide run [--shard NAME --selector gputide.io/shard=NAME] --dry-run` on `clock` (the vanished-GPU timer's)."""
    source = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                       client=fleet, clock=clock, node_overrides=fleet.nodes)
    actuator = DryRunActuator()
    if shard is not None:
        source = ShardedSource(source, parse_selector(shard, f"{LABEL}={shard}"))
        actuator = bound_to_shard(actuator, source)
    return Reconciler(source=source, actuator=actuator, planner=taint_every_node, clock=clock,
                      policy=BalancerPolicy(safety=SafetyPolicy(power_cooldown_s=0.0)))


def statuses(*controllers: Reconciler) -> list[tuple[str, str | None]]:
    return [((r := c.run_once()).status, r.reason if r.status != "ok" else None) for c in controllers]


def test_a_gpu_node_joining_mid_term_holds_its_shard_for_forget_vanished_after_s_as_unsharded_and_no_other():
    fleet, clock = Cluster(), Clock()
    a, b, whole = (controller(fleet, s, clock) for s in ("a", "b", None))
    assert statuses(a, b, whole) == [("ok", None)] * 3   # every term past its first reading
    fleet.hosts["node-d"] = "a"   # joins, labelled for shard a; its exporter has not reported yet
    fleet.dark.add("node-d")
    held = ("fail_static", "missing_telemetry")
    assert statuses(a, b, whole) == [held, ("ok", None), held]
    assert owned(a) == {"a": {"node-a", "node-c", "node-d"}} and owned(b) == {"b": {"node-b"}}
    clock.now += FORGET_S - 1.0
    assert statuses(a, b, whole) == [held, ("ok", None), held]
    clock.now += 1.0   # forgotten, loudly, on both: each goes on without it
    assert statuses(a, b, whole) == [("ok", None)] * 3
    assert a.source.forgotten == {dark_key("node-d"): "node-d"} and b.source.forgotten == {}
    assert owned(a) == {"a": {"node-a", "node-c", "node-d"}}
