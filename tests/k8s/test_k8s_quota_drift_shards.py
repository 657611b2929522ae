"""Two controller shards on one Kueue cohort (`gputide run --shard ... --kueue-queues`): each its own leader, both
checking the quota lent to training every cycle. Shard A's grow moves the quota, then resizes the Job; shard B's
check in between found the loan held by no Job and gave it back, so A's resize came with no quota lent for it (the
grow voided, and the next grow lent again). An excess now goes back only once seen on consecutive checks for the
action deadline (`k8s_quota_drift.Sightings`), within which A's resize lands or A gives the quota back itself."""

from __future__ import annotations

import functools
from collections.abc import Callable

from fakeapi import FakeKube
from test_k8s_quota_drift import QUEUES, admitted_at, cohort, controller, corrected, quota, scale

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S


def before_job_patch(actuator: KubernetesActuator, run: Callable[[], None]) -> None:
    """`run()` once the actuator's quota writes are done, just before its Job's patch is sent (once)."""
    original = actuator.api.batch.patch_namespaced_job

    @functools.wraps(original)
    def patch(*args, **kwargs):
        actuator.api.batch.patch_namespaced_job = original
        run()
        return original(*args, **kwargs)

    actuator.api.batch.patch_namespaced_job = patch


def test_another_shards_check_between_the_quota_move_and_the_resize_leaves_the_grow_its_quota(
        kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    shard_a, shard_b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    seen: list[tuple[int, int]] = []
    before_job_patch(shard_a, lambda: (shard_b.housekeeping(), seen.append(quota(kube))))
    assert scale(shard_a, 6).outcome is Outcome.APPLIED
    assert seen == [(12, 12)]            # B saw the 4 lent as held by no Job: kept, not given back
    assert quota(kube) == (12, 12) and kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 6
    admitted_at(kube, "train", 6)
    for _ in range(2):                   # the resize landed: the loan is held, nothing is excess any more
        assert shard_b.housekeeping() == [] and quota(kube) == (12, 12)
        clock.advance(ACTION_DEADLINE_S)


def test_a_resize_slow_to_land_keeps_its_quota_through_several_checks_within_the_deadline(
        kube: FakeKube, api, clock, sleeps) -> None:
    """A's Job patch retried for two of B's 30 s cycles: B saw the excess on consecutive checks, but for less than
    the action deadline."""
    cohort(kube)
    shard_a, shard_b = controller(api, clock, sleeps), controller(api, clock, sleeps)

    def checks() -> None:
        for _ in range(3):
            assert shard_b.housekeeping() == [] and quota(kube) == (12, 12)
            clock.advance(30)

    before_job_patch(shard_a, checks)
    assert scale(shard_a, 6).outcome is Outcome.APPLIED
    admitted_at(kube, "train", 6)
    assert corrected(shard_b, clock) == [] and quota(kube) == (12, 12)


def test_an_excess_gone_at_one_check_is_seen_anew_when_it_comes_back(kube: FakeKube, api, clock, sleeps) -> None:
    """B saw A's loan as excess in the window; A's resize then held it. Undone by hand long after, the excess is new:
    B gives it back only once it has lasted, not at once for having seen 4 excess GPUs before."""
    cohort(kube)
    shard_a, shard_b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    before_job_patch(shard_a, shard_b.housekeeping)
    assert scale(shard_a, 6).outcome is Outcome.APPLIED
    admitted_at(kube, "train", 6)
    clock.advance(30)
    assert shard_b.housekeeping() == []  # held: forgotten
    clock.advance(ACTION_DEADLINE_S)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 4}})   # its owner sets it back
    admitted_at(kube, "train", 4)
    notes = corrected(shard_b, clock)
    assert quota(kube) == (16, 8)
    assert any("kueue quota correction" in n and "4 given back to inference" in n for n in notes), notes


def test_a_longer_action_deadline_is_the_age_an_excess_must_reach(kube: FakeKube, api, clock, sleeps) -> None:
    """`gputide run --action-deadline 600`: a resize may take up to 10 minutes, so an excess seen for the default
    3 minutes is not yet lasting; at 10 it is."""
    cohort(kube)
    shard_a = controller(api, clock, sleeps)
    shard_b = KubernetesActuator(api, sleep=sleeps.append, clock=clock, deadline_clock=clock,
                                 kueue_queues=QUEUES, action_deadline_s=600.0)
    assert scale(shard_a, 6).outcome is Outcome.APPLIED
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 4}})   # the grow's resize undone
    assert shard_b.housekeeping() == []
    clock.advance(ACTION_DEADLINE_S)
    assert not any("kueue quota correction" in n for n in shard_b.housekeeping()) and quota(kube) == (12, 12)
    clock.advance(600.0 - ACTION_DEADLINE_S)
    assert any("kueue quota correction" in n for n in shard_b.housekeeping()) and quota(kube) == (16, 8)
