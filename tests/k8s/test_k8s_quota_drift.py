"""Kueue quota lent to training that no training Job holds goes back to inference, once a cycle. A quota move is
durable, but it and the Job resize it is for are two things: a controller that died after both quota writes and
before the Job's patch, a resize undone by someone, or a grown Job that ran to its end left the loan behind, and the
next grow lent again, so inference's quota drifted into training. The actuator's housekeeping now compares the loan
(recorded on both queues, `gputide.io/quota-loans`) with what training's Workloads and Jobs hold and gives the
excess back, never what an admitted Workload or a Job's own size needs, counting each correction
(`gputide_kueue_quota_corrections_total{queue}`). Only an excess seen on consecutive checks for the action deadline
goes back (`Sightings`), the least they saw: not a loan whose Job resize is under way, and nothing at a restarted
controller's first check."""

from __future__ import annotations

import functools
import json
import logging

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, job, workload
from prometheus_client import CollectorRegistry

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_quota_drift import Excess, Sightings, Spare, excess, held, spare
from balancer.actuate.k8s_transfer import LOANS_ANNOTATION, loans, loans_note
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
QUEUES = ("inference", "training")
COUNTER = "gputide_kueue_quota_corrections_total"


class Died(BaseException):
    """The controller's process ends here: nothing after it runs."""


def quota(kube: FakeKube) -> tuple[int, int]:
    return tuple(kube.get("clusterqueues", q)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
                 for q in QUEUES)


def controller(api, clock, sleeps, registry: CollectorRegistry | None = None) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, deadline_clock=clock, kueue_queues=QUEUES,
                              registry=registry)


def corrected(actuator: KubernetesActuator, clock) -> list[str]:
    """Housekeeping's check, which gives nothing back (an excess seen once), then the check once the excess has
    lasted the action deadline: what that one did."""
    first = actuator.housekeeping()
    assert not any("kueue quota correction" in n for n in first), first
    clock.advance(ACTION_DEADLINE_S)
    return actuator.housekeeping()


def cohort(kube: FakeKube, parallelism: int = 4) -> dict:
    """inference 16, training 8 GPUs of h100; Job ml/train (2 GPUs a worker) admitted in training as it is."""
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 8))
    stored = kube.add(job("train", "ml", parallelism=parallelism, gpus=2, queue="training-lq"))
    kube.add(workload(stored, "h100"))
    return stored


