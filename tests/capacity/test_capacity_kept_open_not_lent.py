"""The hot node kept open in a heat wave lends no GPU to training (s33h19, audit s33a14 of 2154ce8). `claims` counted
only the hot taints the plan writes (`tainting`), so the node the taint spares (`hotspot_detect.kept_open`: the
coolest, its taint removed or never written) looked as open as a cool one: on the tidal fleet with every GPU 3 C under
slowdown, the tide lent its 8 idle GPUs to training every cycle (+8 workers on a node 2 C under slowdown). Now the
planner's state names the node (`PlannerState.kept_open`, only while it is hot) and `claims` counts its GPUs claimed:
none lent while it is hot; once it cools the tide may lend them again. They are `unlent`, not `claimed` (s33h22):
still free for the services' scale-ups and pending replicas."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from balancer import config
from balancer.app import scenarios, tidal
from balancer.model import Forecast, ScaleTraining, TaintNode
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import claims, plan_with_capacity
from balancer.plan.planner import acknowledge

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
HOT = "gputide.io/hot=true:NoSchedule"
KEPT = "a100-00"   # its pods taken away: 8 idle GPUs, and the coolest node in the heat wave


@pytest.fixture(scope="module")
def fleet():
    sim, _events, _days = scenarios.build("tidal", days=1)
    snap = sim.snapshot()
    gone = {w.name for w in snap.workloads if any(snap.gpus[g].node == KEPT for g in snap.placements.get(w.name, ()))}
    snap = replace(snap, workloads=tuple(w for w in snap.workloads if w.name not in gone),
                   placements={k: v for k, v in snap.placements.items() if k not in gone})
    ctx = tidal.context(sim)
    forecasts = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                quantiles={q: np.full(24, 0.05) for q in (0.5, 0.9, 0.99)}) for name in ctx.shares}
    return snap, forecasts, ctx.profiles


def cycles(fleet, temps: list[np.ndarray]):
    """One cycle per reading, the plan's taints applied before the next: each cycle's plan and state."""
    snap0, forecasts, profiles = fleet
    tainted: set[str] = set()
    state = None
    for c, t in enumerate(temps):
        nodes = tuple(replace(n, taints=(*n.taints, *((HOT,) if n.name in tainted else ()))) for n in snap0.nodes)
        s = replace(snap0, time=snap0.time + 30 * c, temperature_c=np.asarray(t, dtype=float), nodes=nodes)
        p, state = plan_with_capacity(s, forecasts, ON, state, profiles=profiles,
                                      capacity_policy=CapacityPolicy(min_hold_s=0.0))
        state = acknowledge(state, p.actions, s)
        written = [a for a in p.actions if isinstance(a, TaintNode) and not a.renew]
        tainted = (tainted - {a.node for a in written if a.remove}) | {a.node for a in written if not a.remove}
        yield p, state


def run(fleet, temps: list[np.ndarray]):
    """Per cycle (`cycles`): the node kept open, the workers the capacity plan grows training by."""
    return [(state.kept_open, sum(a.workers - a.previous_workers for a in p.actions
                                  if isinstance(a, ScaleTraining) and a.workers > a.previous_workers))
            for p, state in cycles(fleet, temps)]


def heat_wave(snap) -> np.ndarray:
    """Every GPU 3 C under slowdown, those of KEPT 4 C (the coolest)."""
    return snap.slowdown_temp_c - 3.0 - np.array([g.node == KEPT for g in snap.gpus], dtype=float)


def test_the_kept_node_s_idle_gpus_are_not_lent_while_it_is_hot(fleet):
    snap = fleet[0]
    n = config.BalancerPolicy().hotspots.hot_readings
    cycles = run(fleet, [snap.temperature_c] + [heat_wave(snap)] * (n + 4))
    held = [grown for kept, grown in cycles if kept == KEPT]
    assert len(held) >= 4, cycles
    assert held == [0] * len(held), cycles   # was +8 workers each cycle, onto the node 2 C under slowdown


def test_once_the_kept_node_cools_its_idle_gpus_may_be_lent_again(fleet):
    snap = fleet[0]
    hp = config.BalancerPolicy().hotspots
    cycles = run(fleet, [heat_wave(snap)] * (hp.hot_readings + 1) + [snap.temperature_c] * (hp.cool_readings + 3))
    assert any(kept == KEPT for kept, _ in cycles), cycles
    assert cycles[-1][0] is None and any(grown for kept, grown in cycles[-3:]), cycles


def test_claims_names_every_gpu_of_the_kept_node_unlent_not_claimed(fleet):
    """`unlent`, not `claimed` (s33h22): claimed GPUs are used, hidden from the services' pending replicas too
    (tests/capacity/test_capacity_kept_open_serves_inference.py)."""
    snap = fleet[0]
    on_kept = {i for i, g in enumerate(snap.gpus) if g.node == KEPT}
    assert claims((), snap, KEPT) == {"claimed": set(), "tainting": set(), "unlent": on_kept}
    assert claims((), snap)["unlent"] == set() and claims(())["unlent"] == set()
