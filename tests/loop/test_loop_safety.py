"""The safety chokepoint: each limit refuses with its own error type; telemetry the loop must not act on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import safety
from balancer.config import SafetyPolicy
from balancer.errors import InvalidTelemetry, MissingTelemetry, StaleTelemetry
from balancer.model import Migrate, ScaleInference, ScaleTraining, SetPowerLimit, WorkloadClass
from balancer.safety import PodDisruptionBudget, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
W = [(workload(f"svc-{i}", owner="svc"), (i,)) for i in range(3)]
W += [(workload("job-0", WorkloadClass.TRAINING, owner="job", elastic_min=1), (5,))]
W += [(workload("guarded-0", owner="guarded", protected=True), (6,))]
W += [(workload("pinned-0", owner="pinned", movable=False), (7,))]
SNAP = snapshot(FL, workloads=W)


def mig(i, target=8, gain=1.0):
    name = W[i][0].name
    return Migrate(workload=name, source_gpus=W[i][1], target_gpus=(target,), target_node=FL.gpus[target].node,
                   reason="hot", expected_gain=gain)


def cap(gpu, gain=1.0):
    return SetPowerLimit(gpu=gpu, uuid=FL.gpus[gpu].uuid, node=FL.gpus[gpu].node, watts=250, previous_watts=400,
                         reason="hot", expected_gain=gain)


NOW = 10_000.0
CASES = {
    "protected workloads are never touched": (SafetyPolicy(), [mig(4)], {}, safety.ProtectedWorkload),
    "non-movable workloads are never migrated": (SafetyPolicy(), [mig(5)], {}, safety.ProtectedWorkload),
    "a GPU hosting a protected workload is never throttled": (SafetyPolicy(), [cap(6)], {}, safety.ProtectedWorkload),
    "the emergency stop refuses everything": (SafetyPolicy(emergency_stop=True), [cap(0)], {}, safety.EmergencyStop),
    "gains below the minimum are refused": (SafetyPolicy(min_expected_gain=2.0), [cap(0)], {}, safety.MinGainNotMet),
    "a workload inside its cooldown is left alone": (
        SafetyPolicy(), [mig(0)], {"ledger": SafetyLedger(last_action={W[0][0].name: NOW - 60})},
        safety.CooldownActive),
    "more actions than allowed per cycle are refused": (
        SafetyPolicy(max_actions_per_cycle=1), [cap(0), cap(1)], {}, safety.MaxActionsPerCycle),
    "a third migration touching one node is refused": (
        SafetyPolicy(max_unavailable_per_workload=5), [mig(0, 8), mig(1, 9), mig(2, 10)], {},
        safety.MaxConcurrentMigrations),
    "migrations still in flight count against the node": (
        SafetyPolicy(), [mig(0, 8)], {"ledger": SafetyLedger(migrations=((NOW - 10, "n0", "n1", "x"),) * 2)},
        safety.MaxConcurrentMigrations),
    "two replicas of one service are not disrupted at once": (
        SafetyPolicy(), [mig(0, 8), mig(1, 9)], {}, safety.MaxUnavailable),
    "a PodDisruptionBudget's minAvailable is honoured": (
        SafetyPolicy(), [mig(0)], {"pdbs": [PodDisruptionBudget("svc", min_available=3)]}, safety.PdbViolation),
    "the eviction budget of the window is honoured": (
        SafetyPolicy(eviction_budget=2), [mig(0)], {"ledger": SafetyLedger(evictions=(NOW - 100, NOW - 50))},
        safety.EvictionBudgetExhausted),
    # the job has one worker placed: the shrink stops that one (the other two it drops are not in the snapshot)
    "a shrink counts its evicted workers against the budget": (
        SafetyPolicy(eviction_budget=0), [ScaleTraining(job="job", workers=0, previous_workers=3, reason="x",
                                                          expected_gain=1)], {}, safety.EvictionBudgetExhausted),
}


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
def test_limit_refuses_with_its_own_error(case):
    policy, actions, extra, error = case
    guard = SafetyGuard(policy, pdbs=extra.get("pdbs", ()))
    review = guard.review(actions, SNAP, extra.get("ledger", SafetyLedger()), NOW)
    assert review.rejected, "expected a rejection"
    assert all(isinstance(exc, error) for _, exc in review.rejected[-1:])
    assert review.rejected[-1][1].reason == error.reason


def test_actions_within_every_limit_pass():
    review = SafetyGuard(SafetyPolicy()).review([mig(0, 8), cap(1), cap(2)], SNAP, SafetyLedger(), NOW)
    assert len(review.accepted) == 3 and not review.rejected


def test_the_emergency_stop_file_and_node_label_stop_actions(tmp_path):
    flag = tmp_path / "stop"
    guard = SafetyGuard(SafetyPolicy(), emergency_stop_file=flag)
    assert guard.review([cap(0)], SNAP, SafetyLedger(), NOW).accepted
    flag.touch()
    assert isinstance(guard.review([cap(0)], SNAP, SafetyLedger(), NOW).rejected[0][1], safety.EmergencyStop)
    labelled = [replace(n, labels={safety.EMERGENCY_LABEL: "true"}) if n.name == "n0" else n for n in FL.nodes]
    s = snapshot(FL, workloads=W, nodes=labelled)
    review = SafetyGuard(SafetyPolicy()).review([cap(0), cap(4)], s, SafetyLedger(), NOW)
    assert [a.gpu for a in review.accepted] == [4]
    stopped = SafetyGuard(SafetyPolicy(), stopped_namespaces={"inference"})
    assert not stopped.review([mig(0)], SNAP, SafetyLedger(), NOW).accepted


def test_record_starts_cooldowns_and_spends_the_budget():
    guard = SafetyGuard(SafetyPolicy(eviction_budget=5))
    ledger = guard.record(SafetyLedger(), [mig(0)], SNAP, NOW)
    assert guard.remaining_evictions(ledger, NOW) == 4
    assert guard.remaining_evictions(ledger, NOW + 3601) == 5
    later = guard.review([mig(0)], SNAP, ledger, NOW + 60)
    assert isinstance(later.rejected[0][1], safety.CooldownActive)
    assert guard.review([mig(0)], SNAP, ledger, NOW + 601).accepted


@pytest.mark.parametrize("mutate,error", [
    (lambda s: s.replace(sample_age_s=np.full(s.n_gpus, 500.0)), StaleTelemetry),
    (lambda s: s.replace(temperature_c=np.where(np.arange(s.n_gpus) == 3, np.nan, s.temperature_c)),
     InvalidTelemetry),
    (lambda s: s.replace(power_w=np.full(s.n_gpus, np.inf)), InvalidTelemetry),
], ids=["samples older than the limit are stale", "a NaN temperature is invalid", "infinite power is invalid"])
def test_telemetry_the_loop_must_not_act_on(mutate, error):
    with pytest.raises(error):
        safety.check_telemetry(mutate(SNAP), SafetyPolicy())
    assert safety.check_telemetry(SNAP, SafetyPolicy()) == 5.0


def test_an_empty_snapshot_is_missing_telemetry():
    empty = snapshot(make_fleet(1, 0))
    with pytest.raises(MissingTelemetry):
        safety.check_telemetry(empty, SafetyPolicy())


@pytest.mark.parametrize(("action", "exempt"), [
    (ScaleInference(service="svc", replicas=5, previous_replicas=3, reason="reclaim", expected_gain=40.0), True),
    (ScaleInference(service="svc", replicas=2, previous_replicas=3, reason="loan", expected_gain=2.0), False),
    (ScaleTraining(job="job", workers=0, previous_workers=1, reason="room", expected_gain=40.0, reclaim=True), True),
    (ScaleTraining(job="job", workers=0, previous_workers=1, reason="hotspot", expected_gain=40.0), False),
], ids=["inference-scale-up", "inference-scale-down", "reclaim-shrink", "hotspot-shrink"])
def test_cooldown_never_holds_back_capacity_for_inference_but_holds_everything_else(action, exempt):
    ledger = SafetyLedger(last_action={"svc": NOW - 10, "job": NOW - 10})
    review = SafetyGuard(SafetyPolicy(cooldown_s=600)).review([action], SNAP, ledger, NOW)
    assert (review.accepted == (action,)) is exempt
    if not exempt:
        assert isinstance(review.rejected[0][1], safety.CooldownActive)


def test_a_reclaim_is_never_refused_by_the_eviction_budget_but_spends_it():
    shrink = ScaleTraining(job="job", workers=0, previous_workers=1, reason="room", expected_gain=40.0, reclaim=True)
    guard = SafetyGuard(SafetyPolicy(eviction_budget=1))
    review = guard.review([shrink, mig(0)], SNAP, SafetyLedger(), NOW)
    assert review.accepted == (shrink,)          # the reclaim took the last eviction ...
    assert isinstance(review.rejected[0][1], safety.EvictionBudgetExhausted)  # ... so the migration waits
    spent = guard.record(SafetyLedger(), [shrink], SNAP, NOW)
    assert guard.remaining_evictions(spent, NOW) == 0
    again = guard.review([shrink], SNAP, spent, NOW + 1)
    assert again.accepted == (shrink,)           # an empty budget still lets loaned GPUs come back


def test_a_reclaim_is_never_refused_by_the_per_cycle_limit_but_counts_against_it():
    # a plan past the limit: the shrink that frees GPUs for a rise, then the scale-up they are for. Refusing the
    # scale-up alone (it comes last) would free the GPUs for nothing and start its replicas a cycle late
    shrink = ScaleTraining(job="job", workers=0, previous_workers=1, reason="room", expected_gain=40.0, reclaim=True)
    up = ScaleInference(service="svc", replicas=5, previous_replicas=3, reason="reclaim", expected_gain=40.0)
    guard = SafetyGuard(SafetyPolicy(max_actions_per_cycle=1))
    review = guard.review([cap(0), shrink, up], SNAP, SafetyLedger(), NOW)
    assert review.accepted == (cap(0), shrink, up)
    # ... they take slots all the same: what may be held back waits behind them
    review = guard.review([shrink, up, cap(0)], SNAP, SafetyLedger(), NOW)
    assert review.accepted == (shrink, up)
    assert isinstance(review.rejected[0][1], safety.MaxActionsPerCycle)
    down = ScaleInference(service="svc", replicas=2, previous_replicas=3, reason="loan", expected_gain=40.0)
    review = guard.review([cap(0), down], SNAP, SafetyLedger(), NOW)   # a loan is no reclaim: it waits
    assert [type(e) for _, e in review.rejected] == [safety.MaxActionsPerCycle]


def test_the_ledger_survives_json_and_merging_keeps_the_later_time_and_every_eviction():
    ledger = SafetyLedger(last_action={"svc": 5.0, "power_limit:GPU-1": 7.5}, evictions=(1.0, 2.0),
                          migrations=((3.0, "n1", "n2", "svc"),))
    again = SafetyLedger.from_json(ledger.to_json())
    assert dict(again.last_action) == dict(ledger.last_action) and again.evictions == ledger.evictions
    assert again.migrations == ledger.migrations
    mine = SafetyLedger(last_action={"svc": 9.0, "job": 1.0}, evictions=(2.0, 4.0))
    both = mine.merged(again)
    assert dict(both.last_action) == {"svc": 9.0, "job": 1.0, "power_limit:GPU-1": 7.5}
    assert both.evictions == (1.0, 2.0, 4.0) and both.migrations == ledger.migrations


def test_merging_keeps_every_eviction_of_one_action_that_stopped_several_pods():
    """A shrink of 8 workers is 8 evictions at one time: merged as a set (what a successor inherits) it was 1, and
    the successor could stop 7 more pods than the budget allows. Shared entries still count once (max, not sum)."""
    snap = snapshot(make_fleet(4, 4), workloads=[(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job"), (i,))
                                                 for i in range(8)])
    guard = SafetyGuard(SafetyPolicy(eviction_budget=8))
    shrink = ScaleTraining(job="job", workers=0, previous_workers=8, reason="room", expected_gain=1.0)
    spent = guard.record(SafetyLedger(), [shrink], snap, NOW)
    inherited = SafetyLedger().merged(SafetyLedger.from_json(spent.to_json()))
    assert inherited.evictions == (NOW,) * 8 and guard.remaining_evictions(inherited, NOW + 1) == 0
    assert spent.merged(spent).evictions == (NOW,) * 8
    assert SafetyLedger(evictions=(1.0, 1.0, 2.0)).merged(SafetyLedger(evictions=(1.0, 2.0, 2.0))).evictions == (
        1.0, 1.0, 2.0, 2.0)


@pytest.mark.parametrize("text", ["[]", '{"last_action": {"svc": "soon"}}', '{"evictions": "many"}',
                                  '{"migrations": [[1.0, "n1"]]}', "not json"])
def test_a_broken_ledger_is_refused_with_what_is_wrong(text):
    with pytest.raises(ValueError):
        SafetyLedger.from_json(text)


@pytest.mark.parametrize(("previous", "replicas", "spent"), [
    (5, 3, 0),  # svc has 3 running replicas: dropping the 2 pending ones evicts nothing
    (5, 2, 1),  # one below the running count: one eviction
    (3, 1, 2),  # all asked are running: every replica dropped is an eviction
    (3, 4, 0),  # a scale-up evicts nothing
])
def test_an_inference_scale_down_spends_only_the_running_replicas_it_stops(previous, replicas, spent):
    down = ScaleInference(service="svc", replicas=replicas, previous_replicas=previous, reason="loan",
                          expected_gain=2.0)
    guard = SafetyGuard(SafetyPolicy(eviction_budget=5))
    ledger = guard.record(SafetyLedger(), [down], SNAP, NOW)
    assert guard.remaining_evictions(ledger, NOW) == 5 - spent
    tight = SafetyGuard(SafetyPolicy(eviction_budget=spent)).review([down], SNAP, SafetyLedger(), NOW)
    assert tight.accepted == (down,)  # a budget of exactly what it stops is enough
