"""The settle of a Kueue quota move left open (`k8s_quota.KueueQuota` takes these methods from `Settles`): a
restart or a failure between the lender's lowering and the borrower's raise leaves the lender's record of the move
open, and `settle` finishes it, completed or rolled back when its record says `undo` (`k8s_transfer`), each step
skipping what is already done (`k8s_quota_writes`).

Whether the borrower took the move is its note of the lender's moves (`gputide.io/quota-received`); where that
cannot tell (hand-edited, deleted, no entry for the lender), the two queues' loans notes do
(`k8s_transfer.raised_by_loans`); where they cannot either, the settle is refused until the notes are mended by
hand, and the lender is in `unsettled` (`gputide_kueue_quota_unsettled{queue}`, `k8s_quota.unsettled_gauge`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from balancer.actuate.k8s_quota_owed import Debt
from balancer.actuate.k8s_quota_writes import QuotaWrites
from balancer.actuate.k8s_transfer import (
    RECEIVED,
    RECEIVED_ANNOTATION,
    VOID,
    Transfer,
    last_move,
    noted_id,
    raised_by_loans,
    state,
)
from balancer.actuate.kubernetes import GPU_RESOURCE, Json, KubeTemporaryError

log = logging.getLogger("balancer.actuate.k8s_quota")   # the quota's log, as before this module split off


class Settles(QuotaWrites):
    """The settles of `KueueQuota` (the module docstring), a mixin: `KueueQuota.__init__` sets the memories below."""

    owed: dict[str, list[Debt]]   # lender -> its debts (`k8s_quota_owed`): one whose lowering landed is settled here
    unsettled: set[str]           # lenders whose last move's settle is refused (`_told_by_loans`)
    _read_once: Callable[[str], Json]   # the queue as the cycle read it (`KueueQuota.reads_once`), else read now

    def settle(self, queue: str) -> str | None:
        """Finish the quota move the ClusterQueue `queue` lent for and did not see through (a restart, a failure
        between the two writes): completed, or rolled back when its record says `undo` (`k8s_transfer`). Each step
        skips what is already done: settling twice, or after a restart at any point, applies nothing twice.
        Returns what it did, None when nothing was open. Where the borrower's note cannot say whether it took the
        move (hand-edited, deleted, no entry for the lender), the queues' loans notes do (`_told_by_loans`); where
        they cannot either, it refuses, a temporary error, logged and in `unsettled`, until they are mended."""
        return self._settle(queue, {queue: self._read_once(queue)})

    def _settle(self, lender: str, read: dict[str, Json]) -> str | None:
        move = last_move(read[lender])
        if move is None:
            self.unsettled.discard(lender)
            return None
        if any(d.move.id == move.id for d in self.owed.get(lender, ())):   # an owed lowering landed: settled here
            self.owed[lender] = [d for d in self.owed[lender] if d.move.id != move.id]
        borrower = read.get(move.to) or self._read_once(move.to)
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
