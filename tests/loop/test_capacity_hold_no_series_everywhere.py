"""A profiled service whose pods run with no serving series at all is an unknown demand for every part that leaves a NaN
one alone, not for the capacity hold alone (`capacity_loop.with_unseen` puts it in the plan's `demand_unknown`).

Before (1181eaf): a shard never held for it, even with every pod of it inside (it could not tell it from a service
spread over two shards, whose status `shard.restrict` drops), so `gputide run --shard` lent its idle GPUs to training;
consolidation moved its pods; and where its name's series are read under namespace-qualified names only (old/chat,
prod/chat after a namespace move), the note said it had no series at all."""

from __future__ import annotations

from dataclasses import replace

from balancer.model import Migrate, ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.telemetry.serving import read_services
from balancer.telemetry.shard import ShardSelector, restrict
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.loop_helpers import make_fleet, snapshot, workload
from tests.loop.test_capacity_hold_no_series import idle_two, plan
from tests.loop.test_loop_consolidation import ON as DEFRAG
from tests.loop.test_loop_consolidation import halves
from tests.loop.test_loop_demand_unknown import WHY

N0 = ShardSelector("a", nodes=frozenset({"n0"}))   # chat's replica's node; its idle GPUs are n1's


def grown(p) -> list[str]:
    return [a.describe() for a in p.actions if isinstance(a, ScaleTraining) and a.workers > a.previous_workers]


def test_a_shard_holds_for_a_service_without_series_unless_its_status_was_left_out_for_being_spread():
    snap = idle_two().replace(services={}, demand_unknown={})
    for sel in (N0, ShardSelector("all", nodes=frozenset({"n0", "n1"}))):
        p, state = plan(restrict(snap, sel)[0], sharded=True)
        assert state.demand_held.keys() == {"chat"} and not grown(p), (sel.name, grown(p))
    # a second replica of chat on n1: spread over the shards, its status dropped from n0's (scaled by neither)
    two = idle_two()
    extra = replace(next(w for w in two.workloads if w.owner == "chat"), name="inference/chat-1")
    two = two.replace(workloads=(*two.workloads, extra), placements={**two.placements, extra.name: (6,)})
    part = restrict(two, N0)[0]
    assert "chat" not in part.services and part.spread_services == {"chat"}
    assert plan(part, sharded=True)[1].demand_held == {}
    # ... and with no series at all, each shard with a replica of it holds, as for a NaN demand
    assert plan(restrict(two.replace(services={}), N0)[0], sharded=True)[1].demand_held.keys() == {"chat"}


def test_consolidation_leaves_a_held_service_without_series_alone_as_a_nan_one():
    snap = snapshot(make_fleet(nodes=2), workloads=halves())   # no serving series for any of them
    policy = replace(DEFRAG, capacity=ON.capacity)
    profiles = {"half0": PROFILES["chat"], "half1": PROFILES["chat"]}
    for label, s in (("no series", snap), ("nan", snap.replace(demand_unknown={"half0": WHY, "half1": WHY}))):
        p, state = plan_with_capacity(s, {}, policy, None, profiles=profiles, capacity_policy=CapacityPolicy())
        moved = sorted({s.workload_by_name[a.workload].owner for a in p.actions if isinstance(a, Migrate)})
        assert state.demand_held.keys() == {"half0", "half1"} and moved == ["half2", "half3"], (label, moved)


def test_series_read_under_namespace_qualified_names_only_are_named_in_the_note():
    snap = idle_two()
    rows = [{"metric": {"__name__": name, "service": "chat", "namespace": ns}, "value": [0, str(v)]}
            for ns in ("old", "prod") for name, v in (("gputide_inference_demand_rps", 30.0),
                                                      ("gputide_inference_replicas", 1.0))]
    services, unknown = read_services(rows, snap.workloads, {}, 1.0)
    assert sorted(services) == ["old/chat", "prod/chat"]   # the owner, and the profile, are "chat"
    p, state = plan(snap.replace(services=services, demand_unknown=unknown))
    assert state.demand_held.keys() == {"chat"}
    [note] = [n for n in p.notes if n.startswith("capacity holds")]
    assert "old/chat, prod/chat" in note and "no serving series at all" not in note, note


def test_a_shard_names_no_service_spread_whose_pods_are_all_inside():
    part = restrict(snapshot(make_fleet(nodes=2), workloads=[(workload("chat-0"), (0,))]),
                    N0)[0]
    assert part.spread_services == frozenset()