def admitted_at(kube: FakeKube, name: str, workers: int, namespace: str = "ml") -> None:
    """Kueue admitted the Job's Workload for `workers` workers (what the fake does not do on a resize)."""
    stored = kube.get("jobs", name, namespace)
    wl = workload(stored, "h100")
    kube.mutate("workloads", wl["metadata"]["name"], namespace, {"status": {"admission": {
        "clusterQueue": "training", "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "h100", "nvidia.com/gpu": "h100"}, "count": workers}]}}})


def scale(actuator: KubernetesActuator, workers: int, previous: int = 4):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


def dies_at_job_patch(actuator: KubernetesActuator) -> None:
    """The controller dies once both quota writes are done, before the Job's patch reaches the API server."""
    @functools.wraps(actuator.api.batch.patch_namespaced_job)
    def patch(*args, **kwargs):
        raise Died

    actuator.api.batch.patch_namespaced_job = patch


def grow_that_dies(api, clock, sleeps, workers: int = 6) -> None:
    dying = controller(api, clock, sleeps)
    dies_at_job_patch(dying)
    with pytest.raises(Died):
        scale(dying, workers)


def test_quota_lent_for_a_grow_the_controller_died_before_is_given_back_and_counted(kube: FakeKube, api, clock,
                                                                                   sleeps) -> None:
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    assert quota(kube) == (12, 12)   # both quota writes done, the move settled: the Job still asks for 4 workers
    registry = CollectorRegistry()
    successor = controller(api, clock, sleeps, registry)
    assert registry.get_sample_value(COUNTER, {"queue": "training"}) == 0
    for _ in range(int(ACTION_DEADLINE_S // 30)):   # a check each 30 s cycle: seen, but not for the action deadline yet
        assert successor.housekeeping() == [] and quota(kube) == (12, 12)
        clock.advance(30)
    assert registry.get_sample_value(COUNTER, {"queue": "training"}) == 0
    notes = successor.housekeeping()
    assert quota(kube) == (16, 8)
    assert any("kueue quota correction" in n and "4 given back to inference" in n for n in notes), notes
    assert registry.get_sample_value(COUNTER, {"queue": "training"}) == 1
    assert successor.housekeeping() == [] and quota(kube) == (16, 8)
    assert registry.get_sample_value(COUNTER, {"queue": "training"}) == 1
    # the next grow lends once, from where the queues should be
    assert scale(successor, 6).outcome is Outcome.APPLIED
    assert quota(kube) == (12, 12)


def test_without_the_correction_each_dead_grow_drifts_the_cohort_further(kube: FakeKube, api, clock,
                                                                         sleeps) -> None:
    """Two grows of the same Job that each died before its patch: the second lends again on top of the first."""
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    grow_that_dies(api, clock, sleeps)
    assert quota(kube) == (8, 16)
    corrected(controller(api, clock, sleeps), clock)
    assert quota(kube) == (16, 8)


def undone(kube: FakeKube) -> None:
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 4}})   # its owner sets it back
    admitted_at(kube, "train", 4)


def finished(kube: FakeKube) -> None:
    kube.mutate("jobs", "train", "ml", {"status": {"conditions": [{"type": "Complete", "status": "True"}]}})
    wl = workload(kube.get("jobs", "train", "ml"), "h100")["metadata"]["name"]
    kube.mutate("workloads", wl, "ml", {"status": {"conditions": [{"type": "Finished", "status": "True"}]}})


@pytest.mark.parametrize("since", [pytest.param(undone, id="a resize someone undid"),
                                   pytest.param(finished, id="a grown Job that ran to its end")])
def test_a_loan_its_job_no_longer_holds_goes_back(kube: FakeKube, api, clock, sleeps, since) -> None:
    cohort(kube)
    actuator = controller(api, clock, sleeps)
    assert scale(actuator, 6).outcome is Outcome.APPLIED
    admitted_at(kube, "train", 6)
    assert quota(kube) == (12, 12) and actuator.housekeeping() == []   # the loan is held: nothing to correct
    since(kube)
    corrected(actuator, clock)
    assert quota(kube) == (16, 8)


def test_quota_an_admitted_workload_took_stays_only_the_rest_goes_back(kube: FakeKube, api, clock, sleeps) -> None:
    """Kueue admitted another training Job (2 GPUs) into the quota a dead grow lent: nothing may be left without a
    place to run, so 2 of the 4 GPUs stay with training."""
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    other = kube.add(job("eval", "ml", parallelism=1, gpus=2, queue="training-lq"))
    kube.add(workload(other, "h100"))
    corrected(controller(api, clock, sleeps), clock)
    assert quota(kube) == (14, 10)


def test_a_grow_kueue_has_not_admitted_yet_keeps_its_loan(kube: FakeKube, api, clock, sleeps) -> None:
    """Job grown to 6 and its Workload still admitted for 4 (Kueue re-admits it at its new size later): the Job's own
    size holds the loan; of a second loan the controller died before using, only that one goes back."""
    cohort(kube)
    actuator = controller(api, clock, sleeps)
    assert scale(actuator, 6).outcome is Outcome.APPLIED          # admitted for 4 still
    assert actuator.housekeeping() == [] and quota(kube) == (12, 12)
    grow_that_dies(api, clock, sleeps, workers=8)                 # 6 -> 8: 4 more lent, the Job never grew
    assert quota(kube) == (8, 16)
    corrected(actuator, clock)
    assert quota(kube) == (12, 12)   # the Job asks 12 (8 admitted): 12 held of the 16, the loan was 8


def test_the_operators_own_quota_edit_is_not_taken_for_a_loan(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    cq = kube.get("clusterqueues", "training")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = 18   # +6 by hand
    kube.mutate("clusterqueues", "training", "", {"spec": cq["spec"]})
    corrected(controller(api, clock, sleeps), clock)
    assert quota(kube) == (16, 14)   # the 4 lent go back, the operator's 6 stay


def test_a_workload_admitted_between_the_check_and_the_write_stops_the_correction(kube: FakeKube, api, clock,
                                                                                  sleeps) -> None:
    """Kueue reserves all 12 GPUs of training (a Workload admitted into the loan) once the check has read the queue:
    the patch that would lower it reads it again, and nothing moves; the next cycle decides from there."""
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    usage = {"status": {"flavorsReservation": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                                            "total": 12}]}]}}
    actuator = controller(api, clock, sleeps)
    assert actuator.housekeeping() == []   # the excess seen once
    clock.advance(ACTION_DEADLINE_S)
    kube.before("GET", r"/v1beta1/workloads$", lambda: kube.mutate("clusterqueues", "training", "", usage))
    notes = actuator.housekeeping()
    assert quota(kube) == (12, 12)
    assert any("could not check the kueue quota" in n and "its workloads hold 12" in n for n in notes), notes
    assert actuator.housekeeping() == [] and quota(kube) == (12, 12)


