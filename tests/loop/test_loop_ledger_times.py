"""An action enters the safety ledger at the time it was carried out, not when its cycle began. A cycle of slow
actions (an eviction may take minutes, up to the actuator's deadline) dated all of them at its start: a migration
still in flight when the cycle ended was counted as older than it was, left the migrations in flight and the eviction
window that much early, and the per-hour budget undercounted; each cooldown ended early too."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet, snapshot, workload
from test_loop_metrics import Source, loop

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.dryrun import DryRunActuator
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.model import Migrate, Plan, ScaleTraining, WorkloadClass
from balancer.plan import planner as planner_mod

START, SLOW = 1000.0, 300.0   # the cycle's start; each action takes 5 minutes
SHRINK = ScaleTraining(job="job", workers=1, previous_workers=3, reason="hotspot", expected_gain=5.0)
MOVE = Migrate(workload="inference/svc-0", source_gpus=(4,), target_node="n0", target_gpus=(3,), reason="hot",
               expected_gain=5.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=3, eviction_window_s=3600.0, migration_settle_s=900.0))


class Slow(DryRunActuator):
    """Each action takes `SLOW` seconds on the loop's clock; the last one raises if `fail` (its outcome unknown)."""

    def __init__(self, clock: list[float], fail: bool = False) -> None:
        super().__init__()
        self.clock, self.fail = clock, fail

    def apply(self, action, snapshot):
        self.clock[0] += SLOW
        if self.fail and action is MOVE:
            raise TimeoutError("eviction did not finish before the deadline")
        return ActionResult(action, Outcome.APPLIED, "done")


def slow_cycle(fail: bool):
    snap = snapshot(make_fleet(2, 4), age=0.0, workloads=[
        *[(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1), (i,)) for i in range(3)],
        (workload("svc-0", owner="svc"), (4,))])

    def planner(s, forecasts, policy, state):
        return Plan(actions=(SHRINK, MOVE)), state or planner_mod.PlannerState()

    clock = [START]
    rec, _ = loop(Source(snap), clock, planner=planner, actuator=Slow(clock, fail), policy=POLICY)
    if fail:
        with pytest.raises(TimeoutError):
            rec.run_once()
    else:
        assert [r.outcome for r in rec.run_once().results] == [Outcome.APPLIED, Outcome.APPLIED]
    return rec


@pytest.mark.parametrize("fail", [False, True], ids=["applied", "outcome-unknown"])
def test_actions_are_recorded_when_they_were_done(fail):
    rec = slow_cycle(fail)
    shrunk, moved = START + SLOW, START + 2 * SLOW
    assert rec.ledger.evictions == (shrunk, shrunk, moved)
    assert dict(rec.ledger.last_action) == {"job": shrunk, "inference/svc-0": moved,   # and their owners' disruptions
                                            "disrupted:scale_training:job": shrunk, "disrupted:migrate:svc": moved}
    assert [m[0] for m in rec.ledger.migrations] == [moved]


def test_the_hour_budget_still_counts_a_slow_cycles_evictions_an_hour_after_it_began():
    rec = slow_cycle(False)
    guard, p = rec.guard, POLICY.safety
    after_an_hour = START + p.eviction_window_s + 1.0   # the migration finished 50 minutes ago
    assert guard.remaining_evictions(rec.ledger, after_an_hour) == 0
    assert guard.remaining_evictions(rec.ledger, START + 2 * SLOW + p.eviction_window_s) == 3
    second = guard.review([SHRINK], rec.source.snap, rec.ledger, after_an_hour)
    assert not second.accepted and second.rejected[0][1].reason == "eviction_budget"
