"""A training pod says when its work was last saved: `gputide.io/last-checkpoint` (RFC 3339 or epoch seconds,
written by the training loop or a sidecar after each checkpoint), else its `status.startTime`. The capacity planner
shrinks the job whose resize loses the least (work since its checkpoint); in `gputide run` that figure was 0 for
every job, so the choice ignored it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fakeapi import pod

from balancer.actuate.k8s_workloads import workload_from_pod
from balancer.model import Workload, WorkloadClass
from balancer.plan.capacity import since_checkpoint


def training_pod(name: str, checkpoint: object = None, started: str | None = "2026-12-04T00:00:00Z") -> dict:
    p = pod(name, "ml", owner=("Job", "train"))
    p["metadata"]["annotations"] = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}
    if checkpoint is not None:
        p["metadata"]["annotations"]["gputide.io/last-checkpoint"] = checkpoint
    if started:
        p["status"]["startTime"] = started
    return p


MIDNIGHT = 1_796_342_400.0   # 2026-12-04T00:00:00Z


@pytest.mark.parametrize(("checkpoint", "expected"), [
    ("2026-12-04T05:30:00Z", MIDNIGHT + 5.5 * 3600),
    ("2026-12-04T06:30:00+01:00", MIDNIGHT + 5.5 * 3600),
    (str(MIDNIGHT + 60), MIDNIGHT + 60),
    ("2026-12-04T05:30:00", math.nan),     # no zone: ambiguous
    ("yesterday", math.nan),
    ("nan", math.nan),
    ("-5", math.nan),
], ids=["RFC 3339 UTC", "RFC 3339 with offset", "epoch seconds", "no zone", "junk", "nan", "negative"])
def test_the_checkpoint_annotation_is_read_and_a_bad_one_is_not_known(checkpoint, expected):
    w = workload_from_pod(training_pod("w0", checkpoint))
    assert w.workload_class is WorkloadClass.TRAINING and w.started_at == MIDNIGHT
    assert (math.isnan(w.checkpointed_at) and math.isnan(expected)) or w.checkpointed_at == expected


def test_a_pod_without_either_has_neither():
    w = workload_from_pod(training_pod("w0", started=None))
    assert math.isnan(w.checkpointed_at) and math.isnan(w.started_at)


def test_a_jobs_loss_is_since_its_latest_checkpoint_else_since_its_earliest_start_else_nothing():
    now = MIDNIGHT + 6 * 3600
    trainers = [
        (0, MIDNIGHT + 5 * 3600, MIDNIGHT), (0, math.nan, MIDNIGHT),      # rank 0 alone reports its checkpoints
        (1, math.nan, MIDNIGHT + 3600), (1, math.nan, MIDNIGHT + 2 * 3600),  # none: since the first worker started
        (2, math.nan, math.nan),                                           # nothing known
        (3, now + 60, MIDNIGHT),                                           # a clock ahead: no loss, not negative
    ]
    assert since_checkpoint(now, trainers, 4).tolist() == [3600.0, 5 * 3600.0, 0.0, 0.0]


def test_the_capacity_view_of_a_snapshot_carries_each_jobs_loss():
    from balancer.app import scenarios, tidal  # noqa: F401 - tidal registers its scenario
    from balancer.plan.capacity import view_from_snapshot

    sim, _events, _days = scenarios.build("tidal", days=1)
    snap = sim.snapshot()
    trainers = [w for w in snap.workloads if w.workload_class is WorkloadClass.TRAINING and w.elastic_max > 0]
    owner = trainers[0].owner or trainers[0].name
    saved = snap.time - 1800.0

    def stamped(w: Workload) -> Workload:
        return replace(w, checkpointed_at=saved) if (w.owner or w.name) == owner else w

    view = view_from_snapshot(snap.replace(workloads=tuple(map(stamped, snap.workloads))), {})
    ages = {j.name: j.since_checkpoint_s for j in view.jobs}
    assert ages[owner] == pytest.approx(1800.0)
    assert all(age == 0.0 for name, age in ages.items() if name != owner)   # the simulator's pods say nothing
