"""The give-backs a shrink owes (`k8s_quota.KueueQuota` takes these methods from `OwedGiveBacks`): a shrink's
give-back whose lowering of training failed (nothing moved, or it landed unanswered) is a `Debt` in the
controller's memory (`KueueQuota.owed`, `KueueQuota.shift`'s `owed`), made by the next `KueueQuota.settle_all`
(`_pay`) as far as the queues' own records and what training's Jobs leave say it is still owed (`_pay_one`): the
queues are shared with other shards and the next leader, which know nothing of the debt.

A lowering that got no answer is told landed, or not, by the lender's history of its last moves' ids
(`k8s_quota_writes.MOVES_ANNOTATION`, `_lowered`), once later moves replaced its record; only training's spare quota
goes (`k8s_quota_drift.spare`), the part its Jobs hold dropped once held so for the drift check's age.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from balancer.actuate.k8s_quota_drift import Sightings, Spare, spare
from balancer.actuate.k8s_quota_writes import MOVES_KEPT, QuotaWrites, _moves
from balancer.actuate.k8s_transfer import Transfer, last_move
from balancer.actuate.kubernetes import GPU_RESOURCE, Json, _Api
from balancer.errors import ActuationError, TemporaryActuationError

log = logging.getLogger("balancer.actuate.k8s_quota")   # the quota's log, as before this module split off


def _lowered(move: str, before: str | None, moves: list[str] | None) -> bool | None:
    """Whether the lowering of the move `move`, written on a lender whose history then ended with `before` (None:
    none), landed, by the lender's history now (`moves`): True where it holds the id; False where it does not and
    still covers all that came after `before` (holds `before`, or, with none then, never dropped an id); else None."""
    if moves is None:
        return None
    if move in moves:
        return True
    return False if (before in moves if before is not None else len(moves) < MOVES_KEPT) else None


@dataclass(frozen=True)
class Debt:
    """A shrink's give-back owed by its lender, in this controller's memory (`KueueQuota.owed`)."""

    move: Transfer                     # its id the one its lowering was (or may have been) written with
    over: str | None = None            # the lender's last move as read for that lowering, which it would replace
    doubt: bool = False                # that lowering may have landed unanswered (`_Api.writes`)
    short_since: float | None = None   # since when training's Jobs hold part of it, this term (`KueueQuota._pay`)
    before: str | None = None          # the last id of the lender's move history as read then (`_lowered`)


class OwedGiveBacks(QuotaWrites):
    """The owed give-backs of `KueueQuota` (the module docstring), a mixin: `KueueQuota.__init__` sets the gateway
    and the memories below, and `KueueQuota` gives the move (`_shift`) and the reads of training's Jobs
    (`_workloads_and_jobs`)."""

    api: _Api
    owed: dict[str, list[Debt]]   # lender -> its debts (`KueueQuota.__init__`)
    excess_seen: Sightings        # the drift check's: its age is how long a debt's short part waits to be dropped
    _shift: Callable[[str, Transfer, int | None, bool], str]
    _workloads_and_jobs: Callable[[], tuple[list[Json], list[Json]]]

    def owes(self, lender: str) -> int:
        """The GPUs of quota the ClusterQueue `lender` owes, in this controller's memory (`KueueQuota.shift`'s
        `owed`)."""
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
          settled): dropped, never made twice (its own record, still there, was settled by `Settles.settle` already).
          One the history shows never landed is made. Where the history cannot say (written by an older gputide, or more
          moves since than it keeps), a doubtful one whose record is not the lender's last (nor the move it replaced) is
          dropped, logged: made twice would take the GPUs from training twice;
        * only what training holds beyond its Jobs' needs goes (`k8s_quota_drift.spare`): a check of the loan another
          controller made (`KueueQuota.reconcile`) may have given part of it back already. The part its Workloads'
          status still reserves waits (Kueue catching up with the shrink); the part its Workloads and Jobs hold is
          dropped, logged, once held so for the `Sightings` age (a resize under way), and waits until then.

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
