"""A training pod says when its work was last saved: `gputide.io/last-checkpoint` (RFC 3339 or epoch seconds,
written by the training loop or a sidecar after each checkpoint), else its `status.startTime`. The capacity planner
shrinks the job whose resize loses the least (work since its checkpoint); in `gputide run` that figure was 0 for
every job, so the choice ignored it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from fakeapi import pod

from balancer.actuate.k8s_workloads import job_facts, with_job, workload_from_pod
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


def resized_job(resized: object, sigterm: bool = False) -> dict:
    notes = {"gputide.io/resized-at": resized}
    if sigterm:
        notes["gputide.io/checkpoint-on-sigterm"] = "true"
    return {"metadata": {"name": "train", "namespace": "ml", "annotations": notes}, "spec": {"parallelism": 3}}


H = 3600.0


@pytest.mark.parametrize(("checkpoint", "started", "resized", "sigterm", "expected"), [
    ("2026-12-04T05:30:00Z", "2026-12-04T00:00:00Z", "2026-12-04T05:45:00Z", False, MIDNIGHT + 5.75 * H),
    ("2026-12-04T05:30:00Z", "2026-12-04T00:00:00Z", "2026-12-04T05:00:00Z", False, MIDNIGHT + 5.5 * H),
    (None, "2026-12-04T00:00:00Z", "2026-12-04T03:00:00Z", False, MIDNIGHT + 3 * H),
    (None, "2026-12-04T04:00:00Z", "2026-12-04T03:00:00Z", False, math.nan),
    (None, None, "2026-12-04T03:00:00Z", False, MIDNIGHT + 3 * H),
    ("2026-12-04T05:30:00Z", "2026-12-04T00:00:00Z", "soon", False, MIDNIGHT + 5.5 * H),
    ("2026-12-04T05:30:00Z", "2026-12-04T00:00:00Z", "2026-12-04T05:45:00Z", True, math.inf),
], ids=["resized after its checkpoint", "resized before it", "no checkpoint: resized after its start",
        "no checkpoint: started after the resize", "nothing known but the resize", "junk", "checkpoints on SIGTERM"])
def test_a_resize_by_gputide_restarts_the_work_at_risk(checkpoint, started, resized, sigterm, expected):
    # a Job resized by gputide went on from its last checkpoint: the pods' annotation, which only a new checkpoint
    # moves, would count the work lost in that resize as at risk again
    w = with_job(workload_from_pod(training_pod("w0", checkpoint, started)), job_facts(resized_job(resized, sigterm)))
    assert (math.isnan(w.checkpointed_at) and math.isnan(expected)) or w.checkpointed_at == expected


def test_a_resize_lowers_the_jobs_loss_to_the_work_since_it():
    resized = with_job(workload_from_pod(training_pod("w0", "2026-12-04T05:00:00Z")),
                       job_facts(resized_job("2026-12-04T05:50:00Z")))
    plain = workload_from_pod(training_pod("w1", "2026-12-04T05:00:00Z"))
    now = MIDNIGHT + 6 * H
    trainers = [(0, resized.checkpointed_at, resized.started_at), (1, plain.checkpointed_at, plain.started_at)]
    assert since_checkpoint(now, trainers, 2).tolist() == [600.0, 3600.0]
