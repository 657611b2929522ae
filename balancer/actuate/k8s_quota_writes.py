"""The writes of one Kueue quota move on its two ClusterQueues (`k8s_quota.KueueQuota` takes these methods from
`QuotaWrites`): the lender lowered with the move's record (`_lend`), the borrower raised with its note of the move
(`_mark`), the lender given the quota back (`_close`), each a read-modify-write on the queue's resourceVersion
(`_Api.update`) that finds its own unanswered write landed and makes nothing twice.

Each is fenced against the other controllers that share the queues (shards on the cohort, the next leader): a
lender's record is replaced only once its move is settled, and a borrower is not raised for a move another
controller settled since (`_settled_since`, by the lender's move history `MOVES_ANNOTATION`). Where the queues no
longer say, the `Untold` error: nothing raised. What is patched is `k8s_quota_patch`'s; what is recorded,
`k8s_transfer`'s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from prometheus_client import Counter as PromCounter

from balancer.actuate.k8s_quota_drift import nominal, reserved
from balancer.actuate.k8s_quota_patch import _quota_patch
from balancer.actuate.k8s_transfer import (
    RECEIVED,
    RECEIVED_ANNOTATION,
    TRANSFER_ANNOTATION,
    VOID,
    Transfer,
    last_move,
    note_value,
    noted_id,
    received_note,
    state,
    with_notes,
)
from balancer.actuate.kubernetes import GPU_RESOURCE, Json, KubeTemporaryError
from balancer.errors import PermanentActuationError

log = logging.getLogger("balancer.actuate.k8s_quota")   # the quota's log, as before this module split off

# on a lender, beside its last move's record (`k8s_transfer`, which names that one only): the ids of its last
# `MOVES_KEPT` moves, oldest first (JSON list), in the patch that lowers it, so that an owed lowering that got no answer
# is known to have landed, or not, once later moves replaced its record (`k8s_quota_owed._lowered`)
MOVES_ANNOTATION = "gputide.io/quota-moves"
MOVES_KEPT = 16


def _moves(cq: Json) -> list[str] | None:
    """The lender's move history (`MOVES_ANNOTATION`): None without one (records of an older gputide) or unreadable."""
    raw = note_value((cq.get("metadata") or {}).get("annotations") or {}, MOVES_ANNOTATION)
    return [str(i) for i in raw] if isinstance(raw, list) else None


class QuotaWrites:
    """The queue writes of `KueueQuota` (the module docstring), a mixin: `KueueQuota` gives the queue's read and
    patch (`_read_queue`, `_update`: the calls its RBAC needs are read from its own code, tests/deploy)."""

    _read_queue: Callable[[str], Json]
    _update: Callable[[str, Callable[[Json], Json | None]], None]
    untold: PromCounter   # `gputide_kueue_quota_untold_total{queue}` (`k8s_quota.untold_counter`), by lender

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

        The record replaces the lender's last move only once that one is settled (`settled`: the id
        `KueueQuota.shift` saw settled; another is asked of its borrower): a move another controller (a shard) lent
        for since, not yet raised nor rolled back, is refused as a temporary error, nothing written, for the next
        cycle's settle to finish first. Overwritten, its record would be gone: nothing would raise its borrower or
        give its lender the quota back, and the cohort would lose its GPUs. `over` is given the id of the last move
        the patch would replace and the last id of the lender's move history (`MOVES_ANNOTATION`, which the patch
        adds the move's to), as last read (None: none)."""
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
        apart: taken as rolled back (nothing more raised), a loan training's Jobs do not hold is what the drift check
        gives back (`KueueQuota.reconcile`). The lender's move history (`MOVES_ANNOTATION`) holding the id confirms
        it; one without it (hand-edited) cannot say: nothing is raised, the lower risk (the cohort perhaps short of
        the move's GPUs) against the GPUs moved twice, and it is the `Untold` error, logged and counted (`untold`; taken
        as settled, the action that made the move was reported applied, the cohort short with only a log line saying
        so)."""
        read = self._read_queue(lender)
        if (last := last_move(read)) is not None and last.id == move.id:
            return False
        if move.id not in (history := _moves(read) or []):
            log.error("kueue quota move %s (%d x %s, %s -> %s): %s's record is %s, its history %s, without it: "
                      "not raised (settled by another controller, or hand-edited); the cohort may be %d GPUs short",
                      move.id, move.gpus, move.flavor, lender, move.to, lender, last.id if last else None, history,
                      move.gpus)
            self.untold.labels(queue=lender).inc()   # here, not where caught: each caller catches it its own way
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
