"""Sharding and fail-static: a GPU whose telemetry must not be acted on (a stale sample, an exporter gone dark, a
NaN or impossible value, a missing field, a frozen energy counter) holds still the shard whose node it is on, and the
single unsharded controller, never the other shards. The Prometheus source ran its checks over the whole fleet before
`ShardedSource` cut the shard out, so one dark exporter on shard a's node held every shard of the fleet still.

And an action planned on a node that left the shard before it is carried out (relabelled into another shard) is
refused by the shard's actuator (`_run_parts.ShardBound`): that node is the other shard's to act on now."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from types import MappingProxyType

import pytest

from balancer.actions import Migrate, Plan, SetPowerLimit, TaintNode
from balancer.actuate.dryrun import DryRunActuator
from balancer.cmd._run_parts import ShardBound, bound_to_shard
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.inventory import NodeMeta
from balancer.loop import Reconciler
from balancer.telemetry.gpu_frame import FIELDS, FLAGS
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.shard import ShardedSource, parse_selector
from tests.loop.loop_helpers import make_fleet, snapshot

NOW = 1_700_000_000.0
LABEL = "gputide.io/shard"
MODEL = "NVIDIA H100 80GB HBM3"
BASE = {"temperature_c": 60.0, "memory_temperature_c": 66.0, "slowdown_temp_c": 87.0, "power_w": 300.0,
        "power_limit_w": 700.0, "sm_active": 0.5, "mem_used_mib": 1024.0 * 1048576, "mem_free_mib": 2048.0 * 1048576,
        "sm_clock_mhz": 1.98e9, "clock_event_reasons": 0.0, "xid": 0.0, "last_sample": NOW - 5}


class Fleet:
    """Prometheus and the Kubernetes API of one cluster: node-a (shard a) and node-b (shard b), two H100s each."""

    def __init__(self) -> None:
        self.hosts = {"node-a": "a", "node-b": "b"}   # node -> its gputide.io/shard label
        self.values: dict[tuple[str, str], float] = {}
        self.flags: dict[tuple[str, str], float] = {}
        self.drop: set[tuple[str, str]] = set()
        self.dark: set[str] = set()   # nodes whose exporter serves nothing

    def nodes(self):
        return {h: NodeMeta(labels=MappingProxyType({LABEL: s})) for h, s in self.hosts.items()}

    def custom_query(self, promql: str) -> list[dict]:
        if not promql.startswith('{__name__=~"gpu:'):
            return []   # no pods, no services, no declared fields
        rows = []
        for host in (h for h in self.hosts if h not in self.dark):
            for slot in ("0", "1"):
                uuid = f"GPU-{host[-1]}{slot}"
                labels = {"hostname": host, "gpu": slot, "UUID": uuid, "modelName": MODEL}
                rows += [{"metric": {"__name__": rule, **labels}, "value": [NOW, str(self.values.get((uuid, name),
                                                                                                  BASE[name]))]}
                         for name, (rule, _) in FIELDS.items() if (uuid, name) not in self.drop]
                rows += [{"metric": {"__name__": rule, **labels}, "value": [NOW, str(self.flags[uuid, name])]}
                         for name, (rule, _) in FLAGS.items() if (uuid, name) in self.flags]
        return rows


def taint_every_node(snap, forecasts, policy, state):
    """A planner that taints each node it is shown: the cycle acts wherever it goes on."""
    return Plan(actions=tuple(TaintNode(node=n.name, reason="test", expected_gain=1.0) for n in snap.nodes)), state


def controller(fleet: Fleet, shard: str | None, planner=taint_every_node) -> Reconciler:
    """One controller process, as `gputide run [--shard NAME --selector gputide.io/shard=NAME] --dry-run` builds it:
    its own Prometheus source, its own actuator."""
    source = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", stale_after_s=60.0),
                                       client=fleet, clock=lambda: NOW, node_overrides=fleet.nodes)
    actuator = DryRunActuator()
    if shard is not None:
        source = ShardedSource(source, parse_selector(shard, f"{LABEL}={shard}"))
        actuator = bound_to_shard(actuator, source)
    # no power cooldown: a dry run's taints restrain it as a live run's would, and its clock stands still at NOW
    return Reconciler(source=source, actuator=actuator, planner=planner, clock=lambda: NOW,
                      policy=BalancerPolicy(safety=SafetyPolicy(power_cooldown_s=0.0)))


def go_dark(fleet: Fleet) -> None:
    fleet.dark.add("node-a")


def drop_power(fleet: Fleet) -> None:
    fleet.drop.add(("GPU-a1", "power_w"))


FAULTS = {   # a fault on GPU-a1 or node-a (shard a) -> the reason every controller it concerns holds still for
    "a stale sample": (lambda f: f.values.update({("GPU-a1", "last_sample"): NOW - 600}), "stale_telemetry"),
    "an exporter gone dark": (go_dark, "missing_telemetry"),
    "a NaN reading": (lambda f: f.values.update({("GPU-a1", "temperature_c"): math.nan}), "invalid_telemetry"),
    "an impossible value": (lambda f: f.values.update({("GPU-a1", "power_w"): 9000.0}), "invalid_telemetry"),
    "a missing field": (drop_power, "missing_telemetry"),
    "a frozen energy counter": (lambda f: f.flags.update({("GPU-a1", "readings_frozen"): 1.0}), "stale_telemetry"),
    "a last sample that is not a time": (lambda f: f.values.update({("GPU-a1", "last_sample"): math.inf}),
                                         "invalid_telemetry"),
}


@pytest.mark.parametrize(("fault", "reason"), FAULTS.values(), ids=FAULTS.keys())
def test_a_fault_on_one_shards_node_holds_that_shard_and_the_unsharded_controller_still_never_another_shard(
        fault, reason):
    fleet = Fleet()
    a, b, whole = controller(fleet, "a"), controller(fleet, "b"), controller(fleet, None)
    assert [c.run_once().status for c in (a, b, whole)] == ["ok", "ok", "ok"]   # every GPU seen once
    fault(fleet)
    held_a, on_b, held_whole = a.run_once(), b.run_once(), whole.run_once()
    assert (held_a.status, held_a.reason) == ("fail_static", reason)
    assert (held_whole.status, held_whole.reason) == ("fail_static", reason)
    assert on_b.status == "ok"
    assert [(r.outcome, r.action.target) for r in on_b.results] == [("dry_run", "node-b")]


def test_a_dark_node_holds_the_shard_that_held_it_last_and_the_refusal_names_its_gpus_only():
    fleet = Fleet()
    fleet.hosts["node-c"] = "b"
    a, b = controller(fleet, "a"), controller(fleet, "b")
    a.run_once(), b.run_once()
    fleet.dark |= {"node-a"}
    fleet.values[("GPU-c0", "last_sample")] = NOW - 600   # and a stale GPU on shard b's node-c
    source_a, source_b = a.source, b.source
    with pytest.raises(Exception, match="vanished") as held_a:
        source_a.snapshot()
    assert held_a.value.subjects == ("GPU-a0", "GPU-a1")
    with pytest.raises(Exception, match="older than") as held_b:
        source_b.snapshot()
    assert held_b.value.subjects == ("GPU-c0",)   # shard b's GPU alone, not shard a's dark ones


def test_a_shards_staleness_gauge_reads_its_own_gpus():
    fleet = Fleet()
    fleet.values[("GPU-a0", "last_sample")] = NOW - 50   # old, not yet stale: shard a's oldest
    a, b = controller(fleet, "a"), controller(fleet, "b")
    a.source.snapshot(), b.source.snapshot()
    assert (a.source.oldest_sample_age_s, b.source.oldest_sample_age_s) == (50.0, 5.0)


# ---- an action on a node that left the shard -----------------------------------------------------------------

def relabelling_planner(fleet: Fleet):
    """Plans on shard a's snapshot (node-a and node-b), then node-a is relabelled into shard b before the loop acts."""

    def plan(snap, forecasts, policy, state):
        gpus = {g.uuid: g for g in snap.gpus}
        a1 = gpus["GPU-a1"]
        actions = (TaintNode(node="node-a", reason="test", expected_gain=1.0),
                   SetPowerLimit(gpu=a1.index, uuid=a1.uuid, node="node-a", watts=500.0, previous_watts=700.0,
                                 reason="test", expected_gain=1.0),
                   TaintNode(node="node-b", reason="test", expected_gain=1.0))
        fleet.hosts["node-a"] = "b"
        return Plan(actions=actions), state

    return plan


