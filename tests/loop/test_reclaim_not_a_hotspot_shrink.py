"""The capacity planner's reclaim is not remembered as a hotspot shrink.

`planner.acknowledge` remembered every applied training shrink co-location does not hold as the hotspot's
(`PlannerState.shrunk`), a capacity reclaim too. `capacity_loop` drops that memory for the jobs the tide sizes, but
only after the hotspot planner planned with it: the cycle after a reclaim, the hotspot planner counted the job as
owed its workers (not shrunk again on a hot GPU) and proposed giving the reclaimed workers back; the tide dropped the
proposal with a note calling it "the hotspot give-back", which gputide never made. Where the capacity plan holds
(pods without an owner) or is switched off by a policy reload, nothing dropped it: the give-back was sent and the
workers counted as owed in `gputide_shrunk_workers`. Now only the hotspot's own shrinks are remembered."""

from __future__ import annotations

import numpy as np

from balancer import config
from balancer.app import scenarios, tidal
from balancer.fleet_usage import owed_workers
from balancer.model import Forecast, ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.planner import PlannerState, acknowledge, plan

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))


def test_a_reclaim_is_neither_owed_nor_given_back_as_a_hotspot_shrink() -> None:
    sim, _events, _days = scenarios.build("tidal", days=1)
    job = sorted(sim.training_jobs)[0]
    workers = sim.workers(job)
    reclaim = ScaleTraining(reason="capacity", job=job, workers=workers - 1, previous_workers=workers,
                            cause="reclaim")
    sim.scale_training(job, workers - 1)   # what the actuator did: a reclaim writes no shrink record
    snap = sim.snapshot()
    state = acknowledge(PlannerState(), [reclaim], snap)
    assert job not in state.shrunk
    assert owed_workers(snap, state.shrunk, {})["hotspot"] == {}
    forecasts = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                quantiles={q: np.full(24, 0.2) for q in (0.5, 0.9, 0.99)})
                 for name in tidal.context(sim).shares}
    alone, _ = plan(snap, forecasts, config.BalancerPolicy(), state)   # capacity switched off since
    assert not [a for a in alone.actions if isinstance(a, ScaleTraining) and a.job == job]
    p, _ = plan_with_capacity(snap, forecasts, ON, state, profiles=tidal.context(sim).profiles,
                              capacity_policy=CapacityPolicy(min_hold_s=0.0))
    assert not [n for n in p.notes if n.startswith(f"dropped scale_training {job}:")]
