"""Kueue quota moves of one cohort against what other writers leave on its queues: other controllers (shards,
successive leaders) acting between a move's writes and the gateway's retries of them (`_Api.update`, with
resourceVersion), and hand edits:

* a raise of the borrower not written yet (or landed unanswered: test_k8s_quota_unanswered.py) while another
  controller settled the move and moved again (the borrower's note of that move replacing this one's) was made again:
  it found its move not noted, raised the borrower a second time, and its note replacing the other's, the next
  settle completed that one again: (28, 10) for (22, 10). The lender's record says whether the move is still open
  (`KueueQuota._mark`);
* an `undo` move (quota lent ahead of a grow) whose lowering landed unanswered while another controller's settle rolled
  it back was lent a second time under its id: the history held the id twice, inference 4 GPUs short with an open
  record until the next settle. It is the rolled-back error now, nothing lowered again (`KueueQuota._lend`);
* a hand-edited annotation nested deeper than the JSON parser goes ("[" * 1000) raised RecursionError out of `apply`
  on every move. It is unreadable now, like any note that is not gputide's (`k8s_transfer.note_value`);
* but read so, the borrower's note of the moves it took (gputide.io/quota-received) noted nothing, and the next
  settle raised it again for the lender's last move, completed long before: (24, 12), 36 GPUs in a 32-GPU cohort, for
  one entry nested too deep under another lender's key. An entry not gputide's is dropped alone now, and a settle
  that cannot read what the borrower noted of its lender refuses, a temporary error (`k8s_transfer.unreadable`);
* a raise refused with an answer was rolled back without first noting the move void on the borrower (only a raise
  that may have landed unanswered was fenced so): another shard's settle that had found the move open raised the
  borrower all the same, the lender given back too: (20, 16). The roll back always notes it void first now
  (`KueueQuota._roll_back`);
* a raise whose lender's record and history no longer said whether another controller had completed the move
  (hand-edited) was not made, and taken as settled: the action reported applied, the cohort 4 GPUs short with only a
  log line saying so. It is the `Untold` error now, which the action's result carries (`KueueQuota._settled_since`)."""

from __future__ import annotations

import functools
import json
import logging
import threading

import pytest
from fakeapi import FakeKube, clusterqueue, job
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry
from test_k8s_quota_owed_lender import unanswered_lowering
from test_k8s_quota_restart import QUEUES, cohort, controller, quota, scale
from test_k8s_quota_unanswered import unanswered_then

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_quota_patch import OWN_LENDING_ANNOTATION, SET_LENDING_ANNOTATION
from balancer.actuate.k8s_quota_writes import MOVES_ANNOTATION
from balancer.actuate.k8s_transfer import (
    LOANS_ANNOTATION,
    RECEIVED,
    RECEIVED_ANNOTATION,
    TRANSFER_ANNOTATION,
    VOID,
    Transfer,
    last_move,
    note_value,
)
from balancer.errors import PermanentActuationError

DEEP = "[" * 1000 + "]" * 1000


def notes(kube: FakeKube, queue: str) -> dict:
    return kube.get("clusterqueues", queue)["metadata"].get("annotations") or {}


def annotate(kube: FakeKube, queue: str, values: dict) -> None:
    kube.mutate("clusterqueues", queue, "", {"metadata": {"annotations": values}})


def shards(kube: FakeKube, api, clock, sleeps):
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 16))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    return controller(api, clock, sleeps), controller(api, clock, sleeps)


