"""The Kubernetes soak's Lease adapter carries the safety ledger as `gputide run`'s elector does: without
`load_state` / `save_state` the ledger handover found nothing to read or write, so every failover in the soak started
the new leader's budgets from nothing."""

from __future__ import annotations

from balancer.app.soak_harness import LeaseAdapter
from balancer.ledger_handover import LedgerHandover
from balancer.safety_ledger import SafetyLedger


class Elector:
    """`LeaseLeaderElector`'s surface: the Lease and the ledger annotation on it."""

    def __init__(self) -> None:
        self.state: str | None = None

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        pass

    def load_state(self) -> str | None:
        return self.state

    def save_state(self, text: str) -> int:
        self.state = text
        return 0


def test_the_ledger_one_leader_saves_through_the_adapter_is_the_one_the_next_inherits():
    lease = Elector()
    spent = SafetyLedger(evictions=(100.0, 100.0, 160.0))
    LedgerHandover(LeaseAdapter(lease)).changed(spent)
    assert lease.state is not None
    assert LedgerHandover(LeaseAdapter(lease)).inherit(SafetyLedger()).evictions == spent.evictions