def test_a_queue_without_a_record_of_loans_is_left_as_it_is(kube: FakeKube, api, clock, sleeps) -> None:
    """Quota moved before the record existed, or by hand: not gputide's to give back."""
    kube.add(clusterqueue("inference", "tide", 12))
    kube.add(clusterqueue("training", "tide", 12))
    stored = kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    kube.add(workload(stored, "h100"))
    assert corrected(controller(api, clock, sleeps), clock) == []
    assert quota(kube) == (12, 12)


def test_gputide_run_serves_the_corrections_counter_on_the_controllers_registry(kube: FakeKube, kubeconfig) -> None:
    from balancer.cli import build_parser
    from balancer.cmd.run import build_reconciler
    from balancer.metrics import ControllerMetrics

    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--metrics-port", "0",
                                      "--kubeconfig", kubeconfig, "--kueue-queues", "inference,training"])
    metrics = ControllerMetrics()
    build_reconciler(args, metrics)
    assert metrics.registry.get_sample_value(COUNTER, {"queue": "training"}) == 0


# ---- the record and the decision, pure ----

def _cq(name: str, gpus: int, loaned: dict | None = None, flavor: str = "h100") -> dict:
    cq = clusterqueue(name, "tide", gpus, flavor=flavor)
    if loaned:
        cq["metadata"]["annotations"] = {LOANS_ANNOTATION: json.dumps(loaned)}
    return cq


def test_the_loan_record_adds_up_moves_and_goes_once_nothing_is_out() -> None:
    cq = _cq("training", 8)
    assert loans(cq) == {} and loans_note(cq, "h100", 4) == '{"h100": 4}'
    cq = _cq("training", 12, {"h100": 4, "a100": 2})
    assert loans_note(cq, "h100", -4) == '{"a100": 2}'
    assert loans_note(_cq("training", 12, {"h100": 4}), "h100", -4) is None
    assert loans(_cq("x", 1, {"h100": "4", "a100": True, "b200": 3})) == {"b200": 3}   # not gputide's: skipped


def _job(name: str, ns: str, queue: str, workers: int, uid: str) -> dict:
    stored = job(name, ns, parallelism=workers, gpus=2, queue=queue)
    stored["metadata"]["uid"] = uid
    return stored


def test_a_job_whose_local_queue_feeds_another_cluster_queue_holds_nothing_of_trainings() -> None:
    ours, theirs = _job("a", "ml", "training-lq", 2, "u1"), _job("b", "web", "serving-lq", 4, "u2")
    admitted_b = _job("c", "web", "serving-lq", 1, "u3")
    loads = [workload(ours, "h100"), workload(admitted_b, "h100", cluster_queue="inference")]
    # b is not admitted anywhere, but its LocalQueue feeds inference: not training's; a holds 4 of training's 12
    assert held("training", ["h100"], loads, [ours, theirs, admitted_b]) == {"h100": 4}
    cut = excess(_cq("inference", 8, {"h100": -6}), _cq("training", 12, {"h100": 6}), loads, [ours, theirs])
    assert [(c.flavor, c.gpus, c.held) for c in cut] == [("h100", 6, 4)]
    # a Job not admitted, its LocalQueue unknown: counted as training's, in every flavor it could be admitted in
    lone = _job("d", "ml", "new-lq", 3, "u4")
    assert held("training", ["h100", "a100"], [], [lone]) == {"h100": 6, "a100": 6}
    stopped = _job("e", "ml", "training-lq", 3, "u5")
    stopped["metadata"]["labels"]["gputide.io/suspended"] = "true"
    assert held("training", ["h100"], [], [stopped]) == {"h100": 0}


def test_no_loan_recorded_on_both_sides_means_none_to_give_back() -> None:
    jobs = [_job("a", "ml", "training-lq", 1, "u1")]
    assert excess(_cq("inference", 8), _cq("training", 12, {"h100": 4}), [], jobs) == []
    assert excess(_cq("inference", 8, {"h100": -4}), _cq("training", 12), [], jobs) == []
    # each side records a different loan: the smaller counts
    cut = excess(_cq("inference", 8, {"h100": -2}), _cq("training", 12, {"h100": 4}), [], jobs)
    assert [(c.gpus, c.lent) for c in cut] == [(2, 2)]