def test_an_action_on_a_node_relabelled_into_another_shard_mid_cycle_is_refused_and_never_carried_out(caplog):
    fleet = Fleet()
    fleet.hosts["node-b"] = "a"
    a = controller(fleet, "a", planner=relabelling_planner(fleet))
    with caplog.at_level(logging.WARNING, logger="balancer.cmd.run"):
        report = a.run_once()
    assert report.status == "ok"
    got = {(r.action.kind, r.action.target): (str(r.outcome), r.code) for r in report.results}
    assert got == {("taint_node", "node-a"): ("failed", "refused"), ("power_limit", "GPU-a1"): ("failed", "refused"),
                   ("taint_node", "node-b"): ("dry_run", "")}
    assert [x.target for x in a.actuator.inner.actions] == ["node-b"]   # all that went out
    refused = [r.getMessage() for r in caplog.records if "refuses" in r.getMessage()]
    assert len(refused) == 2 and all("shard a" in m and "node-a" in m for m in refused), refused


class Labelled:
    """Three nodes of two GPUs; n1's shard label is whatever `n1` says, in the reading and in the Kubernetes API's
    node list (`node_overrides`, which may have seen a relabel the reading has not)."""

    def __init__(self) -> None:
        self.fl = make_fleet(nodes=3, gpus_per_node=2)
        self.read = {"n0": "a", "n1": "a", "n2": "b"}
        self.now = dict(self.read)

    def node_overrides(self):
        return {n: NodeMeta(labels=MappingProxyType({LABEL: s})) for n, s in self.now.items()}

    def snapshot(self):
        return snapshot(self.fl, nodes=[replace(n, labels=MappingProxyType({LABEL: self.read[n.name]}))
                                        for n in self.fl.nodes])


