"""A Kueue quota move survives the controller dying between its two writes. Moving GPU quota lowers the lender's
nominalQuota and then raises the borrower's: a controller killed in between (OOM, node loss, a new leader) left the
cohort short of the GPUs with nothing on the cluster saying so. The lender now records the move in the patch that
lowers it and the borrower notes the move's id in the patch that raises it, so a restarted controller settles it
(`KueueQuota.settle_all`, and before any later move): completed, or rolled back for quota lent ahead of a grow that
never happened; every step at most once, wherever the next death comes."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, job
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
QUEUES = ("inference", "training")
KUEUE = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")


class Died(BaseException):
    """The controller's process ends here: nothing after it runs, no undo, no error handling."""


def quota(kube: FakeKube) -> tuple[int, int]:
    return tuple(kube.get("clusterqueues", q)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
                 for q in QUEUES)


def controller(api, clock, sleeps) -> KubernetesActuator:
    """A fresh controller: what it knows of a move is what the cluster says."""
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=QUEUES)


def dies_at(actuator: KubernetesActuator, queue: str, landed: bool, sent: list | None = None) -> None:
    """The controller dies at its first patch of ClusterQueue `queue`: after the API server applied it (`landed`),
    or before it reached it (its body kept in `sent`: a request a dead controller may still have in flight)."""
    real, done = actuator.api.custom.patch_cluster_custom_object, []

    @functools.wraps(real)
    def patch(*args, **kwargs):
        if args[3] == queue and not done:
            done.append(True)
            if landed:
                real(*args, **kwargs)
            elif sent is not None:
                sent.append(args[4])
            raise Died
        return real(*args, **kwargs)

    actuator.api.custom.patch_cluster_custom_object = patch


def cohort(kube: FakeKube) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 8))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))


def scale(actuator: KubernetesActuator, workers: int, previous: int = 4):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


def restart(api, clock, sleeps) -> list[str]:
    """A new controller's first cycle settles what the dead one left open; settling again changes nothing."""
    notes = controller(api, clock, sleeps).kueue.settle_all(QUEUES)
    assert controller(api, clock, sleeps).kueue.settle_all(QUEUES) == []
    return notes


@pytest.mark.parametrize(
    ("workers", "borrower", "landed", "expected", "said"),
    [
        pytest.param(6, "training", False, (16, 8), "rolled back",
                     id="a grow's quota lent, the training queue not raised: rolled back (the Job never grew)"),
        pytest.param(6, "training", True, (12, 12), None,
                     id="a grow's quota raised on training before the death: the move is whole, nothing to do"),
        pytest.param(2, "inference", False, (20, 4), "completed",
                     id="a shrink's quota taken from training, inference not raised: completed (the Job shrank)"),
        pytest.param(2, "inference", True, (20, 4), None,
                     id="a shrink's quota raised on inference before the death: nothing to do"),
    ],
)
def test_a_controller_dying_between_the_two_writes_leaves_a_move_its_successor_settles(
        kube: FakeKube, api, clock, sleeps, workers, borrower, landed, expected, said) -> None:
    cohort(kube)
    dying = controller(api, clock, sleeps)
    dies_at(dying, borrower, landed)
    with pytest.raises(Died):
        scale(dying, workers)
    notes = restart(api, clock, sleeps)
    assert quota(kube) == expected
    assert [said in n for n in notes] == ([True] if said else []), notes
    # and the next move starts from there, exactly: 2 GPUs for each worker the Job grows by
    before = kube.get("jobs", "train", "ml")["spec"]["parallelism"]
    assert scale(controller(api, clock, sleeps), 8, previous=before).outcome is Outcome.APPLIED
    assert quota(kube) == (expected[0] - 2 * (8 - before), expected[1] + 2 * (8 - before))


def test_a_move_of_the_operator_is_completed_and_its_lending_limit_is_kept(kube: FakeKube, api, clock,
                                                                          sleeps) -> None:
    cohort(kube)
    dying = controller(api, clock, sleeps)
    dies_at(dying, "training", landed=False)
    with pytest.raises(Died):
        dying.shift_kueue_quota("inference", "training", 6)
    assert quota(kube) == (10, 8)   # what the death left: 6 GPUs in no queue
    assert restart(api, clock, sleeps)
    assert quota(kube) == (10, 14)
    controller(api, clock, sleeps).shift_kueue_quota("training", "inference", 6)
    res = kube.get("clusterqueues", "inference")["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    assert (res["nominalQuota"], res["lendingLimit"]) == (16, 14)


@pytest.mark.parametrize(
    ("queue", "landed"),
    [
        pytest.param("training", False, id="the successor dies before its void note on training lands"),
        pytest.param("training", True, id="it dies once training notes the move void"),
        pytest.param("inference", False, id="it dies before inference gets its quota back"),
        pytest.param("inference", True, id="it dies once inference has its quota back"),
    ],
)
def test_a_successor_dying_while_it_settles_leaves_its_own_successor_to_finish_it_once(
        kube: FakeKube, api, clock, sleeps, queue, landed) -> None:
    cohort(kube)
    first = controller(api, clock, sleeps)
    dies_at(first, "training", landed=False)
    with pytest.raises(Died):
        scale(first, 6)
    second = controller(api, clock, sleeps)
    dies_at(second, queue, landed)
    with pytest.raises(Died):
        second.kueue.settle_all(QUEUES)
    restart(api, clock, sleeps)
    assert quota(kube) == (16, 8)
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 4


def test_a_raise_still_in_flight_from_a_dead_controller_cannot_land_after_the_rollback(kube: FakeKube, api, clock,
                                                                                       sleeps) -> None:
    """The void note changes the training queue's resourceVersion: the dead controller's raise, sent with the one
    it read, is refused when it finally reaches the API server."""
    cohort(kube)
    dying, sent = controller(api, clock, sleeps), []
    dies_at(dying, "training", landed=False, sent=sent)
    with pytest.raises(Died):
        scale(dying, 6)
    restart(api, clock, sleeps)
    with pytest.raises(ApiException) as refused:
        k8s.CustomObjectsApi(api).patch_cluster_custom_object(*KUEUE, "training", sent[0])
    assert refused.value.status == 409
    assert quota(kube) == (16, 8)


def test_a_move_left_open_is_settled_before_the_next_one(kube: FakeKube, api, clock, sleeps) -> None:
    """Even without a restart's settle: the next action's move settles the open one first, and says so."""
    cohort(kube)
    dying = controller(api, clock, sleeps)
    dies_at(dying, "training", landed=False)
    with pytest.raises(Died):
        scale(dying, 6)
    result = scale(controller(api, clock, sleeps), 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert "rolled back" in result.detail
    assert quota(kube) == (12, 12)
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 6


def test_a_raise_that_landed_unanswered_is_not_undone_as_if_it_had_failed(kube: FakeKube, api, clock,
                                                                         sleeps) -> None:
    """The training queue's patch lands but its answer never comes and no retry is left: undoing the lender then
    gave the cohort 4 GPUs that do not exist. The borrower is noted void first, which finds the move received."""
    import urllib3

    cohort(kube)
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=QUEUES, max_retries=0)
    real, done = actuator.api.custom.patch_cluster_custom_object, []

    @functools.wraps(real)
    def patch(*args, **kwargs):
        out = real(*args, **kwargs)
        if args[3] == "training" and not done:
            done.append(True)
            raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")
        return out

    actuator.api.custom.patch_cluster_custom_object = patch
    result = scale(actuator, 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert quota(kube) == (12, 12)
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 6
