"""The durable record of a Kueue quota move between two ClusterQueues: pure decisions on the queues' JSON.

Moving GPU nominalQuota is two writes (the lender lowered, the borrower raised). A controller that dies between
them would leave the cohort short, with nothing on the cluster saying so. So each write says what it is part of
(`k8s_quota.KueueQuota.shift`):

1. the lender is lowered, and in the same patch it records the move, annotation `gputide.io/quota-transfer`
   (`{"id", "to", "flavor", "gpus", "undo"}`: its last move);
2. the borrower is raised, and in the same patch it notes the move's id as received from that lender (annotation
   `gputide.io/quota-received`, `{lender: {"id", "state": "in"}}`).

A lender's record is settled once its borrower notes the id; one that is not (a restart, a failure, an unanswered
write between the two) is settled by `KueueQuota.settle`, each step a read-modify-write with resourceVersion that
skips what is already done, so a restart anywhere converges with nothing applied twice: the borrower is raised and
noted (completed), or, for a record with `undo` (quota lent ahead of a Job's grow, which waits for the borrower's
raise and so has not happened), the borrower noted "void" and the lender given its quota back in the patch that
removes the record (rolled back). "void" also fences off a raise still in flight from a dead controller, or from
another controller's settle that found the move open (every roll back notes it before giving the lender back): the
note changes the borrower's resourceVersion, so that patch is refused, and no raise lands on an id noted "void".
A lender makes one move at a time (the next one is made once its last is settled), so the borrower keeps one id per
lender: a raise that finds it noting another of the lender's moves than when the move was found open (`noted_id`)
reads the lender, and with the record there no longer the move's, another controller settled it and the lender moved
on: it is not raised again (`KueueQuota._mark`). Where the borrower's note cannot say what it noted of a lender
(hand-edited, deleted, no entry), the lender's last move is not taken as open for that (it was settled long before,
and would be completed again): the two queues' loans notes, below, say whether it was raised (`raised_by_loans`),
and where they cannot either the settle refuses until the notes are mended. Another lender's entry that is not
gputide's is dropped alone on reading, and kept as it is when the note is written.

The record names the lender's last move only; beside it, in the same patch that lowers the lender, its history of
the last moves' ids (`k8s_quota_writes.MOVES_ANNOTATION`, `gputide.io/quota-moves`) says whether a lowering that got no
answer landed once later moves replaced its record. What gputide's moves add up to is kept apart, on each queue, in
the same patch that changes its nominalQuota (so it is never out of step with it, whatever the next death):
annotation `gputide.io/quota-loans`, `{flavor: GPUs}`, the net nominalQuota gputide's moves brought into the queue
(negative: sent out), the key removed at 0 (`loans`, `loans_note`). An operator's own edit of nominalQuota is not in
it. The per-cycle check of what training's Jobs hold (`k8s_quota_drift`) reads the quota lent to training from it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

Json = dict[str, Any]
TRANSFER_ANNOTATION = "gputide.io/quota-transfer"   # on the lender: the move under way
RECEIVED_ANNOTATION = "gputide.io/quota-received"   # on the borrower: the moves it took ("in") or refused ("void")
LOANS_ANNOTATION = "gputide.io/quota-loans"      # on both: net GPUs gputide's moves brought in (< 0: sent out)
RECEIVED, VOID = "in", "void"


@dataclass(frozen=True)
class Transfer:
    """`gpus` of `flavor` nominalQuota moving from the queue that carries the record to `to`; `undo`: roll back,
    not complete, when it is found with the borrower not raised."""

    id: str
    to: str
    flavor: str
    gpus: int
    undo: bool = False

    def note(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _notes(cq: Json) -> Json:
    return (cq.get("metadata") or {}).get("annotations") or {}


NOTE_DEPTH = 4   # gputide's notes nest 2 deep: a value deeper is hand-edited (`note_value`)
_UNREADABLE = object()   # an annotation that is not JSON, or nested deeper than the parser goes (`_loaded`)


def _loaded(notes: Json, key: str) -> Any:
    """The JSON value of the annotation `key`, None without one, `_UNREADABLE` where it cannot be parsed."""
    try:
        return json.loads(notes.get(key) or "null")
    except (ValueError, RecursionError):
        return _UNREADABLE


def _within(value: Any, depth: int) -> bool:
    """Whether `value` nests no deeper than `depth`: walked level by level, no recursion (what is left after `depth`
    levels is nested deeper)."""
    level = [value]
    for _ in range(depth):
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x if isinstance(x, list) else ())]
    return not level


def note_value(notes: Json, key: str) -> Any:
    """The JSON value of the annotation `key` among a queue's `notes`; None without one, or with one that is not
    gputide's: not JSON, or nested deeper than `NOTE_DEPTH` ("[" * 1000, hand-edited, raises RecursionError out of
    the parser, and one just shallow enough for it out of what walks it next: `str`, `json.dumps`). Every note of
    these queues is read through it (the borrower's notes of the moves it took entry by entry: `_received`), so a
    hand edit makes a note unreadable, never a move (`apply`) fail."""
    value = _loaded(notes, key)
    return None if value is _UNREADABLE or not _within(value, NOTE_DEPTH) else value


def last_move(cq: Json) -> Transfer | None:
    """The last move a ClusterQueue lent quota for, settled or not (`state`); None without one (or with a record that
    is not gputide's: hand-edited, unreadable)."""
    raw = note_value(_notes(cq), TRANSFER_ANNOTATION)
    try:
        record = Transfer(str(raw["id"]), str(raw["to"]), str(raw["flavor"]), int(raw["gpus"]),
                          bool(raw.get("undo", False)))
    except (ValueError, TypeError, KeyError):
        return None
    return record if record.id and record.to and record.gpus > 0 else None


def _entry(got: Any) -> bool:
    """Whether a borrower's note of one lender's moves is one gputide writes: {"id", "state"}, no deeper."""
    return isinstance(got, dict) and got.get("id") is not None and _within(got, NOTE_DEPTH - 1)


def _received(cq: Json) -> Json:
    """The borrower's notes of the moves it took, by lender: a hand-edited entry (`_entry`) is dropped, only it, so
    one lender's note stays readable whatever was written under another's."""
    seen = _loaded(_notes(cq), RECEIVED_ANNOTATION)
    return {k: v for k, v in seen.items() if _entry(v)} if isinstance(seen, dict) else {}


def state(borrower: Json, lender: str, move: str) -> str | None:
    """What the borrower noted of the lender's move `move`: RECEIVED, VOID, or None (not noted: open)."""
    got = _received(borrower).get(lender)
    return str(got.get("state")) if got is not None and got.get("id") == move else None   # a dict with an id (`_entry`)


def noted_id(borrower: Json, lender: str) -> str | None:
    """The id of the lender's move the borrower noted last (one per lender: RECEIVED or VOID); None: none."""
    got = _received(borrower).get(lender)
    return None if got is None else str(got["id"])   # `_received` keeps only entries with an id (`_entry`)


def received_note(borrower: Json, lender: str, move: str, noted: str) -> str:
    """The borrower's `gputide.io/quota-received` value once it notes the lender's `move` as `noted`. Another
    lender's entry that is not gputide's is kept as it is (dropped, that lender's last move would look open, and be
    completed again), unless nested too deep to be written back."""
    seen = _loaded(_notes(borrower), RECEIVED_ANNOTATION)
    note = {lender: {"id": move, "state": noted}}
    try:
        return json.dumps({**(seen if isinstance(seen, dict) else {}), **note}, sort_keys=True)
    except RecursionError:
        return json.dumps({**_received(borrower), **note}, sort_keys=True)


def with_notes(patch: Json, notes: dict[str, str | None]) -> Json:
    """`patch` (a merge patch) with `notes` added to its metadata.annotations."""
    meta = dict(patch.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
    return {**patch, "metadata": meta}


def loans(cq: Json) -> dict[str, int]:
    """The net GPU nominalQuota gputide's moves brought into the ClusterQueue, by flavor (negative: sent out); {} with
    no record (or one that is not gputide's), an entry that is not a whole number skipped."""
    raw = note_value(_notes(cq), LOANS_ANNOTATION)
    out = {}
    for flavor, gpus in (raw.items() if isinstance(raw, dict) else ()):
        if isinstance(gpus, int) and not isinstance(gpus, bool):
            out[str(flavor)] = gpus
    return out


def _loans_read(cq: Json) -> bool:
    """Whether the queue's `gputide.io/quota-loans` says all it holds: none, or gputide's {flavor: GPUs} whole."""
    if not _notes(cq).get(LOANS_ANNOTATION):
        return True
    raw = note_value(_notes(cq), LOANS_ANNOTATION)
    return isinstance(raw, dict) and all(isinstance(n, int) and not isinstance(n, bool) for n in raw.values())


def raised_by_loans(lender: Json, borrower: Json, lender_name: str, move: Transfer) -> tuple[bool | None, str]:
    """Whether the lender's last `move` (its record there) raised the borrower, told by the two queues' loans notes
    where the borrower's note of the lender cannot tell (hand-edited, deleted, no entry: `noted_id` None); with why
    not where they cannot either. Each note is written in the patch that changes its queue's nominalQuota, and
    gputide's moves between the two are all that change them: the lowering takes `gpus` off the lender's, the raise
    adds them to the borrower's, a roll back gives them back to the lender's. So between moves the two add up to 0,
    and with the move lowered (its record there) to 0 once raised, to -gpus while not (an `undo` move alike). Not
    where either note is not gputide's (hand-edited), nor while the borrower's own last move is not noted received
    on the lender (its loan, open, is in the sum too), nor for any other sum (hand edits, a loan the cohort lost)."""
    if not (_loans_read(lender) and _loans_read(borrower)):
        return None, "a gputide.io/quota-loans note of the two is hand-edited"
    other = last_move(borrower)
    if other is not None and state(lender, move.to, other.id) != RECEIVED:
        return None, f"{move.to}'s own move {other.id} is open too (its loan in the loans notes' sum)"
    out, back = loans(lender).get(move.flavor, 0), loans(borrower).get(move.flavor, 0)
    if out + back in (0, -move.gpus):
        return out + back == 0, ""
    return None, (f"the loans notes ({lender_name} {out}, {move.to} {back} x {move.flavor}) add up to neither 0 "
                  f"(raised) nor -{move.gpus} (open)")


def loans_note(cq: Json, flavor: str, delta: int) -> str | None:
    """The queue's `gputide.io/quota-loans` value once a move changes its `flavor` nominalQuota by `delta`; None (the
    annotation removed) once nothing is out either way."""
    after = loans(cq)
    after[flavor] = after.get(flavor, 0) + delta
    kept = {fl: n for fl, n in after.items() if n}
    return json.dumps(kept, sort_keys=True) if kept else None
