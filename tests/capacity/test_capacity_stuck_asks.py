"""The tidal planner against asks that cannot be met the way it planned them (audit a6).

* A profile whose gpuModels leave out the model its pods run on: a loan gives back the GPUs the replicas hold, a
  reclaim takes only allowed ones, so the loan was one-way (lent at night, 'only 0 GPUs' worth can be freed' in the
  morning). Such a service lends nothing, with a note naming it, its models and the models it holds.
* The latency net at the HPA's maxReplicas: every warm-up its step shrank training for replicas the actuator capped
  away, and the next cycle, holding, lent the GPUs back (a training restart each time, no relief). A step not honoured
  (the service still holds the replicas it held then) is not repeated; one that was honoured may be.
* Replicas kept (hold) while some are pending: the idle GPUs beside them went to training although the scheduler
  gives them to the pending replicas (placements lag a scale-up). They are kept, at most one per pending replica,
  for a warm-up; pending longer beside idle GPUs, the replicas wait for something else and the GPUs are lent.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType as M

import numpy as np

from balancer.model import Forecast, ScaleInference, ScaleTraining
from balancer.plan.capacity import (
    CapacityPolicy,
    CapacityState,
    CapacityView,
    JobView,
    ServiceCapacity,
    ServiceView,
)
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled

EXACT = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_frac=0.0)


def flat(level, issued):
    a = np.full(40, float(level))
    return {"chat": Forecast(service="chat", issued_at=issued, step_s=600.0, quantiles={0.5: a, 0.9: a, 0.99: a})}


def one(service, workers, free, now):
    job = JobView(name="train", workers=workers, elastic_max=32, gpus_by_model=M({"A100": workers}))
    return CapacityView(time=now, free=M({"A100": free}), services=(service,), jobs=(job,),
                        inference_gpus=service.replicas, training_gpus=workers,
                        total_gpus=service.replicas + workers + free)


def grows(d):
    return sum(a.workers - a.previous_workers for a in d.actions
               if isinstance(a, ScaleTraining) and a.workers > a.previous_workers)


# ---- 1. a profile whose gpuModels leave out the model its pods run on ------------------------------------------


def night(models):
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, models=models)
    v = one(ServiceView(profile=prof, demand_rps=20.0, replicas=10, gpus_by_model=M({"A100": 10})), 4, 0, 0.0)
    return plan_capacity(v, flat(20.0, 0.0), EXACT, settled(v))


def test_a_service_on_gpus_its_profile_does_not_allow_lends_nothing_and_says_why():
    d = night(frozenset({"H100-SXM"}))
    assert d.actions == (), "lent at night, never reclaimed: its reclaim can take only H100-SXM GPUs"
    assert any("chat" in n and "lends nothing" in n and "A100" in n and "H100-SXM" in n for n in d.notes), d.notes
    assert d.targets["chat"] == 10
    # on GPUs its profile allows (or any), the same service lends 8 replicas' GPUs to training
    for models in (frozenset({"A100"}), frozenset({"A100", "H100-SXM"}), None):
        d = night(models)
        assert [a.replicas for a in d.actions if isinstance(a, ScaleInference)] == [2], models
        assert grows(d) == 8 and not any("lends nothing" in n for n in d.notes)


# ---- 2. the latency net at the HPA's maxReplicas ---------------------------------------------------------------


def pressure_run(honoured_up_to, cycles=40, period=30.0):
    """`cycles` cycles of p99 at 60% of the SLO with 80 req/s on 10 replicas (the forecast needs 10); the actuator
    raises the replicas to at most `honoured_up_to` (an HPA's maxReplicas). Returns the training resizes and the
    inference asks, (time, size) each, and the notes."""
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0)
    replicas, workers, free = 10, 20, 0
    state = CapacityState(last_change=M({"chat": -1e6}), last_demand=M({"chat": (-period, 80.0, 0.0)}))
    resizes, asks, notes = [], [], []
    for k in range(cycles):
        t = period * k
        s = ServiceView(profile=prof, demand_rps=80.0, replicas=replicas, gpus_by_model=M({"A100": replicas}),
                        latency_pressure=0.6)
        d = plan_capacity(one(s, workers, free, t), flat(80.0, t - 600.0), CapacityPolicy(), state)
        state, notes = d.state, notes + list(d.notes)
        for a in d.actions:
            if isinstance(a, ScaleTraining):
                free += workers - a.workers
                workers = a.workers
                resizes.append((t, a.workers))
            elif isinstance(a, ScaleInference):
                asks.append((t, a.replicas))
                placed = min(a.replicas, honoured_up_to, replicas + free)
                free -= placed - replicas
                replicas = placed
    return resizes, asks, notes


def test_an_emergency_step_the_hpa_caps_is_not_repeated_every_warm_up():
    resizes, asks, notes = pressure_run(honoured_up_to=10)
    assert asks == [(0.0, 13)], "one step; capped, it is not asked again while the service holds 10 replicas"
    assert resizes == [(0.0, 17), (30.0, 20)], "one shrink for it and the GPUs lent back: no restart each warm-up"
    assert any("chat" in n and "not honoured" in n for n in notes)
    # honoured (13 replicas came), the step under pressure still is followed by the next once they are warm
    resizes, asks, _ = pressure_run(honoured_up_to=10_000, cycles=12)
    assert asks == [(0.0, 13), (300.0, 17)], "13 replicas came: under pressure still, the next step follows"
    assert all(w < 20 for _, w in resizes)


# ---- 3. replicas kept while some are pending beside idle GPUs --------------------------------------------------


def pending(free, now, state=None):
    """8 replicas asked, 5 placed; demand rose 45 -> 50 req/s (no loan: the planner holds what was asked)."""
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0)
    s = ServiceView(profile=prof, demand_rps=50.0, replicas=5, desired=8, gpus_by_model=M({"A100": 5}))
    state = state or CapacityState(last_change=M({"chat": 0.0}), last_demand=M({"chat": (now - 30.0, 45.0, 0.0)}))
    return plan_capacity(one(s, 4, free, now), flat(50.0, now), EXACT, state)


def test_idle_gpus_beside_replicas_just_pending_are_kept_for_them_not_lent():
    d = pending(free=3, now=1e6)
    assert d.targets["chat"] == 8
    assert grows(d) == 0, "the 3 idle GPUs are the pending replicas': no training growth onto them"


def test_only_as_many_idle_gpus_as_replicas_pending_are_kept():
    assert grows(pending(free=5, now=1e6)) == 2


def test_replicas_pending_beside_idle_gpus_longer_than_a_warm_up_wait_for_something_else():
    first = pending(free=3, now=1e6)
    later = replace_demand(first.state, 1e6 + 330.0)
    assert grows(pending(free=3, now=1e6 + 330.0, state=later)) == 3, "pending 330 s beside idle GPUs: lent"
    assert grows(pending(free=3, now=1e6 + 240.0, state=replace_demand(first.state, 1e6 + 240.0))) == 0


def replace_demand(state, now):
    """`state` with demand read rising again just before `now` (the planner keeps holding)."""
    return replace(state, last_demand=M({"chat": (now - 30.0, 45.0, 0.0)}))


def test_a_step_not_honoured_is_asked_again_after_emergency_retry_s():
    """What held it may have passed (a refused shrink, a PDB, freed GPUs another service's replicas took): remembered
    for good, a service still under pressure was never stepped again (audit a8)."""
    resizes, asks, notes = pressure_run(honoured_up_to=10, cycles=70)
    assert asks == [(0.0, 13), (1830.0, 13)], "asked again in the first cycle past emergency_retry_s (1800 s)"
    assert [t for t, _ in resizes] == [0.0, 30.0, 1830.0, 1860.0]