N1_GPU0 = make_fleet(nodes=3, gpus_per_node=2).gpus[2]
assert N1_GPU0.node == "n1"
ACTIONS = {   # planned by shard a on n0 (GPUs 0, 1) and n1 (GPUs 2, 3)
    "a taint": TaintNode(node="n1", reason="hot"),
    "a power limit": SetPowerLimit(gpu=2, uuid=N1_GPU0.uuid, node="n1", watts=300.0, previous_watts=400.0,
                                   reason="hot"),
    "a migration's target": Migrate(workload="w", source_gpus=(0,), target_gpus=(2,), target_node="n1", reason="hot"),
    "a migration's source": Migrate(workload="w", source_gpus=(2,), target_gpus=(0,), target_node="n0", reason="hot"),
}


@pytest.mark.parametrize("seen", ["by the reading before acting", "by the Kubernetes API only"])
@pytest.mark.parametrize("action", ACTIONS.values(), ids=ACTIONS.keys())
def test_an_action_on_a_node_that_left_the_shard_is_refused_and_one_on_its_nodes_goes_out(action, seen):
    inner = Labelled()
    source = ShardedSource(inner, parse_selector("a", f"{LABEL}=a"))
    actuator = ShardBound(DryRunActuator(), source)
    source.snapshot()
    assert actuator.apply(action, source.snapshot()).outcome == "dry_run"   # n1 still shard a's: it goes out
    inner.now["n1"] = "b"
    if seen == "by the reading before acting":
        inner.read["n1"] = "b"
    res = actuator.apply(action, source.snapshot())
    assert (str(res.outcome), res.code) == ("failed", "refused")
    assert "shard a" in res.detail and ("n1" in res.detail or "source GPUs [2]" in res.detail), res.detail
    assert len(actuator.inner.actions) == 1


def test_a_power_limit_whose_gpu_was_renumbered_is_refused():
    inner = Labelled()
    source = ShardedSource(inner, parse_selector("a", f"{LABEL}=a"))
    source.snapshot()
    inner.read["n0"] = inner.now["n0"] = "b"   # n0 leaves: n1's GPUs are shard a's 0 and 1 now
    source.snapshot()
    assert "renumbered" in source.refusal(ACTIONS["a power limit"])


def test_the_actuators_hooks_pass_through_and_an_unsharded_run_keeps_its_actuator():
    class Kube(DryRunActuator):
        action_deadline_s = 180.0

        def housekeeping(self):
            return ["released a hot taint"]

    inner = Labelled()
    source = ShardedSource(inner, parse_selector("a", f"{LABEL}=a"))
    bound = bound_to_shard(Kube(), source)
    assert isinstance(bound, ShardBound)
    assert (bound.action_deadline_s, bound.housekeeping(), bound.name) == (180.0, ["released a hot taint"], "dry-run")
    plain = Kube()
    assert bound_to_shard(plain, inner) is plain
