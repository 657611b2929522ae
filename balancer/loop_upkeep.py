"""What the loop asks the actuator to keep or release on the fleet, when, and under which holds (`LoopUpkeep`).

Actions are not all gputide writes on the fleet: what they leave behind (hot taints and reservations with an
expiry, power caps with theirs, a half-done migration's journal, a quota move's record) is kept up or released by
the actuator itself, through three optional, duck-typed hooks, each returning notes for the log and the audit log
(an actuator without one, such as dry-run's, is simply not asked):

* `recover()`: once per term as leader, at its first cycle that goes on to plan: finishes or abandons what a
  previous process left half-done, renews every power cap's expiry that is due (one already passed included,
  re-applying caps an agent gave back), and releases expired hot taints and reservations. Logged at WARNING;
* `housekeeping()`: every cycle that goes on to plan (the Kubernetes actuator releases expired hot taints and
  reservations there). Logged at INFO;
* `keep_power_caps()`: every cycle the leader holds still for fail-static, and nothing else then: it renews the
  expiry of the power caps already set, so that caps do not lapse on telemetry nobody trusts (a hot GPU losing its
  cap is a change made on that telemetry). Each note is logged after why it runs.

A cycle that holds still touches nothing else, recover and housekeeping included. An emergency stop renews nothing,
even one set while the telemetry is bad: the operator said stop acting, so the caps lapse as a stopped
controller's would, and the log says so once per stop. A new leader whose first cycles hold still recovers at its
first cycle that plans, so it writes under a hold no more than an old leader would: under fail-static, what
`recover()` would release stays until then as an old leader's hold keeps it (a hot taint past its expiry keeps a node
once judged hot closed to new pods, as its cap is kept; opening it would be a change made on telemetry nobody trusts).
A leader whose reads outlived its Lease renews nothing: the caps are then the new leader's.

A hook that raises is logged and audited as `failed`, and the cycle goes on. The log lines are the loop's
(`balancer.loop`), as before this module split off from it; the audit records are the loop's, written through it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol, TypeVar

from balancer.actuate.base import Actuator
from balancer.safety import SafetyGuard

log = logging.getLogger("balancer.loop")   # the loop's log, as before this module split off


class Hold(Protocol):
    reason: str   # why the cycle holds still (`balancer.loop.CycleReport`'s)


H = TypeVar("H", bound=Hold)


class LoopUpkeep:
    """The actuator's hooks for one `Reconciler`: `planning` on a cycle that goes on to plan, `holding_still` on one
    that holds still, `take_office` when its replica takes the lead. `audit(now, record)`, `still_leading()` and
    `progress(what)` are the loop's."""

    def __init__(self, actuator: Actuator, guard: SafetyGuard, *, audit: Callable[[float, dict], None],
                 still_leading: Callable[[], bool], progress: Callable[[str], None]) -> None:
        self.actuator, self.guard = actuator, guard
        self._audit, self._still_leading, self._progress = audit, still_leading, progress
        self.recovered = False          # `recover()` ran in this term as leader
        self.told_caps_lapse = False    # the current emergency stop's warning that caps are not renewed was logged

    def take_office(self) -> None:
        """A new term as leader: `recover()` runs again at its first cycle that plans."""
        self.recovered = False

    def planning(self, now: float) -> None:
        """A cycle that goes on to plan: `recover()` if this term has not yet, then `housekeeping()`."""
        self.told_caps_lapse = False
        if not self.recovered:   # the first cycle as leader that does not hold still
            self.recovered = True
            self._hook(now, "recover", logging.WARNING)
        self._hook(now, "housekeeping", logging.INFO)

    def holding_still(self, now: float, hold: H) -> H:
        """`hold`, after the one write a cycle that holds still may make: for fail-static, the leader has the actuator
        renew the expiry of the power caps it already set (`keep_power_caps()`); under an emergency stop nothing."""
        if getattr(self.actuator, "keep_power_caps", None) is None:
            return hold
        if self.guard.emergency_stopped():
            if not self.told_caps_lapse:
                self.told_caps_lapse = True
                log.warning("emergency stop: the power caps gputide set are not renewed while it is set; "
                            "each node's lapse once their expiry (gputide.io/power-caps-until) passes and its agent "
                            "gives them back")
            return hold
        self.told_caps_lapse = False
        if self._still_leading():   # the reads may have outlived the Lease: the caps are then the new leader's
            self._hook(now, "keep_power_caps", logging.INFO,
                       why=f"holding still ({hold.reason}): only the expiry of the power caps already set is renewed, "
                           "so they do not lapse on telemetry nobody trusts: ")
        return hold

    def _hook(self, now: float, name: str, level: int, why: str = "") -> None:
        """Call the actuator's optional `recover()` / `housekeeping()` / `keep_power_caps()`; log and audit the notes
        it returns (each after `why`, when given)."""
        hook = getattr(self.actuator, name, None)
        if hook is None:
            return
        self._progress(name)   # as long as an action may take (the Kubernetes actuator's deadline bounds both)
        try:
            notes = list(hook() or ())
        except Exception as exc:  # a failing hook is reported; the cycle goes on
            log.warning("%s failed: %s", name, exc)
            self._audit(now, {"action": name, "target": "", "reason": str(exc), "outcome": "failed"})
            return
        for note in notes:
            log.log(level, "%s: %s%s", name, why, note)
            self._audit(now, {"action": name, "target": "", "reason": why + note, "outcome": "applied"})