@pytest.mark.parametrize(("loaned", "reserving", "room", "cut"), [
    pytest.param(6, 0, Spare(held=4, keep=4, now=8, most=8), (6, 4), id="the whole loan spare: all of it"),
    pytest.param(2, 0, Spare(held=4, keep=4, now=8, most=8), (2, 4), id="training's own quota spare too: the loan"),
    pytest.param(6, 10, Spare(held=4, keep=10, now=2, most=8), (2, 10), id="its status reserving more: beyond that"),
])
def test_trainings_spare_quota_is_reckoned_once_and_the_excess_is_the_loans_part_of_it(loaned, reserving, room,
                                                                                       cut) -> None:
    """`spare` says what training holds beyond its Jobs' needs, for the check (`excess`) and an owed give-back."""
    ours = _job("a", "ml", "training-lq", 2, "u1")   # 2 workers x 2 GPUs, admitted
    loads, training = [workload(ours, "h100")], _cq("training", 12, {"h100": loaned})
    training["status"] = {"flavorsReservation": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                                               "total": reserving}]}]}
    assert spare(training, ["h100"], loads, [ours]) == {"h100": room}
    found = excess(_cq("inference", 8, {"h100": -loaned}), training, loads, [ours])
    assert [(c.gpus, c.held) for c in found] == [cut]


# ---- only an excess that lasts goes back (`Sightings`), pure ----

INF, TRAIN = _cq("inference", 12, {"h100": -4}), _cq("training", 12, {"h100": 4})


def _cut(gpus: int, flavor: str = "h100") -> Excess:
    return Excess(flavor, gpus, lent=gpus, nominal=12, held=12 - gpus)


def _gpus(seen: Sightings, found: list[Excess], now: float, inference: dict = INF) -> list[tuple[str, int]]:
    return [(c.flavor, c.gpus) for c in seen.lasting(inference, TRAIN, found, now)]


@pytest.mark.parametrize("checks", [
    # (seconds since the first check, the excess that check found, what it gave back), check by check
    pytest.param([(0, 4, 0)], id="seen once: nothing"),
    pytest.param([(0, 4, 0), (180, 4, 4)], id="seen twice, the action deadline apart: given back"),
    pytest.param([(0, 6, 0), (180, 4, 4)], id="the second smaller: the least of the two"),
    pytest.param([(0, 4, 0), (180, 6, 4)], id="the second larger: the least of the two"),
    pytest.param([(0, 4, 0), (30, 4, 0), (60, 4, 0)], id="seen on three checks, for less than the deadline"),
    pytest.param([(0, 8, 0), (30, 2, 0), (180, 6, 2)], id="the least of every check since first seen"),
    pytest.param([(0, 4, 0), (30, 0, 0), (180, 4, 0), (360, 4, 4)], id="gone at one check (the Job resized): anew"),
    pytest.param([(0, 4, 0), (180, 4, 4), (210, 4, 0)], id="given back: what is left is seen anew"),
])
def test_an_excess_goes_back_only_once_seen_on_consecutive_checks_for_the_deadline(checks) -> None:
    seen = Sightings(ACTION_DEADLINE_S)
    got = [_gpus(seen, [_cut(found)] if found else [], now) for now, found, _ in checks]
    assert got == [[("h100", back)] if back else [] for _, _, back in checks]
    assert _gpus(Sightings(0), [_cut(4)], 0) == []   # with no age asked, still twice


def test_each_flavor_and_each_pair_of_queues_is_seen_apart_and_a_restart_sees_afresh() -> None:
    seen = Sightings(ACTION_DEADLINE_S)
    assert _gpus(seen, [_cut(4), _cut(2, "a100")], 0) == []
    assert _gpus(seen, [_cut(4)], 90) == []                         # a100's excess gone: forgotten
    other = _cq("inference-b", 12, {"h100": -4})
    assert _gpus(seen, [_cut(3)], 100, inference=other) == []      # another cohort pair: seen for the first time
    assert _gpus(seen, [_cut(4), _cut(2, "a100")], 200) == [("h100", 4)]
    assert _gpus(seen, [_cut(3)], 280, inference=other) == [("h100", 3)]
    assert _gpus(Sightings(ACTION_DEADLINE_S), [_cut(4)], 10_000) == []   # a restarted controller: seen once


def test_a_deferred_excess_is_logged_with_what_it_waits_for(caplog) -> None:
    seen = Sightings(ACTION_DEADLINE_S)
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_quota_drift"):
        seen.lasting(INF, TRAIN, [_cut(4)], 0)
        seen.lasting(INF, TRAIN, [_cut(4)], 30)
    assert [r.getMessage() for r in caplog.records] == [
        f"kueue quota excess deferred: training holds 8 of its 12 nvidia.com/gpu (h100), 4 of them lent by "
        f"inference: 4 beyond what its Jobs hold, seen for {age}s; given back once seen on consecutive checks for "
        "180s (a grow's Job resize may be under way)" for age in (0, 30)]
    with pytest.raises(ValueError, match="min_age_s"):
        Sightings(-1)
