"""Kueue's objects for the actuator's training scaling: a Job's Workloads, their activation, and GPU quota moves
between two ClusterQueues of a cohort.

`KueueQuota` reads a Job's Workloads and the ClusterQueues through the gateway's `_Api` and patches the queues'
`nvidia.com/gpu` nominalQuota in one ResourceFlavor; which flavor is decided by the pure rules of `k8s_kueue`
(the one Kueue admitted the Job under, else the only one both queues hold). The lender is lowered first, so the
cohort's total never exceeds what exists, and restored if raising the borrower fails. The two writes are made
durable by a record of the move on the lender, written in the patch that lowers it, and the move's id noted on the
borrower in the patch that raises it (`k8s_transfer`): a move a restart (or a failure) left open is settled,
completed or rolled back, by `settle`, before any other move of those queues and at `settle_all`; a lender's record is
replaced only once its move is settled (another controller's open move there refuses the next, never overwritten),
and a shrink's give-back whose raise failed is left open for `settle` to complete (`shift`'s `owed`), one whose
lowering failed (nothing moved, or perhaps landed unanswered) kept owed in the controller's memory and made by the
next `settle_all` as far as the queues' records and what training's Jobs leave say it is still owed (`_pay_one`: the
queues are shared with other shards and the next leader, which know nothing of the debt; the lender's history of its
last moves' ids, `MOVES_ANNOTATION`, says whether a lowering that got no answer landed once later moves replaced its
record). Each queue also keeps, in the patch that changes its quota, the net GPUs gputide's moves brought into it
(`k8s_transfer.loans`), and `reconcile` (every cycle) gives back to inference the part of training's loan its Jobs
no longer hold (`k8s_quota_drift`), so a grow that never happened, or one undone since, does not leave quota behind.

`set_active` stops and resumes a queued Job the way Kueue documents it, through its Workload's `spec.active`
(Kueue owns such a Job's `spec.suspend`: see `k8s_training`).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_kueue import JOB_UID_LABEL, admitted_flavor, choose_flavor, owned_by
from balancer.actuate.k8s_quota_drift import (
    Excess,
    Sightings,
    Spare,
    excess,
    nominal,
    reserved,
    spare,
    worth_reading,
)
from balancer.actuate.k8s_requests import quantity
from balancer.actuate.k8s_transfer import (
    LOANS_ANNOTATION,
    RECEIVED,
    RECEIVED_ANNOTATION,
    TRANSFER_ANNOTATION,
    VOID,
    Transfer,
    last_move,
    loans_note,
    note_value,
    noted_id,
    raised_by_loans,
    received_note,
    state,
    with_notes,
)
from balancer.actuate.kubernetes import (
    GPU_RESOURCE,
    KUEUE,
    KUEUE_WORKLOADS,
    MERGE_PATCH,
    Json,
    KubeTemporaryError,
    NotFoundError,
    _Api,
)
from balancer.errors import ActuationError, PermanentActuationError, TemporaryActuationError

log = logging.getLogger(__name__)


def corrections_counter(registry: CollectorRegistry | None, queues: tuple[str, str] | None) -> PromCounter:
    """`gputide_kueue_quota_corrections_total{queue}`: the quota lent to a training ClusterQueue beyond what its Jobs
    hold, given back (`KueueQuota.reconcile`), counted per correction; the training queue's series starts at 0.
    Without a registry, on one of its own (counted, not served)."""
    counter = PromCounter("gputide_kueue_quota_corrections", "Corrections of the Kueue quota lent to a training "
                          "ClusterQueue beyond what its Jobs hold, given back to inference, by the training queue.",
                          ["queue"], registry=registry if registry is not None else CollectorRegistry())
    if queues:
        counter.labels(queue=queues[1])
    return counter


def unsettled_gauge(registry: CollectorRegistry | None, queues: tuple[str, str] | None) -> PromGauge:
    """`gputide_kueue_quota_unsettled{queue}`: 1 while the settle of the lender `queue`'s last quota move is refused
    (`KueueQuota.unsettled`: neither its borrower's note nor the loans notes tell whether it was raised), so no quota
    moves between the two queues until the notes are mended by hand; else 0, both queues' series from the start.
    Without a registry, on one of its own (set, not served)."""
    gauge = PromGauge("gputide_kueue_quota_unsettled", "1 while the settle of the Kueue quota move a ClusterQueue "
                      "lent for is refused (the queues' notes cannot tell whether it was raised; mend them by hand), "
                      "by the lending queue.", ["queue"], registry=registry if registry is not None else
                      CollectorRegistry())
    for queue in queues or ():
        gauge.labels(queue=queue)
    return gauge


# the operator's lendingLimit of a ClusterQueue's GPU flavors while a loan holds it lower (JSON {flavor: limit}):
# Kueue wants lendingLimit <= nominalQuota, so lowering the quota lowers it, and giving the quota back restores it
OWN_LENDING_ANNOTATION = "gputide.io/own-lending-limits"
# beside it, the lendingLimit gputide wrote in each such flavor (JSON {flavor: limit}): a live lendingLimit that is
# not that one was written by someone else since (the operator lowering it during a loan), and is the own one now
SET_LENDING_ANNOTATION = "gputide.io/lending-limits-set"
# on a lender, beside its last move's record (`k8s_transfer`, which names that one only): the ids of its last
# `MOVES_KEPT` moves, oldest first (JSON list), in the patch that lowers it, so that an owed lowering that got no answer
# is known to have landed, or not, once later moves replaced its record (`_lowered`)
MOVES_ANNOTATION = "gputide.io/quota-moves"
MOVES_KEPT = 16


def _moves(cq: Json) -> list[str] | None:
    """The lender's move history (`MOVES_ANNOTATION`): None without one (records of an older gputide) or unreadable."""
    raw = note_value((cq.get("metadata") or {}).get("annotations") or {}, MOVES_ANNOTATION)
    return [str(i) for i in raw] if isinstance(raw, list) else None


def _lowered(move: str, before: str | None, moves: list[str] | None) -> bool | None:
    """Whether the lowering of the move `move`, written on a lender whose history then ended with `before` (None:
    none), landed, by the lender's history now (`moves`): True where it holds the id; False where it does not and
    still covers all that came after `before` (holds `before`, or, with none then, never dropped an id); else None."""
    if moves is None:
        return None
    if move in moves:
        return True
    return False if (before in moves if before is not None else len(moves) < MOVES_KEPT) else None


def _flavor_limits(notes: Json, key: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (note_value(notes, key) or {}).items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def _lending_limit(cq: Json, res: Json, flavor: str, nominal: int) -> Json:
    """Set `res`'s lendingLimit (if it has one) for a nominalQuota of `nominal`: the operator's own, clamped to
    `nominal`. The own one is the annotation's while the live lendingLimit is still the one gputide wrote (or none is
    recorded: a note of an older gputide), else the live one (the operator's, or nobody's clamp). Returns the
    metadata merge patch that keeps the operator's value and the one written while clamped and forgets them once
    restored ({} when the notes stay as they are)."""
    notes = (cq.get("metadata") or {}).get("annotations") or {}
    own, written = _flavor_limits(notes, OWN_LENDING_ANNOTATION), _flavor_limits(notes, SET_LENDING_ANNOTATION)
    clamped = False   # without a lendingLimit (none, or the operator removed it) nothing is kept
    if "lendingLimit" in res:
        live = int(quantity(res["lendingLimit"]))
        edited = flavor in written and written[flavor] != live   # someone else's lendingLimit since gputide's clamp
        kept = live if edited or flavor not in own else own[flavor]
        res["lendingLimit"], clamped = min(kept, nominal), kept > nominal
    after = {**own, flavor: kept} if clamped else {k: v for k, v in own.items() if k != flavor}
    after_set = {**written, flavor: nominal} if clamped else {k: v for k, v in written.items() if k != flavor}
    patch = {key: json.dumps(value, sort_keys=True) if value else None
             for key, value, was in ((OWN_LENDING_ANNOTATION, after, own), (SET_LENDING_ANNOTATION, after_set, written))
             if value != was}
    return {"metadata": {"annotations": patch}} if patch else {}


@dataclass(frozen=True)
class Debt:
    """A shrink's give-back owed by its lender, in this controller's memory (`KueueQuota.owed`)."""

    move: Transfer                     # its id the one its lowering was (or may have been) written with
    over: str | None = None            # the lender's last move as read for that lowering, which it would replace
    doubt: bool = False                # that lowering may have landed unanswered (`_Api.writes`)
    short_since: float | None = None   # since when training's Jobs hold part of it, this term (`KueueQuota._pay`)
    before: str | None = None          # the last id of the lender's move history as read then (`_lowered`)


class KueueQuota:
    def __init__(self, api: _Api, excess_min_age_s: float = ACTION_DEADLINE_S) -> None:
        self.api = api
        # `reconcile` gives back only an excess that lasts (`k8s_quota_drift`): as long as a grow's Job resize may take
        self.excess_seen = Sightings(excess_min_age_s)
        # shrinks' give-backs whose lowering failed (`shift`'s `owed`): lender -> its debts, made by the next
        # `settle_all` (`_pay`). The controller's memory only: a restart (or a new leader) forgets them; kept across
        # this controller's own terms as leader (`new_term`)
        self.owed: dict[str, list[Debt]] = {}
        # lenders whose last move's settle is refused, neither the borrower's note nor the loans notes telling whether
        # it was raised (`_told_by_loans`): `gputide_kueue_quota_unsettled{queue}` (`unsettled_gauge`)
        self.unsettled: set[str] = set()

    def new_term(self) -> None:
        """A new term as leader (`k8s_upkeep.Upkeep.recover`, before anything is settled): the memories that count
        time restart. Those are about the controller's last term: what it saw then says nothing of now, and another
        leader may have moved quota meanwhile (given a loan back, lent anew for a grow whose resize is under way,
        shrunk or grown training's Jobs). So the drift check's sightings are forgotten (`Sightings.forget`: nothing
        given back at the term's first check), and a debt's short part is timed from this term's first payment
        (`Debt.short_since`: not dropped on what training's Jobs held a term ago). The debts themselves are kept:
        paying one is safe whatever happened meanwhile (`_pay_one` reads the queues: the lender's move history,
        `MOVES_ANNOTATION`, tells a lowering that landed from one that did not, and only training's spare quota
        goes), and dropped, the GPUs a shrink freed would stay training's for good (the drift check gives back
        loans only)."""
        self.excess_seen.forget()
        self.owed = {lender: [replace(debt, short_since=None) for debt in debts] for lender, debts in self.owed.items()}

    def workloads(self, ns: str, name: str, job: Json) -> list[Json]:
        """The Job's Workloads (Kueue makes one per Job).

        Found by Kueue's `kueue.x-k8s.io/job-uid` label; a Workload without it (Kueue sets it only where the uid is
        a valid label value) is found by its owner reference, at the cost of listing the namespace's Workloads."""
        uid = job["metadata"].get("uid") or ""
        what = f"kueue workloads of job {ns}/{name}"
        items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns, "workloads",
                         label_selector=f"{JOB_UID_LABEL}={uid}").get("items") or []
        if not items:
            items = self.api(what, self.api.custom.list_namespaced_custom_object, *KUEUE_WORKLOADS, ns,
                             "workloads").get("items") or []
        return [w for w in items if owned_by(w, uid)]

    @staticmethod
    def admitted_flavor(ns: str, name: str, workloads: list[Json]) -> str | None:
        """The GPU flavor Kueue admitted the Job under, from its Workloads; None while it is not admitted."""
        return admitted_flavor(workloads, GPU_RESOURCE, f"{ns}/{name}")

    def set_active(self, ns: str, workloads: list[Json], active: bool) -> list[str]:
        """Set `spec.active` on those of the Workloads that differ; returns their names.

        Inactive, Kueue evicts a Workload (its quota released, its admission cleared) and suspends its Job, and
        keeps it so; active again, it is queued and its Job unsuspended once admitted. A Workload gone meanwhile
        is skipped when activating (Kueue replaced it by one that is active) and a temporary error when
        deactivating (its replacement is not deactivated yet)."""
        changed = []
        for wl in workloads:
            if ((wl.get("spec") or {}).get("active", True) is not False) == active:
                continue
            name = wl["metadata"]["name"]
            try:
                self.api(f"kueue workload {ns}/{name}", self.api.custom.patch_namespaced_custom_object,
                         *KUEUE_WORKLOADS, ns, "workloads", name, {"spec": {"active": active}},
                         _content_type=MERGE_PATCH)
            except NotFoundError as err:
                if not active:
                    raise KubeTemporaryError(f"kueue workload {ns}/{name} was replaced: {err}", 404) from err
                continue
            changed.append(name)
        return changed

    def check_queues(self, queues: tuple[str, str], flavor: str | None) -> tuple[str, str]:
        """(flavor, cohort) of a quota move between two ClusterQueues, read fresh: both must be in one cohort and
        hold GPU quota in `flavor` (None: in exactly one common flavor, `k8s_kueue.choose_flavor`)."""
        return _checked({q: self._read_queue(q) for q in queues}, flavor)

    def shift(self, from_queue: str, to_queue: str, gpus: int, flavor: str | None = None, undo: bool = False,
              keep: int | None = None, owed: bool = False) -> str:
        """Move `gpus` of nominalQuota (nvidia.com/gpu) in one ResourceFlavor from one ClusterQueue to another in
        the same cohort. Without `flavor`, the queues must hold GPU quota in exactly one common flavor (never a
        guess between several); with it, both must hold quota in it. Nothing changes when either is not so.

        A move of either queue left open is settled first (`settle`). The lender is lowered first, so the cohort's
        total never exceeds what exists, and records the move (`k8s_transfer`) in that patch; its lendingLimit is
        clamped to the new nominal quota (the operator's kept in the annotation `gputide.io/own-lending-limits`,
        put back when the quota comes back; the value gputide wrote kept in `gputide.io/lending-limits-set`, so a
        lendingLimit the operator changed since is theirs, never undone). If raising the borrower fails, the move is
        rolled back (best effort: else its record stays open, and the next `settle` finishes it: rolled back with
        `undo`, quota lent ahead of a change that did not happen; completed without). With `keep`, the lender, as
        read for its patch, must keep that many GPUs and what its status says its Workloads reserve, else nothing
        moves (a temporary error).

        With `owed` (quota that a change already made frees: a shrink's give-back, never `undo`), a failed raise is
        not rolled back: the move is left open, its record on the lender (written with the lowering) completed by
        the next settle (each cycle's housekeeping, or the next move of either queue), and the note returned says
        so. A temporary failure before that (the lender's write: nothing moved, or it landed unanswered) raises, the
        move kept owed in `owed` (`owes`) and made by the next `settle_all` (each cycle's housekeeping: `_pay`), as the
        same move: a lowering that landed unanswered is completed from its record, never made twice. Not by the next
        move: an action's calls stay those `k8s_budget` counts."""
        if gpus <= 0:
            raise PermanentActuationError(f"kueue quota shift: gpus must be > 0, got {gpus}")
        return self._shift(from_queue, Transfer(uuid.uuid4().hex[:12], to_queue, flavor or "", gpus, undo), keep, owed)

    def _shift(self, from_queue: str, move: Transfer, keep: int | None, owed: bool) -> str:
        """`shift`'s move, its id given (an owed move made again keeps its own) and its flavor "" until settled."""
        to_queue = move.to
        over: list[str | None] = []   # the lender's last move the lowering would replace, its history's last (`_lend`)
        lowering: list[str] = []      # the lowering, while its outcome is unknown (`_Api.writes`)
        try:
            read = {q: self._read_queue(q) for q in (from_queue, to_queue)}
            seen = last_move(read[from_queue])   # the lender's last move, settled next; this one's record replaces it
            settled = [note for q in read if (note := self._settle(q, read))]
            if settled:
                read = {q: self._read_queue(q) for q in read}
            flavor, cohort = _checked(read, move.flavor or None)
            move = replace(move, flavor=flavor)
            before = noted_id(read[to_queue], from_queue)   # the borrower's note of the lender's moves, before ours
            with self.api.writes(hand_up=True) as lowering:
                replaced = self._lend(from_queue, move, keep, seen.id if seen else None, over)
        except TemporaryActuationError:
            if owed and move.flavor:   # nothing moved, or a lowering unanswered: owed, made by the next settle
                last, before = over if over else (None, None)
                self.owed.setdefault(from_queue, []).append(Debt(move, last, bool(lowering), before=before))
            raise
        noted = RECEIVED   # what the borrower noted: VOID when another controller's settle rolled the move back
        # (`replaced`: another controller's settle completed it, before the lowering's retry read the lender; `_lend`)
        # the borrower's unanswered patch, if any: it may have landed (handed up to the action's list)
        with self.api.writes(hand_up=True) as doubt:
            try:
                if not replaced:
                    noted = self._mark(from_queue, move, RECEIVED, before)
            except Untold:   # nothing written on the borrower, the lender's record gone: nothing to roll back
                raise
            except ActuationError as err:
                if owed:
                    return "; ".join([*settled, self._left_open(from_queue, move, err)])
                if not self._roll_back(from_queue, move, bool(doubt), before):
                    raise
        if noted == VOID:   # another controller's settle (a shard's housekeeping) rolled the move back midway
            raise _rolled_back(from_queue, move)
        done = f"kueue quota {move.gpus} x {GPU_RESOURCE} ({flavor}): {from_queue} -> {to_queue} (cohort {cohort})"
        return "; ".join([*settled, done])

    def settle(self, queue: str) -> str | None:
        """Finish the quota move the ClusterQueue `queue` lent for and did not see through (a restart, a failure
        between the two writes): completed, or rolled back when its record says `undo` (`k8s_transfer`). Each step
        skips what is already done: settling twice, or after a restart at any point, applies nothing twice.
        Returns what it did, None when nothing was open. Where the borrower's note cannot say whether it took the
        move (hand-edited, deleted, no entry for the lender), the queues' loans notes do (`_told_by_loans`); where
        they cannot either, it refuses, a temporary error, logged and in `unsettled`, until they are mended."""
        return self._settle(queue, {queue: self._read_queue(queue)})

    def settle_all(self, queues: tuple[str, ...]) -> list[str]:
        """`settle` each queue, then make what it owes (`_pay`): a restarted controller's first cycle, and each cycle
        after, finish moves left open."""
        return [note for q in queues if (note := self.settle(q))] + self._pay(queues)

    def owes(self, lender: str) -> int:
        """The GPUs of quota the ClusterQueue `lender` owes, in this controller's memory (`shift`'s `owed`)."""
        return sum(debt.move.gpus for debt in self.owed.get(lender, ()))

    def _pay(self, queues: tuple[str, ...]) -> list[str]:
        """The debts `queues` owe (`owed`), each made now as far as `_pay_one` finds it still owed: one still failing
        stays owed, a note; a permanent refusal (the queues changed since) is dropped, logged."""
        notes = []
        for lender in queues:
            for debt in self.owed.pop(lender, []):
                move = debt.move
                what = (f"owed kueue quota give-back {move.id} ({move.gpus} x {GPU_RESOURCE} ({move.flavor}): "
                        f"{lender} -> {move.to})")
                try:
                    notes.append(f"{what}: {self._pay_one(lender, debt)}")
                except TemporaryActuationError as err:
                    notes.append(f"{what} still owed: {err}")   # kept owed (`_pay_one`, `_shift`)
                except ActuationError as err:
                    log.error("%s dropped: %s", what, err)
                    notes.append(f"{what} dropped: {err}")
        return notes

    def _pay_one(self, lender: str, debt: Debt) -> str:
        """Make the debt as far as the queues' own records say it is still owed, shared as they are with other
        controllers (shards on the cohort, the next leader) that know nothing of it:

        * a lowering that landed (unanswered: `Debt.doubt`) and whose record another move replaced since, as the
          lender's move history says (`_lowered`), was completed by a settle first (a record is replaced only once
          settled): dropped, never made twice (its own record, still there, was settled by `settle` already). One
          the history shows never landed is made. Where the history cannot say (written by an older gputide, or
          more moves since than it keeps), a doubtful one whose record is not the lender's last (nor the move it
          replaced) is dropped, logged: made twice would take the GPUs from training twice;
        * only what training holds beyond its Jobs' needs goes (`k8s_quota_drift.spare`): a check of the loan another
          controller made (`reconcile`) may have given part of it back already. The part its Workloads' status still
          reserves waits (Kueue catching up with the shrink); the part its Workloads and Jobs hold is dropped, logged,
          once held so for the `Sightings` age (a resize under way), and waits until then.

        What is made goes as the same move (`_shift`); what is left stays owed. A temporary failure raises, the debt
        kept owed."""
        move, now = debt.move, self.api.clock()
        try:
            read = self._read_queue(lender)
            last = (found.id if (found := last_move(read)) else None)
            if last == move.id:   # its lowering landed: `settle` completes it from its record
                return "its lowering landed: completed from its record by the settle"
            if (lowered := _lowered(move.id, debt.before, _moves(read))) is True:
                return f"dropped: its lowering landed, settled since ({lender}'s last move is {last})"
            if debt.doubt and last != debt.over and lowered is None:
                log.error("kueue quota give-back %s (%d x %s, %s -> %s) dropped: its lowering may have landed "
                          "unanswered, and %s's last move is %s since: another controller's settle completed it",
                          move.id, move.gpus, move.flavor, lender, move.to, lender, last)
                return f"dropped: {lender}'s last move is {last} since, its own perhaps completed by another's settle"
            room = self._spare(read, move.flavor)
        except TemporaryActuationError:
            self.owed.setdefault(lender, []).append(debt)
            raise
        short = move.gpus - min(move.gpus, room.most)   # what its Jobs hold, or another's give-back took
        since = (now if debt.short_since is None else debt.short_since) if short else None
        gone = short if since is not None and now - since >= self.excess_seen.min_age_s else 0
        pay = min(move.gpus, room.now)
        notes = []
        if gone:
            log.error("kueue quota give-back %s: %d of its %d GPUs dropped: %s's Workloads and Jobs hold them (or "
                      "another controller's check gave them back), for %.0fs", move.id, gone, move.gpus, lender,
                      now - since)
            notes.append(f"{gone} GPUs dropped: {lender}'s Jobs hold them")
        if rest := move.gpus - pay - gone:
            left = replace(debt, move=replace(move, gpus=rest)) if not pay else Debt(
                replace(move, id=uuid.uuid4().hex[:12], gpus=rest))
            self.owed.setdefault(lender, []).append(replace(left, short_since=since if short > gone else None))
            notes.append(f"{rest} GPUs still owed ({lender} keeps {room.held} for its Jobs, and what its status "
                         "reserves)")
        if pay:
            notes.insert(0, f"{pay} made: {self._shift(lender, replace(move, gpus=pay), room.held, True)}")
        return "; ".join(notes)

    def _spare(self, lender: Json, flavor: str) -> Spare:
        """What the training queue `lender` holds beyond its Jobs' needs in `flavor` (`k8s_quota_drift.spare`)."""
        return spare(lender, [flavor], *self._workloads_and_jobs())[flavor]

    def _workloads_and_jobs(self) -> tuple[list[Json], list[Json]]:
        """All Workloads and Jobs, what training's Jobs hold is reckoned from (`k8s_quota_drift.held`)."""
        workloads = self.api("kueue workloads", self.api.custom.list_cluster_custom_object, *KUEUE_WORKLOADS,
                             "workloads").get("items") or []
        return workloads, self.api("list jobs", self.api.batch.list_job_for_all_namespaces).get("items") or []

    def reconcile(self, queues: tuple[str, str]) -> list[Excess]:
        """Give back to the inference queue (`queues[0]`) the quota lent to training (`queues[1]`) beyond what
        training's Workloads and Jobs hold (`k8s_quota_drift`): a loan left by a grow that never happened, a resize
        undone by someone, a grown Job that has finished; only once seen on consecutive checks for long enough
        (`Sightings`: not a grow whose Job resize is under way). Each is a move like any other (`shift`), made only
        if training, read again in the patch that lowers it, keeps what its Jobs hold. Returns the corrections made."""
        inference, training = queues
        read = {q: self._read_queue(q) for q in queues}
        found: list[Excess] = []
        if worth_reading(read[inference], read[training]):   # else no loan out, or all of training's quota in use
            found = excess(read[inference], read[training], *self._workloads_and_jobs())
        done = []
        for cut in self.excess_seen.lasting(read[inference], read[training], found, self.api.clock()):
            self.shift(training, inference, cut.gpus, cut.flavor, keep=cut.held)
            log.warning("%s", cut.note(training, inference))
            done.append(cut)
        return done

    def _settle(self, lender: str, read: dict[str, Json]) -> str | None:
        move = last_move(read[lender])
        if move is None:
            self.unsettled.discard(lender)
            return None
        if any(d.move.id == move.id for d in self.owed.get(lender, ())):   # an owed lowering landed: settled here
            self.owed[lender] = [d for d in self.owed[lender] if d.move.id != move.id]
        borrower = read.get(move.to) or self._read_queue(move.to)
        noted = state(borrower, lender, move.id)
        if noted is None and noted_id(borrower, lender) is None:   # its note cannot tell: the loans notes do
            noted = RECEIVED if self._told_by_loans(lender, read[lender], borrower, move) else None
        self.unsettled.discard(lender)
        if noted == RECEIVED:
            return None   # settled: the record stays as the lender's last move
        if noted != VOID:
            noted = self._mark(lender, move, VOID if move.undo else RECEIVED, noted_id(borrower, lender))
        if noted == VOID:
            self._close(lender, move)
        done = "completed" if noted == RECEIVED else "rolled back"
        log.warning("kueue quota move %s (%d x %s, %s -> %s) found open: %s", move.id, move.gpus, move.flavor,
                    lender, move.to, done)
        return (f"kueue quota move {move.id} ({move.gpus} x {GPU_RESOURCE} ({move.flavor}): {lender} -> {move.to}) "
                f"{done}")

    def _told_by_loans(self, lender: str, lent: Json, borrower: Json, move: Transfer) -> bool:
        """Whether the lender's open-looking move raised its borrower, where the borrower's note of the lender cannot
        tell (hand-edited, deleted, no entry): as the loans notes say (`k8s_transfer.raised_by_loans`), written with
        each queue's nominalQuota. Where they cannot tell either, the settle refuses, a temporary error, logged and
        shown in `gputide_kueue_quota_unsettled{queue}` (`unsettled`): completed again, a move raised already would
        put its GPUs in the cohort twice; taken as raised, one that was not would leave the cohort short."""
        raised, why = raised_by_loans(lent, borrower, lender, move)
        if raised is not None:
            return raised
        self.unsettled.add(lender)
        what = f"kueue quota move {move.id} ({move.gpus} x {GPU_RESOURCE} ({move.flavor}): {lender} -> {move.to})"
        log.error("%s not settled: %s's %s does not note it (hand-edited, deleted, or no entry for %s), and %s: mend "
                  "the notes by hand (check both queues' nominalQuota); until then no quota moves between the two",
                  what, move.to, RECEIVED_ANNOTATION, lender, why)
        raise KubeTemporaryError(f"{what} not settled: {move.to}'s {RECEIVED_ANNOTATION} cannot tell whether it was "
                                 f"raised, and {why}: mend it by hand; until then no quota moves between {lender} and "
                                 f"{move.to}, nor is any give-back owed made")

    @staticmethod
    def _left_open(lender: str, move: Transfer, err: ActuationError) -> str:
        """The note of an owed move whose raise failed: left open for the next settle to complete (`shift`)."""
        log.error("kueue quota move %s half-done, %s lent %d GPUs to %s not raised yet; its record there has the next "
                  "settle complete it: %s", move.id, lender, move.gpus, move.to, err)
        return (f"kueue quota move {move.id} ({move.gpus} x {GPU_RESOURCE} ({move.flavor}): {lender} -> {move.to}) "
                f"half-done, {move.to} not raised yet ({err}): its record on {lender} has the next settle complete it")

    def _roll_back(self, lender: str, move: Transfer, doubt: bool, before: str | None) -> bool:
        """After raising the borrower failed: the lender given its quota back, on the action's reserve; first the
        borrower noted VOID (`before`: its note of the lender's moves before this one, `_mark`), whether or not that
        raise may have landed unseen (`doubt`). Refused with an answer, ours did not, but another controller's settle
        that found the move open may be raising it now (its patch on the borrower's resourceVersion as it read it):
        only a note on the borrower stops that patch, and the lender given back without one, the GPUs were in both
        queues. True when it turns out raised after all (ours, unanswered, or that settle's): the move is complete,
        not rolled back. Where the raise was answered and the note is refused for good too (the borrower gone, not
        ours to write), no settle raises it either: rolled back unfenced. A failure is logged, the record left open
        for `settle`."""
        try:
            with self.api.reserve():   # undoing: on the time the action's deadline keeps for it
                try:
                    if self._mark(lender, move, VOID, before) == RECEIVED:
                        return True
                except PermanentActuationError as err:
                    if doubt or isinstance(err, Untold):
                        raise
                    log.warning("kueue quota move %s: %s not noted void (%s): %s given back unfenced", move.id,
                                move.to, err, lender)
                self._close(lender, move)
        except Untold:
            raise
        except ActuationError as err:
            log.error("kueue quota move %s half-done, %s lent %d GPUs to %s; its record there settles it later: %s",
                      move.id, lender, move.gpus, move.to, err)
        return False

    def _read_queue(self, name: str) -> Json:
        return self.api(f"clusterqueue {name}", self.api.custom.get_cluster_custom_object, *KUEUE, name)

    def _update(self, queue: str, change: Callable[[Json], Json | None]) -> None:
        what = f"clusterqueue {queue}"
        self.api.update(what, lambda: self._read_queue(queue), lambda body: self.api(
            what, self.api.custom.patch_cluster_custom_object, *KUEUE, queue, body, _content_type=MERGE_PATCH), change)

    def _lend(self, lender: str, move: Transfer, keep: int | None = None, settled: str | None = None,
              over: list[str | None] | None = None) -> bool:
        """Lower the lender by the move, its record in the same patch. Once: a patch that landed without an answer
        is retried by the gateway, answered 409 and read again; a queue found with the move's record, or with its id
        in its move history (`MOVES_ANNOTATION`: another controller settled it and moved since, in the retry's wait),
        is that write having landed (`_Api.update` would otherwise take the GPUs a second time). True in the second
        case: that settle completed the move, not to be raised again. An `undo` move a settle rolls back (its
        borrower not raised yet): the rolled-back error, nothing lowered again (that lent it anew under its id: the
        history held the id twice, the lender short of it with an open record until the next settle), so no id is
        ever in the history twice. With `keep`, refused (nothing written) where the lender would be left below it
        or below what its status reserves.

        The record replaces the lender's last move only once that one is settled (`settled`: the id `shift` saw
        settled; another is asked of its borrower): a move another controller (a shard) lent for since, not yet
        raised nor rolled back, is refused as a temporary error, nothing written, for the next cycle's settle to
        finish first. Overwritten, its record would be gone: nothing would raise its borrower or give its lender
        the quota back, and the cohort would lose its GPUs. `over` is given the id of the last move the patch would
        replace and the last id of the lender's move history (`MOVES_ANNOTATION`, which the patch adds the move's
        to), as last read (None: none)."""
        replaced: list[bool] = []

        def change(cq: Json) -> Json | None:
            moves = _moves(cq) or []
            if (last := last_move(cq)) is not None and last.id == move.id:
                return None   # our unanswered write landed
            if move.id in moves:   # it landed, and another controller's settle (and perhaps its move) followed
                if move.undo:
                    raise _rolled_back(lender, move)
                replaced[:] = [True]   # that settle completed it
                return None
            if over is not None:
                over[:] = [last.id if last else None, moves[-1] if moves else None]
            if last is not None and last.id != settled and state(self._read_queue(last.to), lender,
                                                                  last.id) != RECEIVED:
                raise KubeTemporaryError(f"clusterqueue {lender}: {move.gpus} x {GPU_RESOURCE} ({move.flavor}) not "
                                         f"moved: it holds another controller's open move {last.id} to {last.to}, "
                                         "settled first (next cycle)")
            left = (nominal(cq, move.flavor) or 0) - move.gpus
            if keep is not None and left < (floor := max(keep, reserved(cq, move.flavor))):
                raise KubeTemporaryError(f"clusterqueue {lender}: {move.gpus} x {GPU_RESOURCE} ({move.flavor}) not "
                                         f"moved: it would keep {left}, its workloads hold {floor}")
            return with_notes(_quota_patch(cq, lender, -move.gpus, move.flavor), {
                TRANSFER_ANNOTATION: move.note(), MOVES_ANNOTATION: json.dumps([*moves[1 - MOVES_KEPT:], move.id])})

        self._update(lender, change)
        return bool(replaced)

    def _mark(self, lender: str, move: Transfer, want: str, before: str | None) -> str:
        """The borrower noted `want` for the lender's move, raised by it if RECEIVED; nothing when it noted the move
        already (an unanswered write that landed, a settle before). Returns the borrower's note.

        Nor when another controller settled the move and the lender moved again since (`_settled_since`): the
        borrower keeps one note per lender, so its note of the next move replaced this one's, and raising it
        again would move the GPUs twice. `before` is the id it noted for the lender when the move was found open
        (`noted_id`): while it still notes that one, the move is open, and the lender is read only where it
        notes another (a move since, or, in `shift`, a settle of the one before ours). Where the lender cannot say,
        the `Untold` error: not raised, and not taken for settled either."""
        noted: list[str] = []

        def change(cq: Json) -> Json | None:
            if got := state(cq, lender, move.id):
                noted[:] = [got]
                return None
            if noted_id(cq, lender) != before and self._settled_since(lender, move):
                noted[:] = [VOID if move.undo else RECEIVED]
                return None
            noted[:] = [want]
            raised = _quota_patch(cq, move.to, move.gpus, move.flavor) if want == RECEIVED else {}
            return with_notes(raised, {RECEIVED_ANNOTATION: received_note(cq, lender, move.id, want)})

        self._update(move.to, change)
        return noted[0]

    def _settled_since(self, lender: str, move: Transfer) -> bool:
        """Whether the lender's move, open when last seen, was settled by another controller since (`_mark`): its
        record on the lender is another move's or none (a record is replaced only once its move is settled, and a
        roll back removes it). Settled is completed for a move without `undo` (a settle completes those); one with
        `undo` a settle rolls back, unless this controller's raise landed unanswered first, which nothing left tells
        apart: taken as rolled back (nothing more raised), a loan training's Jobs do not hold is what the drift
        check gives back (`reconcile`). The lender's move history (`MOVES_ANNOTATION`) holding the id confirms it;
        one without it (hand-edited) cannot say: nothing is raised, the lower risk (the cohort perhaps short of the
        move's GPUs) against the GPUs moved twice, and it is the `Untold` error, logged (taken as settled, the
        action that made the move was reported applied, the cohort short with only a log line saying so)."""
        read = self._read_queue(lender)
        if (last := last_move(read)) is not None and last.id == move.id:
            return False
        if move.id not in (history := _moves(read) or []):
            log.error("kueue quota move %s (%d x %s, %s -> %s): %s's record is %s, its history %s, without it: "
                      "not raised (settled by another controller, or hand-edited); the cohort may be %d GPUs short",
                      move.id, move.gpus, move.flavor, lender, move.to, lender, last.id if last else None, history,
                      move.gpus)
            raise Untold(f"kueue quota move {move.id} ({move.gpus} x {GPU_RESOURCE} ({move.flavor}): {lender} -> "
                          f"{move.to}): {lender} lowered, {move.to} not raised: {lender}'s record and move history "
                          f"({MOVES_ANNOTATION}) no longer name it (hand-edited), so whether another controller "
                          f"completed it cannot be told; not raised: the cohort may be {move.gpus} GPUs short, check "
                          "both queues' nominalQuota by hand")
        if move.undo:
            log.warning("kueue quota move %s (%d x %s, %s -> %s) settled by another controller: rolled back (or "
                        "completed, had its raise landed unanswered)", move.id, move.gpus, move.flavor, lender,
                        move.to)
        return True

    def _close(self, lender: str, move: Transfer) -> None:
        """The lender given the move's quota back, its record removed in that patch (nothing once removed)."""
        def change(cq: Json) -> Json | None:
            if (last := last_move(cq)) is None or last.id != move.id:
                return None
            return with_notes(_quota_patch(cq, lender, move.gpus, move.flavor), {TRANSFER_ANNOTATION: None})

        self._update(lender, change)


class Untold(PermanentActuationError):
    """A move open when last seen whose lender no longer says whether another controller settled it since
    (`KueueQuota._settled_since`): not raised, the cohort perhaps short of its GPUs. Permanent: a retry reads the
    same queues; what is left to do is by hand."""


def _rolled_back(lender: str, move: Transfer) -> KubeTemporaryError:
    """The error of a move another controller's settle rolled back before this one raised its borrower (an `undo`
    move: quota lent ahead of a grow, which waits for it): nothing moved, the grow is next cycle's."""
    return KubeTemporaryError(f"kueue quota move {move.id} {lender} -> {move.to} was rolled back by another "
                              "controller's settle before it was raised: nothing moved; next cycle")


def _checked(read: dict[str, Json], flavor: str | None) -> tuple[str, str]:
    queues = list(read)
    cohorts = {q: cq["spec"].get("cohort") or "" for q, cq in read.items()}
    if not cohorts[queues[0]] or cohorts[queues[0]] != cohorts[queues[1]]:
        raise PermanentActuationError(f"ClusterQueues {queues[0]}, {queues[1]} are not in one cohort: {cohorts}")
    return choose_flavor(read, flavor, GPU_RESOURCE), cohorts[queues[0]]


def _quota_patch(cq: Json, queue: str, delta: int, flavor: str) -> Json:
    """The merge patch adding `delta` to the queue's GPU nominalQuota in `flavor` (only there: other flavors stay
    as they are), its lendingLimit kept within it (`_lending_limit`) and gputide's net moves noted with it
    (`k8s_transfer.loans_note`)."""
    groups = cq["spec"].get("resourceGroups") or []
    for group in groups:
        for fl in group.get("flavors") or []:
            for res in fl.get("resources") or []:
                if res.get("name") == GPU_RESOURCE and fl.get("name") == flavor:
                    nominal = int(quantity(res["nominalQuota"])) + delta
                    if nominal < 0:
                        raise PermanentActuationError(f"clusterqueue {queue}: {flavor} nominalQuota would be {nominal}")
                    res["nominalQuota"] = nominal
                    return with_notes({**_lending_limit(cq, res, flavor, nominal), "spec": {"resourceGroups": groups}},
                                      {LOANS_ANNOTATION: loans_note(cq, flavor, delta)})
    raise PermanentActuationError(f"clusterqueue {queue} has no {GPU_RESOURCE} quota (flavor {flavor})")
