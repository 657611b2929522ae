"""Sharding: node selectors cut a snapshot into per-pool shards, and two shard controllers each act only on
their own nodes while holding separate Leases."""

from __future__ import annotations

import numpy as np
import pytest

from balancer import fleet as fleet_mod
from balancer.actuate.sim import SimActuator
from balancer.app.soak import load_fake_kube
from balancer.app.soak_faults import busiest
from balancer.app.soak_harness import LeaseAdapter
from balancer.errors import InputError, MissingTelemetry
from balancer.loop import Reconciler
from balancer.model import Migrate, SetPowerLimit, TaintNode
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.shard import (
    ShardActuator,
    ShardedSource,
    ShardSelector,
    globalize,
    parse_selector,
    restrict,
)
from balancer.telemetry.sim import SimTelemetrySource

SXM = frozenset({"H100-SXM", "A100-SXM4-80GB"})
PCIE = frozenset({"A100-PCIE-40GB", "L40S"})


@pytest.fixture(scope="module")
def sim():
    s = SimCluster(fleet_mod.demo_fleet(), seed=5, step_s=60.0)
    default_mix(s, inference_share=0.45, training_share=0.45)
    for _ in range(30):
        s.step()
    return s


@pytest.mark.parametrize("text, expected", [
    ("pool=h100", ShardSelector("x", pools=frozenset({"h100"}))),
    ("model=L40S,model=T4", ShardSelector("x", models=frozenset({"L40S", "T4"}))),
    ("site=eu-1, gputide.io/shard=a", ShardSelector("x", sites=frozenset({"eu-1"}), labels={"gputide.io/shard": "a"})),
    ("node=n1,node=n2", ShardSelector("x", nodes=frozenset({"n1", "n2"}))),
], ids=["a pool", "two models", "a site and a label", "named nodes"])
def test_parse_selector(text, expected):
    assert parse_selector("x", text) == expected


@pytest.mark.parametrize("text", ["pool", "=h100", "pool=", "team=a,team=b", "", " , "],
                         ids=["no value", "no key", "empty value", "two values for one label", "empty: every node",
                              "commas only"])
def test_parse_selector_refuses_bad_input_naming_the_part(text):
    with pytest.raises(InputError) as err:
        parse_selector("x", text)
    assert "shard x selector" in str(err.value)


def test_restrict_keeps_only_the_shards_gpus_renumbered_with_their_workloads(sim):
    full = sim.snapshot()
    part, index = restrict(full, ShardSelector("sxm", models=SXM))
    assert {n.gpu_model for n in part.nodes} == SXM
    assert [g.index for g in part.gpus] == list(range(part.n_gpus))
    assert [full.gpus[i].uuid for i in index] == [g.uuid for g in part.gpus]
    np.testing.assert_array_equal(part.temperature_c, full.temperature_c[index])
    for name, idx in part.placements.items():
        assert tuple(index[list(idx)]) == full.placements[name]
    inside = {n for n, idx in full.placements.items() if all(full.gpus[i].node in {x.name for x in part.nodes}
                                                               for i in idx)}
    assert set(part.placements) == inside and inside


def test_a_service_spread_over_two_shards_is_scaled_by_neither(sim):
    full = sim.snapshot()
    spread = {w.owner for w in full.workloads if w.name in full.placements and w.owner in full.services}
    part, _ = restrict(full, ShardSelector("sxm", models=SXM))
    for svc in spread:
        models = {full.gpus[full.placements[w.name][0]].model
                  for w in full.workloads if w.owner == svc and w.name in full.placements}
        assert (svc in part.services) == (models <= SXM)


def test_globalize_maps_shard_indices_back(sim):
    full = sim.snapshot()
    _, index = restrict(full, ShardSelector("pcie", models=PCIE))
    m = globalize(Migrate(reason="r", workload="w", source_gpus=(0,), target_gpus=(3,), target_node="n"), index)
    assert (m.source_gpus, m.target_gpus) == ((int(index[0]),), (int(index[3]),))
    p = globalize(SetPowerLimit(reason="r", gpu=2, uuid="u", node="n", watts=200, previous_watts=300), index)
    assert p.gpu == int(index[2])


def test_a_selector_matching_nothing_is_missing_telemetry(sim):
    with pytest.raises(MissingTelemetry):
        ShardedSource(SimTelemetrySource(sim), ShardSelector("none", pools=frozenset({"nope"}))).snapshot()


class Recorder:
    """Records every action a shard controller sends to the fleet (already globalized) and applies it."""

    name = "sim"

    def __init__(self, sim, log):
        self.inner, self.log = SimActuator(sim), log

    def apply(self, action, snapshot):
        self.log.append((action, snapshot))
        return self.inner.apply(action, snapshot)


def _nodes_touched(action, full):
    if isinstance(action, Migrate):
        return {full.gpus[action.source_gpus[0]].node, action.target_node}
    if isinstance(action, SetPowerLimit | TaintNode):
        return {action.node}
    return set()


def test_two_shard_controllers_act_only_on_their_nodes_and_hold_separate_leases():
    fake = load_fake_kube()
    if fake is None:
        pytest.skip("tests/k8s/fakeapi.py not in this checkout")
    from balancer.actuate.k8s_leader import LeaseLeaderElector

    sim = SimCluster(fleet_mod.demo_fleet(), seed=9, step_s=60.0)
    default_mix(sim, inference_share=0.45, training_share=0.45)
    for _ in range(60):
        sim.step()
    shards = {"sxm": ShardSelector("sxm", models=SXM), "pcie": ShardSelector("pcie", models=PCIE)}
    for sel in shards.values():   # the busiest air-cooled node of each shard overheats
        busiest_node = busiest(sim, [n.name for n in sim.fleet.nodes if sel.matches(n) and n.cooling == "air"])
        sim.degrade_cooling(busiest_node, inlet_rise_c=15.0, resistance_factor=1.6)
    with fake() as kube:
        logs, controllers = {}, {}
        for name, sel in shards.items():
            logs[name] = []
            for replica in (0, 1):   # a leader and a standby per shard
                source = ShardedSource(SimTelemetrySource(sim), sel)
                elector = LeaseAdapter(LeaseLeaderElector(kube.client(), sel.lease_name(), "gputide-system",
                                                          f"{name}-{replica}", lease_duration_s=900,
                                                          renew_deadline_s=600, clock=lambda: sim.time))
                controllers[(name, replica)] = Reconciler(source=source, actuator=ShardActuator(
                    Recorder(sim, logs[name]), source), clock=lambda: sim.time, elector=elector)
        statuses = []
        for _ in range(12):
            sim.advance_to(sim.time + 300)
            statuses.append({k: c.run_once().status for k, c in controllers.items()})
        leases = {n: kube.get("leases", shards[n].lease_name(), "gputide-system") for n in shards}
    assert {n: lease["spec"]["holderIdentity"] for n, lease in leases.items()} == {"sxm": "sxm-0", "pcie": "pcie-0"}
    assert all(s[("sxm", 0)] != "standby" and s[("pcie", 0)] != "standby" for s in statuses)  # both lead at once
    assert all(s[("sxm", 1)] == "standby" and s[("pcie", 1)] == "standby" for s in statuses)
    for name, sel in shards.items():
        own = {n.name for n in sim.fleet.nodes if sel.matches(n)}
        assert logs[name], f"shard {name} never acted"
        touched = set().union(*(_nodes_touched(a, full) for a, full in logs[name]))
        assert touched and touched <= own, f"shard {name} touched {touched - own}"
