"""The safety chokepoint under review: budgets that one action kind slipped past, a target acted on twice in one
cycle, the emergency-stop label and resizes, give-backs on protected GPUs, and the ledger a successor inherits."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import safety
from balancer.actuate.k8s_leader import MAX_LEDGER_BYTES
from balancer.config import SafetyPolicy
from balancer.model import ScaleInference, ScaleTraining, SetPowerLimit, WorkloadClass
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
NOW = 10_000.0


def job_snapshot(restarts: bool, *, nodes=None, protected_svc: bool = False):
    w = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8,
                   restarts_on_resize=restarts), (i,)) for i in range(4)]
    w += [(workload(f"svc-{i}", owner="svc", protected=protected_svc), (8 + i,)) for i in range(3)]
    return snapshot(FL, workloads=w, nodes=nodes)


def resize(workers, previous=4, **kw):
    return ScaleTraining(job="job", workers=workers, previous_workers=previous, reason="tide", expected_gain=1.0, **kw)




@pytest.mark.parametrize(("workers", "spent_if_restarting", "spent_if_elastic"), [(6, 4, 0), (3, 4, 1), (0, 4, 4)],
                         ids=["grow", "shrink", "stop"])
def test_a_resize_that_restarts_the_whole_job_spends_every_running_worker(workers, spent_if_restarting,
                                                                         spent_if_elastic):
    """A Kueue-queued Job without elastic slices (or torchrun elastic) stops all its pods to change size: a grow of 4
    running workers stopped 4 pods and spent none of the eviction budget, a shrink by one spent 1."""
    guard = SafetyGuard(SafetyPolicy(eviction_budget=10))
    for restarts, spent in ((True, spent_if_restarting), (False, spent_if_elastic)):
        snap = job_snapshot(restarts)
        ledger = guard.record(SafetyLedger(), [resize(workers)], snap, NOW)
        assert guard.remaining_evictions(ledger, NOW) == 10 - spent, f"restarts={restarts}"
    tight = SafetyGuard(SafetyPolicy(eviction_budget=3)).review([resize(workers)], job_snapshot(True),
                                                                SafetyLedger(), NOW)
    assert isinstance(tight.rejected[0][1], safety.EvictionBudgetExhausted)


def test_a_restarting_reclaim_still_goes_through_an_empty_budget_and_spends_it():
    guard = SafetyGuard(SafetyPolicy(eviction_budget=0))
    review = guard.review([resize(2, reclaim=True)], job_snapshot(True), SafetyLedger(), NOW)
    assert review.accepted
    spent = guard.record(SafetyLedger(), review.accepted, job_snapshot(True), NOW)
    assert len(spent.evictions) == 4 and guard.remaining_evictions(spent, NOW) == 0   # spent past it: none left

def cap(gpu, watts=250.0, previous=400.0, **kw):
    return SetPowerLimit(gpu=gpu, uuid=FL.gpus[gpu].uuid, node=FL.gpus[gpu].node, watts=watts,
                         previous_watts=previous, reason="hot", expected_gain=1.0, **kw)



@pytest.mark.parametrize("actions", [
    [resize(3), resize(6)],                                          # a hotspot shrink and a tide loan of one job
    [resize(3), resize(2, reclaim=True)],                            # ... and a reclaim planned from the same 4
    [cap(0), cap(0, watts=300.0)],                                   # two power limits for one GPU
    [ScaleInference(service="svc", replicas=2, previous_replicas=3, reason="loan", expected_gain=1.0),
     ScaleInference(service="svc", replicas=1, previous_replicas=3, reason="loan", expected_gain=1.0)],
], ids=["shrink-then-grow", "shrink-then-reclaim", "two-caps", "two-scale-downs"])
def test_one_target_is_acted_on_once_per_cycle(actions):
    """The cooldown only looked at the ledger, which the cycle's own actions enter after acting: two actions on one
    target in one plan both passed, each planned from a size the other changes (both shrinks spent, the job ended
    wherever the last write left it, and the cooldown was bypassed)."""
    review = SafetyGuard(SafetyPolicy()).review(actions, job_snapshot(False), SafetyLedger(), NOW)
    assert review.accepted == (actions[0],)
    assert isinstance(review.rejected[0][1], safety.CooldownActive)


def test_a_target_refused_once_leaves_room_for_the_next_action_on_it():
    review = SafetyGuard(SafetyPolicy(min_expected_gain=0.5)).review(
        [replace(resize(3), expected_gain=0.1), resize(6)], job_snapshot(False), SafetyLedger(), NOW)
    assert review.accepted == (resize(6),)


def labelled(node: str):
    return [replace(n, labels={safety.EMERGENCY_LABEL: "true"}) if n.name == node else n for n in FL.nodes]


@pytest.mark.parametrize(("action", "held"), [
    (resize(2), True),                                                # stops workers, one of them may be on n0
    (resize(2, reclaim=True), True),
    (resize(6), False),                                               # an elastic grow stops nothing
    (ScaleInference(service="svc", replicas=1, previous_replicas=3, reason="loan", expected_gain=1.0), True),
    (ScaleInference(service="svc", replicas=5, previous_replicas=3, reason="reclaim", expected_gain=1.0), False),
], ids=["shrink", "reclaim", "grow", "inference-down", "inference-up"])
def test_the_emergency_stop_label_holds_a_resize_that_would_stop_pods_on_the_node(action, held):
    """`gputide.io/emergency-stop=true` on a node "stops every action touching it": a shrink of a job (or a scale-down
    of a service) with pods there went through, and the ReplicaSet or the job could stop exactly those pods."""
    node = "n0" if isinstance(action, ScaleTraining) else "n2"
    snap = job_snapshot(False, nodes=labelled(node))
    guard = SafetyGuard(SafetyPolicy())
    review = guard.review([action], snap, SafetyLedger(), NOW)
    assert bool(review.rejected) is held
    if held:
        assert isinstance(review.rejected[0][1], safety.EmergencyStop)
    assert (guard.stops_now([action], snap)[0] is not None) is held
    assert guard.review([action], job_snapshot(False), SafetyLedger(), NOW).accepted   # unlabelled: goes through


def test_a_gpu_hosting_a_protected_workload_gets_its_power_back():
    """Never throttled, but a cap already there (set before the protected pod came, or before its namespace was
    protected) was never given back either: the give-back was refused as `protected` every cycle, for good."""
    snap = job_snapshot(False, protected_svc=True)
    guard = SafetyGuard(SafetyPolicy())
    throttle = guard.review([cap(8)], snap, SafetyLedger(), NOW)
    assert isinstance(throttle.rejected[0][1], safety.ProtectedWorkload)
    back = cap(8, watts=400.0, previous=250.0, give_back=True)
    assert guard.review([back], snap, SafetyLedger(), NOW).accepted == (back,)
    raised = cap(8, watts=300.0, previous=250.0)
    assert guard.review([raised], snap, SafetyLedger(), NOW).accepted == (raised,)


def test_the_ledger_keeps_a_power_cooldown_only_while_it_holds():
    """Every entry was kept for the longest window (the eviction budget's hour), so an hour of throttling on a large
    fleet grew the ledger past what the Lease annotation takes (128 KiB) and it was no longer handed on: a successor
    inherited an old ledger, with a fresh eviction budget."""
    p = SafetyPolicy()
    guard = SafetyGuard(p)
    snap = snapshot(make_fleet(1, 1))
    ledger = SafetyLedger()
    uuid = "GPU-00000000-0000-0000-0000-{:012d}"
    t = NOW
    for cycle in range(120):   # an hour at 30 s per cycle, each the most actions a cycle may take, on 10k GPUs
        caps = [SetPowerLimit(gpu=0, uuid=uuid.format(cycle * 20 + i), node="n0", watts=250.0, previous_watts=400.0,
                              reason="hot", expected_gain=1.0) for i in range(p.max_actions_per_cycle)]
        ledger = guard.record(ledger, caps, snap, t)
        t += 30.0
    assert len(ledger.to_json()) < MAX_LEDGER_BYTES
    assert len(ledger.last_action) == p.max_actions_per_cycle * int(p.power_cooldown_s / 30)
    kept = guard.record(SafetyLedger(last_action={"power_limit:GPU-1": NOW, "inference/svc-0": NOW}), [], snap,
                        NOW + p.power_cooldown_s)
    assert dict(kept.last_action) == {"inference/svc-0": NOW}   # a workload's cooldown is longer


@pytest.mark.parametrize("text", ['{"evictions": [Infinity]}', '{"last_action": {"job": Infinity}}',
                                  '{"evictions": [NaN]}', '{"evictions": [true]}',
                                  '{"migrations": [[Infinity, "n0", "n1", "svc"]]}'])
def test_a_ledger_time_that_is_no_time_is_refused(text):
    """Python's json reads Infinity: an eviction at +inf never left its window, so the budget was one short for good,
    and every leader handed it on to the next."""
    with pytest.raises(ValueError):
        SafetyLedger.from_json(text)


def test_times_ahead_of_the_clock_hold_a_window_from_now_not_for_as_long_as_the_clock_was_off():
    """A predecessor whose clock ran a day ahead left evictions and cooldowns dated tomorrow: the successor counted
    them spent, and held the cooldowns, for a day and an hour."""
    p = SafetyPolicy(eviction_budget=3)
    guard = SafetyGuard(p)
    snap = job_snapshot(False)
    ahead = NOW + 86_400.0
    inherited = SafetyLedger(last_action={"job": ahead}, evictions=(ahead,) * 3,
                             migrations=((ahead, "n0", "n1", "svc"),))
    ledger = guard.record(inherited, [], snap, NOW)
    assert guard.remaining_evictions(ledger, NOW) == 0 and not guard.review([resize(3)], snap, ledger, NOW).accepted
    later = NOW + p.eviction_window_s
    assert guard.remaining_evictions(ledger, later) == 3
    assert guard.review([resize(3)], snap, ledger, later).accepted
