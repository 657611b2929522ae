"""The hot node kept open in a heat wave lends no GPU to training, yet its idle GPUs stay the services' (s33h22, audit
s33a16 of 1f2e6bc). `claims` put every GPU of that node in `claimed`, which `view_from_snapshot` counts used: hidden
from inference too, a service's pending replicas looked placeless, and the tide shrank training elsewhere to make room
for them (train-a100-sxm4-80gb-a 13 -> 3 workers, 'make room for inference', every kept cycle) while the replicas would
land on those idle GPUs anyway. Now they are `unlent`: free for a scale-up and the pending replicas, while no job grows
onto that node's models (`CapacityView.uncounted_models`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from balancer import config
from balancer.app import scenarios, tidal
from balancer.model import Forecast, ScaleTraining
from balancer.plan.capacity import view_from_snapshot
from balancer.plan.capacity_loop import claims
from tests.capacity.test_capacity_kept_open_not_lent import HOT, KEPT, cycles, heat_wave

SVC, JOB, MODEL = "llm-a100-sxm4-80gb", "train-a100-sxm4-80gb-a", "A100-SXM4-80GB"


@pytest.fixture(scope="module")
def fleet():
    """The tidal fleet with KEPT's pods taken away, 4 of JOB's workers moved onto it, and SVC asking 4 replicas more
    than it places (pending). KEPT is the coolest node in the heat wave (`heat_wave`)."""
    sim, _events, _days = scenarios.build("tidal", days=1)
    snap = sim.snapshot()
    on_kept = [i for i, g in enumerate(snap.gpus) if g.node == KEPT]
    gone = {w.name for w in snap.workloads if set(snap.placements.get(w.name, ())) & set(on_kept)}
    placements = {k: v for k, v in snap.placements.items() if k not in gone}
    movers = [w for w in snap.workloads if w.owner == JOB and placements.get(w.name)][:4]
    placements.update({w.name: (g,) for w, g in zip(movers, on_kept[:4], strict=True)})
    workloads = tuple(w for w in snap.workloads if w.name not in gone)
    placed = sum(1 for w in workloads if w.owner == SVC and placements.get(w.name))
    services = {**snap.services, SVC: replace(snap.services[SVC], replicas=placed + 4)}
    snap = replace(snap, workloads=workloads, placements=placements, services=services)
    ctx = tidal.context(sim)
    forecasts = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                quantiles={q: np.full(24, 960.0) for q in (0.5, 0.9, 0.99)}) for name in ctx.shares}
    return snap, forecasts, ctx.profiles


def test_pending_replicas_take_the_kept_node_s_idle_gpus_no_training_shrunk_for_them(fleet):
    snap = fleet[0]
    temps = [snap.temperature_c] + [heat_wave(snap)] * (config.BalancerPolicy().hotspots.hot_readings + 4)
    kept = [[(a.job, a.previous_workers, a.workers) for a in p.actions if isinstance(a, ScaleTraining)]
            for p, state in cycles(fleet, temps) if state.kept_open == KEPT]
    assert len(kept) >= 4, kept
    assert kept == [[]] * len(kept), kept   # was JOB 13 -> 3 'make room for inference' each kept cycle


def test_the_kept_node_s_idle_gpus_are_free_for_the_services_and_its_models_lent_to_no_job(fleet):
    snap, _forecasts, profiles = fleet
    snap = replace(snap, nodes=tuple(n if n.name == KEPT else replace(n, taints=(*n.taints, HOT)) for n in snap.nodes))
    view = view_from_snapshot(snap, profiles, **claims((), snap, KEPT))
    assert dict(view.free) == {MODEL: 4}                       # was {}: used, as if a pod held them
    assert view.uncounted_models == frozenset({MODEL})         # no job grows onto them
    assert [(s.replicas, s.desired) for s in view.services if s.profile.name == SVC] == [(31, 35)]
    cool = view_from_snapshot(snap, profiles, **claims((), snap))
    assert dict(cool.free) == {MODEL: 4} and cool.uncounted_models == frozenset()
