"""In capacity mode a hotspot shrink record's give-back is left to the tide, and the plan says so.

With `capacity.enabled` the tide sizes elastic training (`balancer.plan.capacity_loop`): the hotspot planner's
give-back of the workers it shrank would grow a job into GPUs the capacity plan may reclaim for inference, so it is
dropped. The job's record (`gputide.io/shrunk`) stays valid until the tide resizes the job, so the give-back is
proposed again every cycle. Before, it was dropped with no note, log or metric, and its gain still counted in the
plan's `objective_after`. Now each plan that drops it carries one note naming the job, the same text every cycle it
lasts (the loop logs a note once while it lasts: `Reconciler._log_notes`), and its gain is not counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from balancer import config
from balancer.app import scenarios, tidal
from balancer.model import Forecast, ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.colocation import ColocationState
from balancer.plan.planner import PlannerState, plan

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))


@pytest.fixture
def owed():
    """The tidal fleet with one training job a hotspot shrank by a worker (its record on the job), every GPU cool."""
    sim, _events, _days = scenarios.build("tidal", days=1)
    job = sorted(sim.training_jobs)[0]
    workers = sim.workers(job)
    sim.scale_training(job, workers - 1, shrunk_from=workers)
    snap = sim.snapshot()
    forecasts = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                quantiles={q: np.full(24, 0.2) for q in (0.5, 0.9, 0.99)})
                 for name in tidal.context(sim).shares}
    return snap, forecasts, tidal.context(sim).profiles, job


def with_capacity(snap, forecasts, profiles, state=None):
    return plan_with_capacity(snap, forecasts, ON, state, profiles=profiles,
                              capacity_policy=CapacityPolicy(min_hold_s=0.0))


def notes_on(p, job):
    return [n for n in p.notes if n.startswith(f"dropped scale_training {job}:")]


def test_the_give_back_is_dropped_with_a_note_that_says_why_and_its_gain_is_not_counted(owed):
    snap, forecasts, profiles, job = owed
    alone, _ = plan(snap, forecasts, ON)
    (give,) = alone.actions   # outside capacity mode: the give-back, and its gain in objective_after
    assert isinstance(give, ScaleTraining) and give.job == job and give.shrunk_from == 0 and give.expected_gain > 0
    p, state = with_capacity(snap, forecasts, profiles)
    assert not [a for a in p.actions if isinstance(a, ScaleTraining) and a.shrunk_from == 0]
    (note,) = notes_on(p, job)
    assert "hotspot give-back" in note and "tide" in note
    assert p.objective_after == pytest.approx(alone.objective_after + give.expected_gain)
    assert job not in state.shrunk


def test_the_note_reads_the_same_every_cycle_the_record_stays_so_the_loop_logs_it_once(owed):
    snap, forecasts, profiles, job = owed
    first, state = with_capacity(snap, forecasts, profiles)
    again, _ = with_capacity(snap, forecasts, profiles, state)   # the record still on the job: proposed again
    assert notes_on(first, job) and notes_on(again, job) == notes_on(first, job)
    assert again.objective_after == pytest.approx(first.objective_after)


def test_colocations_give_back_left_to_the_tide_is_forgotten_so_the_job_is_not_held_shrunk_for_ever():
    """Co-location's give-back dropped for the tide left its memory of the shrink in place: the job counted as held
    smaller by co-location for ever (never shrunk by it again, the hotspot's give-back waiting behind it)."""
    sim, _events, _days = scenarios.build("tidal", days=1)
    job = sorted(sim.training_jobs)[0]
    workers = sim.workers(job)
    sim.scale_training(job, workers - 1)
    snap = sim.snapshot()
    forecasts = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                quantiles={q: np.full(24, 0.2) for q in (0.5, 0.9, 0.99)})
                 for name in tidal.context(sim).shares}
    state = PlannerState(colocation=ColocationState(shrunk={job: (workers, "a-service-since-removed")}))
    alone, _ = plan(snap, forecasts, ON, state)
    assert [(a.job, a.cause) for a in alone.actions if isinstance(a, ScaleTraining)] == [(job, "colocation_slack")]
    p, state = with_capacity(snap, forecasts, tidal.context(sim).profiles, state)
    assert "co-location's give-back" in notes_on(p, job)[0]
    assert job not in state.colocation.shrunk
