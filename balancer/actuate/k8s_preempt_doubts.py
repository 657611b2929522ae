"""What a preemptor (`k8s_preempt.Preemptor`) remembers of each victim of its preemptions: one record
(`Doubt`) per (pending pod, node, victim), in one map (`Doubts`), pruned in one place (`Doubts.prune`).

A record says: the victim's uid whose eviction, asked without an answer, may have landed unseen (the doubt) and when
that eviction was last asked (`k8s_preempt.IN_FLIGHT_S`); how many evictions of the pod of which uid got no answer in
the preemption (`k8s_preempt.UNANSWERED_ASKS`); and until when the pending pod, by its uid, does not preempt that
victim there (its node given back after those went unanswered: `Preemptor.resume`). These were four maps keyed alike,
each pruned by hand where a preemption ended (`held`, `release`, `forget`) or a doubt was settled (`_forget`): free
to drift apart, as the asked-at times did from the doubts until `_prune_asked` bound them. Kept in one record, a
doubt and its asked-at time go together, and a preemption's end drops its doubt and count while its pass-over
outlives it (`Doubt.ended`): the pass-over is for the plan that follows the give-back.

The pass-over is for the pending pod of one uid (`over_for`): a pod deleted and made again under its name (a
StatefulSet's, a Job's retry with a fixed name) is another pod, and its preemption weighs every victim afresh. Kept
by name, the new pod inherited it and waited up to `reserve_s` with its preemption never tried. It passes over the
victim of one uid too (`over_victim`), for the same reason: a victim made again under its name was never asked.

Pure bookkeeping: no API call, no clock of its own."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

NEVER = float("-inf")


@dataclass(frozen=True, slots=True)
class Doubt:
    """What one preemption (pending pod, node) knows of one victim (module docstring)."""

    uid: str | None = None    # the victim whose eviction got no answer and may have landed unseen (None: no doubt)
    asked_at: float = NEVER   # when that eviction was last asked: it may still land for `IN_FLIGHT_S`
    counted: str = ""         # the victim's uid whose unanswered evictions `asks` counts
    asks: int = 0             # evictions of that pod asked in the preemption that got no answer
    over_until: float = NEVER   # until when the pending pod does not preempt the victim there
    over_for: str = ""        # the pending pod's uid that pass-over is for ("" for a pod read without one)
    over_victim: str = ""     # the victim's uid passed over ("" for one read without: matched by name)

    @property
    def count(self) -> tuple[str, int] | None:
        """(uid, unanswered asks) of the victim, None when none was counted."""
        return (self.counted, self.asks) if self.asks else None

    def ended(self) -> Doubt:
        """The record once its preemption ended (hold gone or expired, released, a new term): its doubt and count
        dropped (a later preemption there starts afresh), its pass-over kept until it runs out."""
        return Doubt(over_until=self.over_until, over_for=self.over_for, over_victim=self.over_victim)

    def kept(self, now: float) -> bool:
        """Whether the record says anything at `now`: a doubt, a count, or a pass-over still running."""
        return self.uid is not None or self.asks > 0 or self.over_until > now


NOTHING = Doubt()


class Doubts:
    """The records (`Doubt`) of a preemptor's term, by (pending pod, node, victim)."""

    def __init__(self) -> None:
        self._by: dict[tuple[str, str, str], Doubt] = {}

    def get(self, key: str, node: str, victim: str) -> Doubt:
        return self._by.get((key, node, victim), NOTHING)

    def set(self, key: str, node: str, victim: str, **changes: object) -> None:
        """`victim`'s record for `key` on `node` with `changes` (fields of `Doubt`); dropped at the next `prune`
        once it says nothing. A new doubt (`uid`) puts the record last: the doubts are read in the order they were
        made (`doubted`, `Preemptor.release`), as the victims they count are said."""
        old = self._by.pop((key, node, victim), NOTHING) if changes.get("uid") is not None else self.get(
            key, node, victim)
        self._by[(key, node, victim)] = replace(old, **changes)   # type: ignore[arg-type]

    def doubted(self, key: str, node: str) -> list[str]:
        """The victims of `key`'s preemption on `node` whose eviction may have landed unseen."""
        return [v for (k, n, v), r in self._by.items() if k == key and n == node and r.uid is not None]

    def doubting(self, node: str, victim: str, uid: str) -> list[str]:
        """The pending pods whose preemption on `node` doubts the eviction of `victim`, the pod of `uid`."""
        return [k for (k, n, v), r in self._by.items() if n == node and v == victim and r.uid == uid]

    def unsure(self) -> dict[tuple[str, str], dict[str, str]]:
        """(pod, node) -> {victim: uid} of the doubts kept: a view, for reading."""
        view: dict[tuple[str, str], dict[str, str]] = {}
        for (k, n, v), r in self._by.items():
            if r.uid is not None:
                view.setdefault((k, n), {})[v] = r.uid
        return view

    def passed_over(self, key: str, uid: str, now: float) -> dict[tuple[str, str], float]:
        """(node, victim) -> until when: the victims the pending pod `key` of `uid` does not preempt at `now` (none
        for another pod of its name)."""
        return {(n, v): r.over_until for (k, n, v), r in self._by.items()
                if k == key and r.over_for == uid and r.over_until > now}

    def prune(self, now: float, ended: Callable[[str, str], bool] = lambda key, node: False) -> None:
        """The one place records go: those of the preemptions `ended` says ended ((pod, node)) lose their doubt and
        count (`Doubt.ended`), and a record that then says nothing at `now` (`Doubt.kept`) is dropped."""
        self._by = {(k, n, v): r for (k, n, v), old in self._by.items()
                    if (r := old.ended() if ended(k, n) else old).kept(now)}
