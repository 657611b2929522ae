"""The safety ledger between leaders (`LedgerHandover`): what a new leader inherits, and what the leader hands on.

A restart or a fail-over must never reset the safety budgets. The leader saves its ledger where a successor reads
it (the elector's `save_state`, e.g. an annotation on the Lease) after every change, and a new leader merges what it
finds there (`load_state`) into its own (cooldowns and evictions only restrain: `SafetyLedger.merged`); when its own
holds what the one found lacks, it saves the merge at once. A save that fails is tried again every cycle until one
succeeds, not only after the next action: a leader change in a quiet spell would otherwise hand on a ledger without
the last actions' evictions. Neither failure stops the controller.

Without leader election the ledger has no Lease to ride on: `gputide run --ledger-file PATH` keeps it in a file
(`balancer.ledger_file.LedgerFile`, the same `load_state` / `save_state`), read when the controller takes office and
saved as the Lease would be, so a restart (a crash loop, `--once` from cron) keeps the budgets spent. With both the
Lease and a file, a new leader merges what it finds in both (a store that lacks what the merge holds is saved at
the cycle's start, so each gets what the other held) and every save goes to both: it counts (evictions go) only once
both hold the ledger. Without either, budgets and cooldowns start afresh at every restart (`gputide run` warns).
A `--once` run has no next cycle to try a failed save again: it saves a still-unsaved ledger before it exits
(`saved_before_exit`) and exits non-zero when that fails (balancer/cmd/run.py).

No eviction before it is saved: the guard's review (`review`) writes the ledger with the evictions and cooldowns
of the actions it accepted (a reservation) before the loop carries any out, and when that write fails the evictions
wait (rejected as `eviction_budget`: none may be spent that a successor would not know of), so a crash or fail-over
never lets the next leader spend budget this one already spent. Reclaims of loaned GPUs still go (the budget never
refuses them), as does everything that evicts no pod. The cooldowns are in the reservation too: saved only after
acting, a power cap's or a taint's was lost to a process killed in between (SIGKILL, OOM), and the next leader could
cap or taint the same GPU or node again inside `powerCooldownS`. So a cycle that acts writes the ledger twice (one
Lease write each, and the file's); a cycle with nothing accepted, or only renewals of hot taints (they set no
cooldown), writes none before acting. The reservation is dated at the cycle's start and replaced by the ledger
itself once the actions are done (or at the next cycle's start).

An inherited ledger that cannot be read (an annotation cut short, edited by hand; a ledger file this process cannot
read, or an empty one: `balancer.ledger_file`) holds what the previous leader spent, unknown: this replica takes the
eviction budget as spent for one eviction window from its first review (`held`: a ledger of `evictionBudget` evictions
at that time, merged into every review and every save, so a successor of this one inherits it too), with a warning that
says so. Until the window has passed no eviction happens but a reclaim of loaned GPUs (the budget never refuses one);
actions that evict nothing go on. Before that first review nothing is saved over the unreadable ledger, so a successor
in between is as careful.

A failed save is logged and counted (`gputide_ledger_write_failures_total{reason}`: `LEDGER_WRITE_FAILURES`), and
entries the elector left out to fit where it saves (`balancer.ledger_fit`) are counted too
(`gputide_ledger_entries_dropped_total`, at every save that cuts: the same old entry counts at each).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any
from weakref import WeakKeyDictionary

from prometheus_client import CollectorRegistry, Counter

from balancer.actions import Action, ScaleTraining
from balancer.actuate.leader import LEDGER_WRITE_FAILURES, LedgerNotSaved
from balancer.model import ClusterSnapshot
from balancer.safety import EvictionBudgetExhausted, Review, SafetyGuard, count_evictions
from balancer.safety_ledger import SafetyLedger

log = logging.getLogger(__name__)


class HeldForLedger(EvictionBudgetExhausted):
    """An eviction the guard accepted that the hand-over held back, the ledger with it unsaved (`review`): counted
    as `eviction_budget` (the reason is the budget's), yet no refusal of the guard's. The loop keeps such a move off
    only until the ledger is saved (`planner.hold_back`), not `refusedRetryS` (`planner.refuse`), and such a scale (a
    loan that stops placed replicas) waits as made only until then too, not the service's hold (`loop._unsent`)."""


class LedgerMetrics:
    """The hand-over's counters on `registry`, one set per registry (`on`): replicas in one process may share one."""

    _by_registry: WeakKeyDictionary[CollectorRegistry, LedgerMetrics] = WeakKeyDictionary()

    def __init__(self, registry: CollectorRegistry) -> None:
        self.write_failures = Counter(
            "gputide_ledger_write_failures", "Saves of the safety ledger where a successor reads it (the Lease, the "
            "--ledger-file) that failed, by reason; the ledger stays unsaved and is tried again every cycle, "
            "and evictions wait.",
            ["reason"], registry=registry)
        self.entries_dropped = Counter(
            "gputide_ledger_entries_dropped", "Safety-ledger entries left out of a save to fit the Lease annotation "
            "(cooldowns first, evictions last), summed over saves.", registry=registry)
        for reason in LEDGER_WRITE_FAILURES:   # every reason starts at 0, so increase() sees the first failure
            self.write_failures.labels(reason=reason)

    @classmethod
    def on(cls, registry: CollectorRegistry | None) -> LedgerMetrics:
        if registry is None:
            return cls(CollectorRegistry())
        if registry not in cls._by_registry:
            cls._by_registry[registry] = cls(registry)
        return cls._by_registry[registry]


class LedgerHandover:
    """Inherits and hands on the safety ledger through `elector` (its optional `load_state` / `save_state`) and
    `file` (a `balancer.ledger_file.LedgerFile`, `--ledger-file`: the same two calls), counted on `registry` (the
    controller's metrics; None: a private one)."""

    def __init__(self, elector: Any, registry: CollectorRegistry | None = None, file: Any = None) -> None:
        self.stores = tuple(s for s in (elector, file) if s is not None)   # where the ledger is read and saved
        self.unsaved = False   # the ledger changed since a successor could last inherit it
        self.metrics = LedgerMetrics.on(registry)
        self.unreadable = False   # an inherited ledger did not read: `held` is dated at the next review
        self.held = SafetyLedger()   # the budget taken as spent after an unreadable ledger, until its window passes

    def inherit(self, ledger: SafetyLedger) -> SafetyLedger:
        """`ledger` merged with the ones the previous leader (or this controller before a restart) left in every
        store that kept one that reads; `unsaved` when the merge holds what a store lacks (saved at the cycle's
        start: with the Lease and a file, each gets what the other held)."""
        found: list[SafetyLedger] = []
        for store in self.stores:
            load = getattr(store, "load_state", None)
            if load is None:
                continue
            try:
                text = load()
                if text:
                    found.append(SafetyLedger.from_json(text))
                    log.info("inherited safety ledger (%s): %d cooldowns, %d evictions in the window", _where(store),
                             len(found[-1].last_action), len(found[-1].evictions))
                else:
                    found.append(SafetyLedger())
            except ValueError as exc:
                self.unreadable = True
                log.warning("inherited safety ledger unreadable (%s): its evictions are unknown, so the eviction "
                            "budget is taken as spent for one eviction window from the next review (reclaims only): "
                            "%s", _where(store), exc)
        merged = ledger
        for one in found:
            merged = merged.merged(one)
        self.unsaved |= any(merged != one.merged(SafetyLedger()) for one in found)
        return merged

    def changed(self, ledger: SafetyLedger) -> None:
        """`ledger` has what this cycle's actions spent: hand it on now (and until a save succeeds)."""
        self.unsaved = True
        self.hand_on(ledger)

    def hand_on(self, ledger: SafetyLedger) -> None:
        """Save `ledger` for a successor; on failure it stays `unsaved` and the loop calls again next cycle. Not
        while an unreadable ledger's `held` budget is undated: the successor would inherit neither."""
        if not self.unreadable and self._save(_with(ledger, self.held), "tried again next cycle"):
            self.unsaved = False

    def saved_before_exit(self, ledger: SafetyLedger) -> bool:
        """The last save of a run that stops after one cycle (`gputide run --once`: no next cycle tries again):
        `ledger` handed on if still unsaved; False when a save failed and it is still not where the next run reads
        it, so what this run recorded since its last save (the cooldowns of what it did, the evictions dated as
        done) is lost to that run. An unreadable inherited ledger this run never reviewed is left unsaved by design
        (the next run finds it unreadable and holds the budget likewise): nothing is lost, True."""
        if self.unsaved:
            self.hand_on(ledger)
        return not self.unsaved or self.unreadable

    def review(self, guard: SafetyGuard, actions: Iterable[Action], snapshot: ClusterSnapshot, ledger: SafetyLedger,
               now: float) -> Review:
        """`guard`'s review of `actions`, its evictions and cooldowns saved before any is carried out (module
        docstring): the evictions it accepted wait, rejected (`HeldForLedger`), when the ledger with them cannot be
        saved. `ledger` merged with `held` (module docstring)."""
        ledger = _with(ledger, self._held(guard, now))
        review = guard.review(actions, snapshot, ledger, now)
        if not any(getattr(s, "save_state", None) for s in self.stores):
            return review
        reserved = guard.record(ledger, review.accepted, snapshot, now)
        if reserved == guard.record(ledger, (), snapshot, now):   # nothing accepted, or renewals only: no write
            return review
        evicts = any(count_evictions(a, snapshot) for a in review.accepted)
        saved = self._save(reserved, "its evictions wait" if evicts else "tried again after acting")
        self.unsaved = True   # the ledger saved (a reservation) or not: written again once the actions are done
        if saved or not evicts:
            return review
        held = {id(a) for a in held_evictions(review.accepted, snapshot)}
        why = HeldForLedger("the safety ledger could not be saved for a successor: no eviction until it is")
        return Review(tuple(a for a in review.accepted if id(a) not in held),
                      review.rejected + tuple((a, why) for a in review.accepted if id(a) in held))

    def remaining_evictions(self, guard: SafetyGuard, ledger: SafetyLedger, now: float) -> int:
        """The evictions `guard`'s next review will allow (gputide_eviction_budget_remaining): none while an unreadable
        inherited ledger's budget is taken as spent (from the next review, or `held` until its window has passed),
        else what `ledger` leaves."""
        return 0 if self.unreadable else guard.remaining_evictions(_with(ledger, self.held), now)

    def _held(self, guard: SafetyGuard, now: float) -> SafetyLedger:
        """The evictions taken as spent after an unreadable inherited ledger: the whole budget at the first review
        since (`now`), forgotten once its window has passed."""
        window = guard.policy.eviction_window_s
        if self.unreadable:
            self.unreadable = False
            self.held = SafetyLedger(evictions=(now,) * guard.policy.eviction_budget)
            self.unsaved = True   # saved over the unreadable one at the next cycle's start, if not before
            log.warning("safety ledger unreadable at take-over: no eviction but reclaims for %.0f s (the eviction "
                        "budget, %d, taken as spent until then)", window, guard.policy.eviction_budget)
        elif self.held.evictions and now - max(self.held.evictions) >= window:
            self.held = SafetyLedger()
            log.info("the eviction window after an unreadable safety ledger has passed: the budget is this ledger's")
        return self.held

    def _save(self, ledger: SafetyLedger, then: str) -> bool:
        """Whether every store saved `ledger` (each is tried, whichever failed first); a failure logged (with what
        happens `then`) and counted by reason."""
        saved = True
        for store in self.stores:
            save = getattr(store, "save_state", None)
            if save is None:
                continue
            try:
                dropped = save(ledger.to_json())
            except LedgerNotSaved as exc:
                reason, err = exc.reason, exc
            except ValueError as exc:   # no ledger the elector can cut to fit
                reason, err = "invalid", exc
            except Exception as exc:   # an elector's own failure (a transport error ...)
                reason, err = "error", exc
            else:
                if dropped:
                    self.metrics.entries_dropped.inc(dropped)
                continue
            saved = False
            self.metrics.write_failures.labels(reason=reason).inc()
            log.warning("safety ledger not saved for a successor (%s; %s) in %s: %s", reason, then, _where(store), err)
        return saved


def _where(store: Any) -> str:
    """How the log names a store: its own `where` (`LedgerFile`), else the Lease (an elector)."""
    return getattr(store, "where", "the Lease")


def _with(ledger: SafetyLedger, held: SafetyLedger) -> SafetyLedger:
    """`ledger` with the evictions `held` takes as spent (itself, untouched, when there are none)."""
    return ledger.merged(held) if held.evictions else ledger


def held_evictions(accepted: Iterable[Action], snapshot: ClusterSnapshot) -> list[Action]:
    """The accepted actions that must wait while the ledger cannot be saved: every one that evicts a pod, but a
    reclaim of loaned GPUs (the eviction budget never refuses one: `SafetyGuard._count`)."""
    return [a for a in accepted if count_evictions(a, snapshot) and not (isinstance(a, ScaleTraining) and a.reclaim)]
