"""Kueue's objects for the actuator's training scaling: a Job's Workloads, their activation, and GPU quota moves
between two ClusterQueues of a cohort.

`KueueQuota` reads a Job's Workloads and the ClusterQueues through the gateway's `_Api` and patches the queues'
`nvidia.com/gpu` nominalQuota in one ResourceFlavor (`k8s_quota_patch`); which flavor is decided by the pure rules
of `k8s_kueue` (the one Kueue admitted the Job under, else the only one both queues hold). The lender is lowered
first, so the cohort's total never exceeds what exists, and restored if raising the borrower fails. The two writes
are made durable by a record of the move on the lender, written in the patch that lowers it, and the move's id noted
on the borrower in the patch that raises it (`k8s_transfer`; the writes and their fences against other controllers:
`k8s_quota_writes`): a move a restart (or a failure) left open is settled, completed or rolled back, by `settle`
(`k8s_quota_settle`), before any other move of those queues and at `settle_all`; a lender's record is replaced only
once its move is settled (another controller's open move there refuses the next, never overwritten), and a shrink's
give-back whose raise failed is left open for `settle` to complete (`shift`'s `owed`), one whose lowering failed
(nothing moved, or perhaps landed unanswered) kept owed in the controller's memory and made by the next `settle_all`
as far as the queues' records and what training's Jobs leave say it is still owed (`k8s_quota_owed`: the queues are
shared with other shards and the next leader, which know nothing of the debt; the lender's history of its last
moves' ids, `k8s_quota_writes.MOVES_ANNOTATION`, says whether a lowering that got no answer landed once later moves
replaced its record). Each queue also keeps, in the patch that changes its quota, the net GPUs gputide's moves
brought into it (`k8s_transfer.loans`), and `reconcile` (every cycle) gives back to inference the part of training's
loan its Jobs no longer hold (`k8s_quota_drift`), so a grow that never happened, or one undone since, does not leave
quota behind.

`KueueQuota` is the one public face of all of it: the settles (`Settles`), the owed give-backs (`OwedGiveBacks`)
and the queue writes (`QuotaWrites`) are its mixins, each in its module.

`set_active` stops and resumes a queued Job the way Kueue documents it, through its Workload's `spec.active`
(Kueue owns such a Job's `spec.suspend`: see `k8s_training`).
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_kueue import JOB_UID_LABEL, admitted_flavor, choose_flavor, owned_by
from balancer.actuate.k8s_quota_drift import Excess, Sightings, excess, worth_reading
from balancer.actuate.k8s_quota_owed import Debt, OwedGiveBacks
from balancer.actuate.k8s_quota_settle import Settles
from balancer.actuate.k8s_quota_writes import Untold, _rolled_back
from balancer.actuate.k8s_transfer import RECEIVED, VOID, Transfer, last_move, noted_id
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


def untold_counter(registry: CollectorRegistry | None, queues: tuple[str, str] | None) -> PromCounter:
    """`gputide_kueue_quota_untold_total{queue}`: quota moves the lender `queue` was lowered for and whose borrower
    was not raised because the queues no longer tell whether another controller completed them (`Untold`, counted
    where `k8s_quota_writes` raises it, whichever caller catches it: an action's move, its roll back, a settle). A
    counter, not a gauge: nothing read later says the cohort was mended (the move's record is gone), so there is no
    state to go back to 0; alert on its increase. Both queues' series from 0, so the first one shows as an increase.
    Without a registry, on one of its own (counted, not served)."""
    counter = PromCounter("gputide_kueue_quota_untold", "Kueue quota moves a ClusterQueue was lowered for whose "
                          "borrower was not raised, the queues no longer telling whether another controller completed "
                          "them (the cohort may be short; check both queues' nominalQuota by hand), by the lending "
                          "queue.", ["queue"], registry=registry if registry is not None else CollectorRegistry())
    for queue in queues or ():
        counter.labels(queue=queue)
    return counter



class KueueQuota(OwedGiveBacks, Settles):
    def __init__(self, api: _Api, excess_min_age_s: float = ACTION_DEADLINE_S, *,
                 registry: CollectorRegistry | None = None, queues: tuple[str, str] | None = None) -> None:
        """`registry`, `queues`: where `gputide_kueue_quota_untold_total` is served, and the queues its series start
        at 0 for (`untold_counter`; the actuator's registry and `--kueue-queues`)."""
        self.api = api
        # moves found `Untold`, by lender, counted where raised (`QuotaWrites._settled_since`)
        self.untold = untold_counter(registry, queues)
        # `reconcile` gives back only an excess that lasts (`k8s_quota_drift`): as long as a grow's Job resize may take
        self.excess_seen = Sightings(excess_min_age_s)
        # shrinks' give-backs whose lowering failed (`shift`'s `owed`): lender -> its debts, made by the next
        # `settle_all` (`_pay`). The controller's memory only: a restart (or a new leader) forgets them; kept across
        # this controller's own terms as leader (`new_term`)
        self.owed: dict[str, list[Debt]] = {}
        # lenders whose last move's settle is refused, neither the borrower's note nor the loans notes telling whether
        # it was raised (`_told_by_loans`): `gputide_kueue_quota_unsettled{queue}` (`unsettled_gauge`)
        self.unsettled: set[str] = set()
        # the ClusterQueues as this housekeeping cycle read them (`reads_once`); None outside one
        self._once: dict[str, Json] | None = None

    @contextmanager
    def reads_once(self) -> Iterator[None]:
        """Within it (a housekeeping cycle's settles, `k8s_upkeep`), `settle` reads each ClusterQueue once
        (`_read_once`), and again only after this controller patched it (`_update`): nothing is settled on an object
        older than its own last write. Each read is an API GET: the two queues were read six times a cycle (each
        settle read both, the drift check both again), every cycle and shard; now four (the drift check, `reconcile`,
        reads afresh: its decision has no fence of its own against a peer's correction since). The writes still
        read afresh (`_Api.update`: the patch carries that read's resourceVersion, a 409 reads again), and so do the
        fences read inside one (`_lend`, `_settled_since`) and a move's own reads (`shift`, `_pay_one`): another
        controller's write since the cycle's read is met there, as it was between a settle's read and its write."""
        self._once = {}
        try:
            yield
        finally:
            self._once = None

    def new_term(self) -> None:
        """A new term as leader (`k8s_upkeep.Upkeep.recover`, before anything is settled): the memories that count
        time restart. Those are about the controller's last term: what it saw then says nothing of now, and another
        leader may have moved quota meanwhile (given a loan back, lent anew for a grow whose resize is under way,
        shrunk or grown training's Jobs). So the drift check's sightings are forgotten (`Sightings.forget`: nothing
        given back at the term's first check), and a debt's short part is timed from this term's first payment
        (`Debt.short_since`: not dropped on what training's Jobs held a term ago). The debts themselves are kept:
        paying one is safe whatever happened meanwhile (`_pay_one` reads the queues: the lender's move history,
        `k8s_quota_writes.MOVES_ANNOTATION`, tells a lowering that landed from one that did not, and only training's
        spare quota goes), and dropped, the GPUs a shrink freed would stay training's for good (the drift check gives
        back loans only)."""
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

    def settle_all(self, queues: tuple[str, ...]) -> list[str]:
        """`settle` each queue (`k8s_quota_settle`), then make what it owes (`_pay`, `k8s_quota_owed`): a restarted
        controller's first cycle, and each cycle after, finish moves left open."""
        return [note for q in queues if (note := self.settle(q))] + self._pay(queues)

    def _read_queue(self, name: str) -> Json:
        return self.api(f"clusterqueue {name}", self.api.custom.get_cluster_custom_object, *KUEUE, name)

    def _read_once(self, name: str) -> Json:
        """The queue as this cycle read it (`reads_once`), read now if not yet or patched since (a copy: nothing
        decided on it changes what the next look sees); outside a cycle, read now."""
        if self._once is None:
            return self._read_queue(name)
        if name not in self._once:
            self._once[name] = self._read_queue(name)
        return copy.deepcopy(self._once[name])

    def _update(self, queue: str, change: Callable[[Json], Json | None]) -> None:
        what = f"clusterqueue {queue}"

        def patch(body: Json) -> Json:
            if self._once is not None:   # written (or perhaps, unanswered): the cycle's next look reads it again
                self._once.pop(queue, None)
            return self.api(what, self.api.custom.patch_cluster_custom_object, *KUEUE, queue, body,
                            _content_type=MERGE_PATCH)

        self.api.update(what, lambda: self._read_queue(queue), patch, change)

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
        # read afresh, not as the cycle's settles read them (`reads_once`): the excess is decided here and its write
        # (`shift`) is fenced only by the Jobs' hold, so a peer's correction landing since those reads would be given
        # back a second time, out of training's own quota
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


def _checked(read: dict[str, Json], flavor: str | None) -> tuple[str, str]:
    queues = list(read)
    cohorts = {q: cq["spec"].get("cohort") or "" for q, cq in read.items()}
    if not cohorts[queues[0]] or cohorts[queues[0]] != cohorts[queues[1]]:
        raise PermanentActuationError(f"ClusterQueues {queues[0]}, {queues[1]} are not in one cohort: {cohorts}")
    return choose_flavor(read, flavor, GPU_RESOURCE), cohorts[queues[0]]