def test_a_raise_another_shard_settled_and_moved_on_before_it_was_written_is_not_made(
        kube: FakeKube, api, clock, sleeps) -> None:
    """No failure at all: between A's lowering of training and A's read of inference to raise it, B's housekeeping
    completes A's move (raising inference) and B shrinks (its note replacing A's on inference)."""
    a, b = shards(kube, api, clock, sleeps)
    real_patch, real_get, lowered = a.api.custom.patch_cluster_custom_object, a.api.custom.get_cluster_custom_object, []

    @functools.wraps(real_patch)
    def patch(*args, **kwargs):
        out = real_patch(*args, **kwargs)
        lowered.append(args[3] == "training")
        return out

    @functools.wraps(real_get)
    def get(*args, **kwargs):
        if args[3] == "inference" and lowered == [True]:
            lowered.append(False)
            b.housekeeping()
            assert scale(b, 1, previous=2).outcome is Outcome.APPLIED
        return real_get(*args, **kwargs)

    a.api.custom.patch_cluster_custom_object, a.api.custom.get_cluster_custom_object = patch, get
    assert scale(a, 2).outcome is Outcome.APPLIED
    a.housekeeping()
    b.housekeeping()
    assert quota(kube) == (22, 10)


@pytest.mark.parametrize(("undo", "noted", "record", "history", "raised", "said"), [
    pytest.param(False, "w", "x", ["w", "x"], True, RECEIVED, id="its note still the one seen: open, raised"),
    pytest.param(False, "z", "x", ["w", "x"], True, RECEIVED, id="another note, the lender's record ours: raised"),
    pytest.param(False, "x", "x", ["w", "x"], False, RECEIVED, id="noted already: not raised again"),
    pytest.param(False, "z", "z", ["x", "z"], False, RECEIVED, id="settled since, the lender moved on: completed"),
    pytest.param(False, "z", "z", ["z"], False, None, id="another record, its id not in the history: cannot tell"),
    pytest.param(False, "z", None, None, False, None, id="no record, no history (hand-edited): cannot tell"),
    pytest.param(True, "z", "z", ["x", "z"], False, VOID, id="undo settled since: taken as rolled back"),
    pytest.param(True, "w", "x", ["w", "x"], False, VOID, id="undo, its note the one seen: fenced"),
])
def test_the_borrower_is_raised_only_while_the_lenders_record_is_the_moves(
        kube: FakeKube, api, clock, sleeps, caplog, undo, noted, record, history, raised, said) -> None:
    """`_mark` (A seeing inference's note of training's moves at "w" when it found move x open) in every order the
    other controllers' settles and moves may leave the two queues in; "fenced": the roll back's VOID note; "cannot
    tell": not raised, and not said settled either (None: the permanent error, logged)."""
    a, _ = shards(kube, api, clock, sleeps)
    move = Transfer("x", "inference", "h100", 4, undo)
    annotate(kube, "inference", {RECEIVED_ANNOTATION: json.dumps({"training": {"id": noted, "state": RECEIVED}})})
    last = None if record is None else move if record == "x" else Transfer(record, "inference", "h100", 2)
    annotate(kube, "training", {TRANSFER_ANNOTATION: last.note() if last else None,
                                MOVES_ANNOTATION: json.dumps(history) if history else None})
    with caplog.at_level(logging.ERROR):
        if said is None:
            with pytest.raises(PermanentActuationError, match="cannot be told"):
                a.kueue._mark("training", move, RECEIVED, "w")
        else:
            assert a.kueue._mark("training", move, VOID if undo and noted == "w" else RECEIVED, "w") == said
    assert quota(kube)[0] == (20 if raised else 16)
    assert ("not raised" in caplog.text) == (history == ["z"] or history is None)


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


