"""A Kueue quota move the queues can no longer tell about (`k8s_quota_writes.Untold`: its lender lowered, its
borrower not raised, the lender's record and move history hand-edited away) was said only in the action's detail
(or a housekeeping note) and the log: nothing an operator could alert on, though the cohort may be the move's GPUs
short until someone checks both queues by hand. It is counted now, by the lending queue, where it is raised (each
caller catches it its own way): `gputide_kueue_quota_untold_total{queue}` (`k8s_quota.untold_counter`), both queues'
series at 0 from the start so the first one shows as an increase."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry
from test_k8s_quota_races import annotate, shards
from test_k8s_quota_restart import QUEUES, quota, scale

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_quota import KueueQuota, Untold
from balancer.actuate.k8s_quota_writes import MOVES_ANNOTATION
from balancer.actuate.k8s_transfer import RECEIVED, RECEIVED_ANNOTATION, TRANSFER_ANNOTATION, Transfer

UNTOLD = "gputide_kueue_quota_untold_total"


def counted(registry: CollectorRegistry) -> dict[str, float | None]:
    return {q: registry.get_sample_value(UNTOLD, {"queue": q}) for q in QUEUES}


def forget_between_the_writes(kube: FakeKube, custom, lender: str, borrower: str) -> None:
    """Once the lender's lowering is written, before the borrower is read to be raised: the lender's record and move
    history removed by hand, the borrower noting another move of the lender."""
    steps = {"lowered": False, "edited": False}
    patch, get = custom.patch_cluster_custom_object, custom.get_cluster_custom_object

    def patched(*args, **kwargs):
        steps["lowered"] = steps["lowered"] or args[3] == lender
        return patch(*args, **kwargs)

    def read(*args, **kwargs):
        if args[3] == borrower and steps["lowered"] and not steps["edited"]:
            steps["edited"] = True
            annotate(kube, lender, {TRANSFER_ANNOTATION: None, MOVES_ANNOTATION: None})
            annotate(kube, borrower, {RECEIVED_ANNOTATION: json.dumps({lender: {"id": "other", "state": RECEIVED}})})
        return get(*args, **kwargs)

    custom.patch_cluster_custom_object, custom.get_cluster_custom_object = patched, read


@pytest.mark.parametrize(("lender", "borrower", "undo", "moved"), [
    pytest.param("inference", "training", True, (12, 16), id="quota lent ahead of a grow"),
    pytest.param("training", "inference", False, (16, 12), id="a shrink's give-back"),
])
def test_a_move_the_lender_cannot_tell_is_counted_by_its_lender(kube: FakeKube, api, clock, sleeps, lender, borrower,
                                                                undo, moved) -> None:
    """Between the lowering and the raise, the lender's record and history are removed by hand and the borrower
    notes another of its moves (test_k8s_quota_races.test_a_raise_the_lender_cannot_tell_is_reported): not raised,
    the `Untold` error, and now its lender's series is 1."""
    a, _ = shards(kube, api, clock, sleeps)
    registry = CollectorRegistry()
    kueue = KueueQuota(a.api, registry=registry, queues=QUEUES)
    assert counted(registry) == {"inference": 0, "training": 0}
    forget_between_the_writes(kube, a.api.custom, lender, borrower)
    with pytest.raises(Untold, match="cannot be told"):
        kueue.shift(lender, borrower, 4, undo=undo, owed=not undo)
    assert quota(kube) == moved
    assert counted(registry) == {lender: 1, borrower: 0}


@pytest.mark.parametrize(("record", "history", "told"), [
    pytest.param("z", ["x", "z"], True, id="settled since, the lender moved on: told"),
    pytest.param("z", ["z"], False, id="another record, its id not in the history"),
    pytest.param(None, None, False, id="no record, no history"),
])
def test_only_a_move_the_lender_cannot_tell_is_counted(kube: FakeKube, api, clock, sleeps, record, history,
                                                       told) -> None:
    """`_mark` of training's move x, open when seen with inference noting "w", inference noting "z" now: counted
    only where training's record and history no longer say whether another controller settled x."""
    a, _ = shards(kube, api, clock, sleeps)
    registry = CollectorRegistry()
    kueue = KueueQuota(a.api, registry=registry, queues=QUEUES)
    move = Transfer("x", "inference", "h100", 4, False)
    annotate(kube, "inference", {RECEIVED_ANNOTATION: json.dumps({"training": {"id": "z", "state": RECEIVED}})})
    last = Transfer(record, "inference", "h100", 2) if record else None
    annotate(kube, "training", {TRANSFER_ANNOTATION: last.note() if last else None,
                                MOVES_ANNOTATION: json.dumps(history) if history else None})
    if told:
        assert kueue._mark("training", move, RECEIVED, "w") == RECEIVED
    else:
        with pytest.raises(Untold):
            kueue._mark("training", move, RECEIVED, "w")
    assert counted(registry) == {"inference": 0, "training": 0 if told else 1}



def test_the_actuators_registry_serves_it(kube: FakeKube, api, clock, sleeps) -> None:
    """As `gputide run` builds it (test_k8s_metrics_contract): the actuator's own `KueueQuota` counts on its
    registry, which is the controller's; the action that found the move untold is what shows it."""
    shards(kube, api, clock, sleeps)
    registry = CollectorRegistry()
    a = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=QUEUES, registry=registry)
    assert counted(registry) == {"inference": 0, "training": 0}
    forget_between_the_writes(kube, a.api.custom, "training", "inference")
    assert "cannot be told" in scale(a, 2).detail
    assert counted(registry) == {"inference": 0, "training": 1}
