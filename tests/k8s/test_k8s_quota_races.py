"""Kueue quota moves of one cohort against what other writers leave on its queues: other controllers (shards,
successive leaders) acting between a move's writes and the gateway's retries of them (`_Api.update`, with
resourceVersion), and hand edits:

* an `undo` move (quota lent ahead of a grow) whose lowering landed unanswered while another controller's settle rolled
  it back was lent a second time under its id: the history held the id twice, inference 4 GPUs short with an open
  record until the next settle. It is the rolled-back error now, nothing lowered again (`KueueQuota._lend`);
* a hand-edited annotation nested deeper than the JSON parser goes ("[" * 1000) raised RecursionError out of `apply`
  on every move. It is unreadable now, like any note that is not gputide's (`k8s_transfer.note_value`)."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube
from test_k8s_quota_owed_lender import unanswered_lowering
from test_k8s_quota_restart import QUEUES, cohort, controller, quota, scale
from test_k8s_quota_unanswered import unanswered_then

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_quota import (
    MOVES_ANNOTATION,
    OWN_LENDING_ANNOTATION,
    SET_LENDING_ANNOTATION,
)
from balancer.actuate.k8s_transfer import (
    LOANS_ANNOTATION,
    RECEIVED_ANNOTATION,
    TRANSFER_ANNOTATION,
    note_value,
)

DEEP = "[" * 1000 + "]" * 1000


def notes(kube: FakeKube, queue: str) -> dict:
    return kube.get("clusterqueues", queue)["metadata"].get("annotations") or {}


def annotate(kube: FakeKube, queue: str, values: dict) -> None:
    kube.mutate("clusterqueues", queue, "", {"metadata": {"annotations": values}})


def test_an_undo_moves_landed_lowering_another_shard_rolled_back_is_not_lent_again(
        kube: FakeKube, api, clock, sleeps) -> None:
    """A's grow (4 -> 6 workers) lowers inference, an undo move; the patch lands unanswered, and before the gateway's
    retry reads inference again B's housekeeping rolls the move back (training never raised). The retry lent it a
    second time under the same id: inference (12, 8), its history ["id", "id"], the record open until the next
    settle."""
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)

    def meanwhile() -> None:
        assert any("rolled back" in note for note in b.kueue.settle_all(QUEUES))

    unanswered_then(a, "inference", meanwhile)
    result = scale(a, 6)
    assert result.outcome is not Outcome.APPLIED and "rolled back" in result.detail
    assert quota(kube) == (16, 8) and TRANSFER_ANNOTATION not in notes(kube, "inference")
    history = json.loads(notes(kube, "inference")[MOVES_ANNOTATION])
    assert len(history) == len(set(history)) == 1
    assert a.housekeeping() == [] and quota(kube) == (16, 8)


@pytest.mark.parametrize(("queue", "key"), [
    ("training", MOVES_ANNOTATION), ("training", TRANSFER_ANNOTATION), ("inference", TRANSFER_ANNOTATION),
    ("inference", RECEIVED_ANNOTATION), ("training", LOANS_ANNOTATION),
    ("inference", LOANS_ANNOTATION), ("inference", OWN_LENDING_ANNOTATION), ("inference", SET_LENDING_ANNOTATION),
])
def test_a_hand_edited_annotation_nested_too_deep_is_unreadable_not_a_failed_move(
        kube: FakeKube, api, clock, sleeps, queue, key) -> None:
    cohort(kube)
    annotate(kube, queue, {key: DEEP})
    a = controller(api, clock, sleeps)
    assert scale(a, 2).outcome is Outcome.APPLIED   # frees 4
    a.housekeeping()
    assert quota(kube) == (20, 4)


def test_an_owed_give_back_is_made_past_a_history_nested_too_deep(kube: FakeKube, api, clock, sleeps) -> None:
    """The debt's payment reads training's history (`_lowered`), hand-edited too deep: made, not a RecursionError."""
    cohort(kube)
    annotate(kube, "training", {MOVES_ANNOTATION: DEEP})
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    tries = unanswered_lowering(a, landed=False)
    assert scale(a, 2).outcome is Outcome.APPLIED   # frees 4: nothing lowered, A owes them
    tries.extend([True] * 10)
    assert scale(b, 1, previous=2).outcome is Outcome.APPLIED   # frees 2
    a.housekeeping()
    assert quota(kube) == (22, 2) and a.kueue.owes("training") == 0


@pytest.mark.parametrize(("value", "read"), [
    ('{"training": {"id": "x", "state": "in"}}', {"training": {"id": "x", "state": "in"}}),
    ('["a", "b"]', ["a", "b"]),
    ("[[[[1]]]]", None),
    (DEEP, None),
    ("not json", None),
    (None, None),
])
def test_a_note_is_read_only_as_deep_as_gputide_writes_them(value, read) -> None:
    assert note_value({"k": value} if value is not None else {}, "k") == read