@pytest.mark.parametrize("edit", [
    pytest.param(lambda got: {**got, "legacy": {"id": "q", "state": "in", "x": [[[["deep"]]]]}},
                 id="another lender's entry nested too deep"),
    pytest.param(lambda got: {**got, "training": {**got["training"], "x": [[[["deep"]]]]}},
                 id="the lender's own entry nested too deep"),
    pytest.param(lambda got: {**got, "training": "in"}, id="the lender's own entry not gputide's"),
    pytest.param(lambda got: DEEP, id="the whole note too deep for the parser"),
    pytest.param(lambda got: "not json", id="the whole note not JSON"),
])
def test_a_borrowers_hand_edited_note_is_not_a_completed_move_raised_again(
        kube: FakeKube, api, clock, sleeps, edit) -> None:
    """A's shrink completed (training's record stays as its last move, inference notes it received); then a hand edit
    of inference's note. The next controller's housekeeping took the move as open and raised inference again."""
    a, b = shards(kube, api, clock, sleeps)
    assert scale(a, 2).outcome is Outcome.APPLIED   # frees 4
    assert quota(kube) == (20, 12)
    edited = edit(json.loads(notes(kube, "inference")[RECEIVED_ANNOTATION]))
    annotate(kube, "inference", {RECEIVED_ANNOTATION: edited if isinstance(edited, str) else json.dumps(edited)})
    said = b.housekeeping()
    assert quota(kube) == (20, 12)
    assert not [note for note in said if "kueue" in note], said   # the loans notes tell it was raised
    assert scale(b, 1, previous=2).outcome is Outcome.APPLIED   # training's next move is made
    b.housekeeping()
    assert quota(kube) == (22, 10)
    if "legacy" in (edited if isinstance(edited, dict) else {}):   # only the bad entry is dropped, kept as it was
        assert json.loads(notes(kube, "inference")[RECEIVED_ANNOTATION])["legacy"] == edited["legacy"]


def test_a_refused_raise_is_rolled_back_fenced_against_another_shards_settle(
        kube: FakeKube, api, clock, sleeps) -> None:
    """A moves 4 GPUs training -> inference (not owed: a capacity move, a grow's quota given back). B's housekeeping
    finds the move open and reads inference to raise it; A's raise is refused with an answer (422), and A rolls the
    move back, training given back, before B's patch is sent (on the resourceVersion B read)."""
    a, b = shards(kube, api, clock, sleeps)
    real_patch, real_get = a.api.custom.patch_cluster_custom_object, b.api.custom.get_cluster_custom_object
    read, closed, out, b_reads = threading.Event(), threading.Event(), {}, []

    def settle() -> None:
        try:
            out["b"] = b.kueue.settle("training")
        except Exception as err:   # noqa: BLE001 - the assertion below says what it was
            out["b"] = err

    @functools.wraps(real_get)
    def get(*args, **kwargs):   # B's
        got = real_get(*args, **kwargs)
        if args[3] == "inference" and len(b_reads) < 2:
            b_reads.append(True)
            if len(b_reads) == 2:   # its raise's read (the first: its settle's): sent once A is done
                read.set()
                assert closed.wait(10)
        return got

    @functools.wraps(real_patch)
    def patch(*args, **kwargs):   # A's
        if args[3] == "inference" and "b" not in out and "thread" not in out:
            out["thread"] = threading.Thread(target=settle)
            out["thread"].start()
            assert read.wait(10)
            raise ApiException(status=422, reason="Invalid")
        got = real_patch(*args, **kwargs)
        if args[3] == "training" and last_move(kube.get("clusterqueues", "training")) is None:
            closed.set()   # given back
        return got

    a.api.custom.patch_cluster_custom_object, b.api.custom.get_cluster_custom_object = patch, get
    with pytest.raises(PermanentActuationError, match="422"):
        a.kueue.shift("training", "inference", 4)
    out["thread"].join(10)
    assert "rolled back" in out["b"], out["b"]
    assert quota(kube) == (16, 16)


