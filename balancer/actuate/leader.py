"""Leader election as the reconcile loop sees it: the `LeaderElector` protocol and the electors that need no cluster.

Only the holder of a Lease acts. The loop asks `try_acquire(now)` when a cycle starts, again after its telemetry
reads and before every action it applies (a cycle may run for minutes on a slow Prometheus or API server, longer
than the Lease lasts), and stops acting the moment it says False: a replica never acts without a valid Lease, so
two replicas never act at once (the way client-go's leaderelection is used). An elector that renews on demand
(`InMemoryLeaderElector`, `LeaseLeaderElector` without its background renewer) renews each time it is asked; one
with a background renewer (`LeaseLeaderElector.start()`) answers from its last renewal, without I/O.

`release()` gives the Lease up on the way out, so a standby takes over at once rather than after the Lease expires.
An elector may count `terms`, the times this replica took the Lease (not its renewals): the loop compares it to tell
a lead lost and taken again between two of its asks (another replica may have led in between) from one held
throughout, and starts a new term as a new leader would.
The Kubernetes elector is `balancer.actuate.k8s_leader.LeaseLeaderElector`.

An elector may also carry the safety ledger to the next holder (`balancer.ledger_handover`): `load_state()` the one
the previous holder left, `save_state(text)` ours, returning how many entries it left out to fit (0 or None: none),
or raising `LedgerNotSaved` (its `reason` one of `LEDGER_WRITE_FAILURES`) when the ledger is not where a successor
reads it: never a silent return, or a crash after it would forget the budget spent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# why a ledger was not saved: the Lease changed since it was read (409); this replica does not hold it; the API server
# did not answer or failed (5xx, 429, timeout); it refused the write (403, 422, ...); the ledger cannot be cut to fit;
# anything else an elector raised
LEDGER_WRITE_FAILURES = ("conflict", "not_leader", "unavailable", "refused", "invalid", "error")


class LedgerNotSaved(Exception):
    """`save_state` did not put the ledger where a successor reads it; `reason` is one of `LEDGER_WRITE_FAILURES`.
    The elector keeps it for its next write as holder; the caller tries again. Raised too when the Lease already
    holds that ledger but the elector's last write to it failed: it writes it again, and raises if that fails."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class LeaderElector(Protocol):
    def try_acquire(self, now: float) -> bool:
        """Acquire or renew leadership; True while this replica may act."""
        ...

    def release(self) -> None: ...


class NullLeaderElector:
    """A single replica: always the leader."""

    def try_acquire(self, now: float) -> bool:
        return True

    def release(self) -> None:
        return None


@dataclass
class InMemoryLease:
    """A Lease record shared by replicas in one process (tests, simulations): holder, renew time, duration."""

    duration_s: float = 15.0
    holder: str | None = None
    renewed_at: float = float("-inf")
    state: str | None = None  # the holder's safety ledger, inherited by the next holder


class InMemoryLeaderElector:
    """coordination.k8s.io Lease semantics on an `InMemoryLease`: renew while held, take over when expired."""

    def __init__(self, lease: InMemoryLease, identity: str) -> None:
        self.lease, self.identity = lease, identity
        self.terms = 0

    def try_acquire(self, now: float) -> bool:
        lease = self.lease
        if lease.holder in (None, self.identity) or now - lease.renewed_at > lease.duration_s:
            self.terms += lease.holder != self.identity   # taken, not renewed
            lease.holder, lease.renewed_at = self.identity, now
            return True
        return False

    def release(self) -> None:
        if self.lease.holder == self.identity:
            self.lease.holder, self.lease.renewed_at = None, float("-inf")

    def load_state(self) -> str | None:
        return self.lease.state

    def save_state(self, text: str) -> int:
        if self.lease.holder != self.identity:
            raise LedgerNotSaved("not_leader", f"{self.identity} does not hold the lease")
        self.lease.state = text
        return 0