@pytest.mark.parametrize(("workers", "lender", "borrower", "outcome", "moved"), [
    pytest.param(6, "inference", "training", Outcome.FAILED, (12, 16), id="a grow: failed"),
    pytest.param(2, "training", "inference", Outcome.APPLIED, (16, 12), id="a shrink: applied, the error its note"),
])
def test_a_raise_the_lender_cannot_tell_is_reported(kube: FakeKube, api, clock, sleeps, caplog, workers, lender,
                                                    borrower, outcome, moved) -> None:
    """Between A's lowering of the lender and its raise of the borrower, the lender's record and move history are
    removed by hand and the borrower notes another of its moves: nothing tells whether another controller completed
    the move. Not raised, and it was reported as a move made (a grow: as rolled back by another's settle); the grow
    fails now, a shrink (its workers stopped all the same) says the quota was not given back."""
    a, _ = shards(kube, api, clock, sleeps)
    real_patch, real_get, lowered = a.api.custom.patch_cluster_custom_object, a.api.custom.get_cluster_custom_object, []

    @functools.wraps(real_patch)
    def patch(*args, **kwargs):
        out = real_patch(*args, **kwargs)
        lowered.append(args[3] == lender)
        return out

    @functools.wraps(real_get)
    def get(*args, **kwargs):
        if args[3] == borrower and lowered == [True]:
            lowered.append(False)
            annotate(kube, lender, {TRANSFER_ANNOTATION: None, MOVES_ANNOTATION: None})
            annotate(kube, borrower, {RECEIVED_ANNOTATION: json.dumps({lender: {"id": "other", "state": RECEIVED}})})
        return real_get(*args, **kwargs)

    a.api.custom.patch_cluster_custom_object, a.api.custom.get_cluster_custom_object = patch, get
    with caplog.at_level(logging.ERROR):
        result = scale(a, workers)
    assert result.outcome is outcome and "cannot be told" in result.detail, result.detail
    assert "nothing moved" not in result.detail, result.detail   # training was lowered: the note must not deny it
    assert "GPUs short" in caplog.text
    assert quota(kube) == moved


def test_a_raise_refused_for_good_is_rolled_back_though_the_fence_is_refused_too(kube: FakeKube, api, clock,
                                                                                   sleeps) -> None:
    """The borrower refuses every write (an admission webhook): its void note is refused like the raise, and no
    settle can raise it either, so the lender is given back unfenced, as before the fence was written always (left
    open, training stayed 4 GPUs short until the webhook let a settle complete the move)."""
    a, _ = shards(kube, api, clock, sleeps)
    kube.inject("PATCH", r"/clusterqueues/inference$", 422, count=10)
    with pytest.raises(PermanentActuationError, match="422"):
        a.kueue.shift("training", "inference", 4)
    assert quota(kube) == (16, 16) and TRANSFER_ANNOTATION not in notes(kube, "training")


# The /tmp/A8 audit of fca5ce0, which refused to settle wherever the borrower's note could not be read: a note deleted
# (as "mend it" asked) or emptied by hand still had the completed move raised again, the refusal blocked all quota work
# of the pair for good with a log line only (and a shrink's detail promised the next housekeeping would move what it
# owed), and a first move onto such a note stayed open. Where the note cannot tell, the loans notes now do
# (`k8s_transfer.raised_by_loans`); only where neither tells is the settle refused, shown in a gauge.
UNSETTLED = "gputide_kueue_quota_unsettled"


@pytest.mark.parametrize("edit", [None, "{}", json.dumps({"legacy": 1}), "not json"],
                         ids=["deleted", "emptied", "another key only", "not JSON"])
def test_a_completed_move_the_borrowers_note_lost_is_told_by_the_loans_notes(
        kube: FakeKube, api, clock, sleeps, edit) -> None:
    """A8 s1, s3, s4: training's shrink completed, then inference's note deleted or hand-edited. Deleted or emptied,
    the next housekeeping raised inference again: (24, 12), 36 GPUs in a 32-GPU cohort; not JSON, every settle was
    refused for good, the pair's grows and give-backs with it (the give-back owed, never made)."""
    a, b = shards(kube, api, clock, sleeps)
    assert scale(a, 2).outcome is Outcome.APPLIED
    assert quota(kube) == (20, 12)
    annotate(kube, "inference", {RECEIVED_ANNOTATION: edit})
    for _ in range(2):
        assert not [note for note in b.housekeeping() if "kueue" in note]
        assert quota(kube) == (20, 12)
    assert scale(b, 4, previous=2).outcome is Outcome.APPLIED   # grown back: inference -> training 4
    assert quota(kube) == (16, 16)
    shrink = scale(b, 1, previous=4)
    assert shrink.outcome is Outcome.APPLIED and "owed" not in shrink.detail, shrink.detail
    assert quota(kube) == (22, 10) and b.kueue.owes("training") == 0


@pytest.mark.parametrize(("queue", "edit", "undo", "settled"), [
    ("inference", DEEP, False, (20, 12)),        # a shrink's give-back: completed
    ("training", "not json", True, (16, 16)),    # quota lent ahead of a grow: rolled back
])
def test_a_first_move_onto_a_hand_edited_note_is_settled(kube: FakeKube, api, clock, sleeps, queue, edit, undo,
                                                          settled) -> None:
    """A8 s2: the borrower's note hand-edited before any move, then a move whose raise (and fence) fail: the settle
    refused for good, training lowered (16, 12) or inference (12, 16), with an open record."""
    a, b = shards(kube, api, clock, sleeps)
    annotate(kube, queue, {RECEIVED_ANNOTATION: edit})
    fault = kube.inject("PATCH", rf"/clusterqueues/{queue}$", 500, count=40)
    scale(a, 6 if undo else 2)
    lender = "inference" if undo else "training"
    assert last_move(kube.get("clusterqueues", lender)).undo is undo
    assert quota(kube) == ((12, 16) if undo else (16, 12))
    fault.remaining = 0
    said = [note for note in b.housekeeping() if "kueue" in note]
    assert quota(kube) == settled, said
    assert any(("rolled back" if undo else "completed") in note for note in said), said
    assert not [note for note in b.housekeeping() if "kueue" in note]


def test_a_settle_neither_note_tells_is_refused_and_shown(kube: FakeKube, api, clock, sleeps, caplog) -> None:
    """Neither inference's note (not JSON) nor the loans notes (hand-edited) tell whether training's give-back was
    raised: the settle is refused, logged, and `gputide_kueue_quota_unsettled{queue="training"}` is 1 until the notes
    are mended; a shrink meanwhile says its give-back is not made until then."""
    a, _ = shards(kube, api, clock, sleeps)
    registry = CollectorRegistry()
    b = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=QUEUES, registry=registry)
    assert registry.get_sample_value(UNSETTLED, {"queue": "training"}) == 0
    assert scale(a, 2).outcome is Outcome.APPLIED
    annotate(kube, "inference", {RECEIVED_ANNOTATION: "not json", LOANS_ANNOTATION: json.dumps({"h100": 9})})
    with caplog.at_level(logging.ERROR):
        said = [note for note in b.housekeeping() if "kueue" in note]
    assert quota(kube) == (20, 12)
    assert said and all("not settled" in note and "neither 0" in note for note in said), said
    assert "not settled" in caplog.text
    assert registry.get_sample_value(UNSETTLED, {"queue": "training"}) == 1
    shrink = scale(b, 1, previous=2)
    assert "nor is any give-back owed made" in shrink.detail, shrink.detail
    annotate(kube, "inference", {LOANS_ANNOTATION: json.dumps({"h100": 4})})   # mended by hand
    b.housekeeping()
    assert registry.get_sample_value(UNSETTLED, {"queue": "training"}) == 0
    assert quota(kube) == (22, 10) and b.kueue.owes("training") == 0


def test_a_refused_settles_gauge_goes_back_to_0_when_its_queue_is_deleted(kube: FakeKube, api, clock,
                                                                          sleeps) -> None:
    """A lender whose settle is refused (`unsettled`, gauge 1) and which is then deleted has no move left to settle:
    housekeeping skipped the missing queue before setting its gauge, which read 1 for good."""
    a, _ = shards(kube, api, clock, sleeps)
    registry = CollectorRegistry()
    b = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=QUEUES, registry=registry)
    assert scale(a, 2).outcome is Outcome.APPLIED
    annotate(kube, "inference", {RECEIVED_ANNOTATION: "not json", LOANS_ANNOTATION: json.dumps({"h100": 9})})
    b.housekeeping()
    assert registry.get_sample_value(UNSETTLED, {"queue": "training"}) == 1
    kube.delete("clusterqueues", "training")
    b.housekeeping()
    assert registry.get_sample_value(UNSETTLED, {"queue": "training"}) == 0
    assert "training" not in b.kueue.unsettled
